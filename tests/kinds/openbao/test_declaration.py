"""A vault and a module's own secrets in a declaration: what reads, and errors that name the
file, the key and the fix."""

from __future__ import annotations

from typing import Any

import pytest

from meshtui.controller.plan import declaration
from meshtui.errors import DeclarationError
from tests.fix_mesh import Mesh, consumer

VAULT = {
    "provides": [{"name": "secret", "kind": "openbao", "port": 8200, "ca": "/etc/bao-ca.pem"}],
    "receives": {"secret": "srv/db1/bao/mesh.json"},
    "grants": {"secret": "srv/db1/bao/grants"},
    "admin": "srv/db1/bao/admin.toml",
}


def spec(mesh: Mesh, secrets: list[dict[str, Any]], *, requires_vault: bool = True) -> Any:
    gitea = consumer("app1/gitea")
    if requires_vault:
        gitea["requires"].append({"name": "secret", "file": "/srv/app1/gitea/vault.secret_id"})
    gitea["secrets"] = secrets
    return mesh.spec({"db1/bao": VAULT, "db1/postgres": _pg(), "app1/gitea": gitea})


def _pg() -> dict[str, Any]:
    from tests.fix_mesh import provider

    return provider()


def test_minted_and_supplied_secrets_read(mesh: Mesh) -> None:
    decl = declaration.load(
        mesh.write(
            spec(
                mesh,
                [
                    {"name": "session_key", "mint": {"length": 48, "alphabet": "hex"},
                     "file": "/srv/app1/gitea/session.key", "mode": "0640", "group": "root"},
                    {"name": "smtp_password", "supplied": True, "file": "/srv/app1/gitea/smtp"},
                ],
            )
        )
    )  # fmt: skip
    (minted, supplied) = decl.modules["app1/gitea"].secrets
    assert (minted.name, minted.supplied, minted.length, minted.alphabet) == (
        "session_key", False, 48, "hex",
    )  # fmt: skip
    assert (minted.mode, minted.group) == ("0640", "root")
    assert supplied.supplied and supplied.file == "/srv/app1/gitea/smtp"
    assert {p.id for p in decl.pairs} >= {"secret:app1/gitea->db1/bao"}


@pytest.mark.parametrize(
    ("secrets", "requires_vault", "key", "said"),
    [
        ([{"name": "k", "file": "/srv/k"}], True, "secrets[0]", "either minted"),
        (
            [{"name": "k", "supplied": True, "mint": {}, "file": "/srv/k"}],
            True,
            "secrets[0]",
            "either minted",
        ),
        ([{"name": "k", "mint": {"length": 8}, "file": "/srv/k"}], True, "mint.length", "16"),
        (
            [{"name": "k", "mint": {"alphabet": "emoji"}, "file": "/srv/k"}],
            True,
            "mint.alphabet",
            "not an alphabet",
        ),
        (
            [{"name": "k", "supplied": True, "file": "/srv/k", "mode": "0644"}],
            True,
            "secrets[0].mode",
            "",
        ),
        (
            [{"name": "k", "supplied": True, "file": "/srv/k"}],
            False,
            ".secrets",
            "requires 'secret' 0 times",
        ),
        (
            [
                {"name": "k", "supplied": True, "file": "/a"},
                {"name": "k", "supplied": True, "file": "/b"},
            ],
            True,
            "secrets[1].name",
            "declared twice",
        ),
    ],
)
def test_bad_own_secrets_are_named(
    mesh: Mesh, secrets: list[dict[str, Any]], requires_vault: bool, key: str, said: str
) -> None:
    path = mesh.write(spec(mesh, secrets, requires_vault=requires_vault))
    with pytest.raises(DeclarationError) as caught:
        declaration.load(path)
    text = str(caught.value)
    assert str(path) in text and key in text and said in text, text


def test_an_openbao_pair_takes_no_values(mesh: Mesh) -> None:
    s = spec(mesh, [])
    s["modules"]["app1/gitea"]["requires"][-1]["values"] = {"path": "other"}
    del s["modules"]["app1/gitea"]["secrets"]
    path = mesh.write(s)
    with pytest.raises(DeclarationError, match="takes no values"):
        declaration.load(path)
