"""OpenBao admin sessions kept between an agent's runs, against a real OpenBao: a rotation on a
kept session is proved alive by one read and then makes only its own reads and writes (no new
TLS connection after seconds idle, no preflight), and a kept session whose token was revoked is never used: the
next run opens a new one and names the token."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from meshtui.contracts.adapter import AdapterFactory
from meshtui.errors import ProvisionError
from meshtui.kinds.openbao import lab as lab_bao
from meshtui.kinds.openbao.kept import KeptSessions
from meshtui.kinds.openbao.lab import admin_text
from meshtui.provisioner.harness import reconcile
from tests.kinds.openbao.conftest import BMesh, outcomes


def provisioner_requests(server: lab_bao.BaoServer, since: int) -> list[dict[str, Any]]:
    """The requests made with the provisioner's token, as OpenBao's audit log recorded them
    after ``since`` bytes (each once)."""
    with server.audit_log.open("rb") as log:
        log.seek(since)
        lines = log.read().decode().splitlines()
    entries = [json.loads(line) for line in lines if line.strip()]
    return [
        e["request"]
        for e in entries
        if e.get("type") == "request"
        and lab_bao.PROVISIONER_POLICY_NAME in ((e.get("auth") or {}).get("policies") or [])
    ]


def kept_by(pool: KeptSessions) -> Any:
    def kept(kind: str) -> AdapterFactory | None:
        return pool.open if kind == "openbao" else None

    return kept


def test_a_rotation_on_a_kept_session_makes_only_its_own_calls(bmesh: BMesh) -> None:
    pool = KeptSessions()
    bmesh.add("app1", "gitea")
    login = bmesh.login_of("app1", "gitea")
    bmesh.write()
    first = reconcile(bmesh.manifest, bmesh.admin, kept=kept_by(pool))
    assert outcomes(first) == {login: "created"}, first.lines()
    old = bmesh.secret("app1", "gitea")
    bmesh.rotate("app1", "gitea")
    bmesh.write()
    mark = bmesh.server.audit_log.stat().st_size
    time.sleep(6)  # longer than httpx keeps an idle connection by default (5 s)
    rotated = reconcile(bmesh.manifest, bmesh.admin, kept=kept_by(pool), only=frozenset({login}))
    assert outcomes(rotated) == {login: "updated"}, rotated.lines()
    # still read back by OpenBao itself: the new secret_id logs in, the old one is refused
    assert not bmesh.refused("app1", "gitea")
    assert bmesh.refused("app1", "gitea", old)
    assert len(bmesh.accessors("app1", "gitea")) == 1
    asked = provisioner_requests(bmesh.server, mark)
    paths = [r["path"] for r in asked]
    assert paths.count("auth/token/lookup-self") == 1, paths  # the loan's proof of life
    assert not [p for p in paths if p.startswith(("sys/auth", "sys/mounts"))], paths
    assert not [p for p in paths if p.endswith("secret-id-accessor/lookup")], paths
    assert paths[-2:] == [
        f"auth/approle/role/meshtui-{login}/custom-secret-id",
        f"auth/approle/role/meshtui-{login}/secret-id-accessor/destroy",
    ], paths
    assert len({r["remote_port"] for r in asked}) == 1, asked  # no new TLS connection


def test_a_kept_session_whose_token_was_revoked_is_replaced_and_named(
    bmesh: BMesh, tmp_path: Path
) -> None:
    with bmesh.root() as bao:
        made = bao.call(
            "POST",
            "auth/token/create",
            {"policies": [lab_bao.PROVISIONER_POLICY_NAME], "ttl": "10m"},
        )
    token = made["auth"]["client_token"]
    admin = tmp_path / "admin.toml"
    admin.write_text(admin_text(bmesh.server.url, str(bmesh.server.ca), token))
    admin.chmod(0o600)
    pool = KeptSessions()
    bmesh.add("app1", "gitea")
    bmesh.write()
    assert set(outcomes(reconcile(bmesh.manifest, admin, kept=kept_by(pool))).values()) == {
        "created"
    }
    with bmesh.root() as bao:
        bao.call("POST", "auth/token/revoke", {"token": token})
    bmesh.rotate("app1", "gitea")
    bmesh.write()
    with pytest.raises(ProvisionError, match="refused the admin token") as caught:
        reconcile(bmesh.manifest, admin, kept=kept_by(pool))
    assert token not in str(caught.value)
    # with the admin file's token renewed, the same pool serves the next run
    admin.write_text(bmesh.server.admin_file.read_text())
    report = reconcile(bmesh.manifest, admin, kept=kept_by(pool))
    assert set(outcomes(report).values()) == {"updated"}, report.lines()
    assert not bmesh.refused("app1", "gitea")
