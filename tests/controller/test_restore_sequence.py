"""No node refuses a restored controller as a replay: the restore numbers its requests past every
node's high-water mark, and a push that is refused as older anyway (a node the restore could not
ask, a sequence file lost) jumps past it and goes on. Real agents, a command provisioner."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from meshtui.controller.core import Controller
from tests.fix_agents import Mesh

pytestmark = pytest.mark.slow


def run(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "meshtui.cli", "--state", str(state), *args],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def test_a_restored_controller_numbers_past_what_every_node_accepted(
    mesh_with_agents, tmp_path: Path
) -> None:
    m: Mesh = mesh_with_agents(
        consumers={"app1": ["gitea"]}, port=5432, admin=None, provisioner=["/bin/true"]
    )
    assert m.cli("push").returncode == 0
    pw = tmp_path / "pass"
    pw.write_text("night passphrase\n")
    pw.chmod(0o600)
    backup = tmp_path / "b"
    assert m.cli("backup", str(backup), "--passphrase-file", str(pw)).returncode == 0
    # after the backup the old controller numbered far past its clock (numbers only have to
    # grow; the agents accepted them), then the machine was lost
    high = int((time.time() + 3600) * 1_000_000)
    (m.state / "sequence").write_text(f"{high:020d}\n")
    done = m.cli("push")
    assert done.returncode == 0, done.stderr

    fresh = tmp_path / "fresh"
    done = run(fresh, "restore", str(backup), "--passphrase-file", str(pw), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["sequence"] > high
    done = run(fresh, "push")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "refused" not in done.stdout + done.stderr

    # a sequence that falls behind anyway (its file lost): push jumps past and goes on
    (fresh / "sequence").unlink()
    done = run(fresh, "push")
    assert done.returncode == 0, done.stdout + done.stderr
    with Controller.open(fresh, read_only=True) as ctl:
        jump = ctl.inventory.last_event("sequence-jump")
        assert jump is not None and jump["detail"]["past"] > high
        assert sorted(jump["detail"]["nodes"]) == ["app1", "db1"]
    assert int((fresh / "sequence").read_text()) > high


def test_a_pair_declared_after_the_backup_is_named_until_declared_again(
    mesh_with_agents, tmp_path: Path
) -> None:
    from tests.fix_agents import write_declaration

    m: Mesh = mesh_with_agents(
        consumers={"app1": ["gitea"]}, port=5432, admin=None, provisioner=["/bin/true"]
    )
    assert m.cli("push").returncode == 0
    pw = tmp_path / "pass"
    pw.write_text("night passphrase\n")
    pw.chmod(0o600)
    backup = tmp_path / "b"
    assert m.cli("backup", str(backup), "--passphrase-file", str(pw)).returncode == 0
    # after the backup a second consumer is declared and delivered
    write_declaration(
        m.root, port=5432, admin=None, consumers={"app1": ["gitea", "wiki"]},
        provisioner=["/bin/true"],
    )  # fmt: skip
    assert m.cli("declare", str(m.decl)).returncode == 0
    assert m.cli("push").returncode == 0
    wiki = "database:app1/wiki->db1/postgres"

    fresh = tmp_path / "fresh"
    assert run(fresh, "restore", str(backup), "--passphrase-file", str(pw)).returncode == 0
    done = run(fresh, "push")
    assert done.returncode == 1, done.stdout  # not "all ends agree": a pair is missing here
    assert f"AHEAD     {wiki}: held by app1 (consumer end), db1 (provider end)" in done.stdout
    assert "declare the current declaration" in done.stdout
    assert run(fresh, "declare", str(m.decl)).returncode == 0
    done = run(fresh, "push")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"AHEAD     {wiki}" in done.stdout and "rotated to generation 2" in done.stdout
    rows = {r["pair"]: r for r in json.loads(run(fresh, "status", "--json").stdout)}
    assert rows[wiki]["consumer_generation"] == rows[wiki]["provider_generation"] == 2
