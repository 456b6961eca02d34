"""doctor's check of an OpenBao admin file against a real OpenBao: the lab's token holds every
capability the provisioner uses; a token of the default policy alone is named path by path."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from meshtui.kinds.openbao.doctor import admin_rights
from meshtui.kinds.openbao.lab import admin_text
from meshtui.protocol.messages import CheckProvider
from tests.kinds.openbao.conftest import BMesh

ITEM = cast(CheckProvider, {"provider": "db1/openbao", "admin": "", "builtin": True})


def test_the_lab_admin_token_has_every_capability(bmesh: BMesh) -> None:
    assert admin_rights(ITEM, bmesh.server.admin_file, 10.0) == []


def test_a_token_without_the_provisioners_policy_is_named(bmesh: BMesh, tmp_path: Path) -> None:
    with bmesh.root() as bao:
        made: Any = bao.call("POST", "auth/token/create", {"policies": ["default"], "ttl": "5m"})
    admin = tmp_path / "admin.toml"
    admin.write_text(
        admin_text(bmesh.server.url, str(bmesh.server.ca), made["auth"]["client_token"])
    )
    admin.chmod(0o600)
    found = admin_rights(ITEM, admin, 10.0)
    said = "\n".join(problem for problem, _fix in found)
    assert "lacks list, sudo on auth/token/accessors" in said
    assert "on auth/approle/role/meshtui-x" in said
    assert all("meshtui_provisioner" in fix for _problem, fix in found)
    assert made["auth"]["client_token"] not in said


def test_a_sealed_vault_is_named(bmesh: BMesh) -> None:
    with bmesh.root() as bao:
        bao.call("PUT", "sys/seal")
    try:
        assert admin_rights(ITEM, bmesh.server.admin_file, 10.0) == [
            ("OpenBao is sealed", "unseal it (bao operator unseal)")
        ]
    finally:
        bmesh.server.start()
