"""A consumer's reload that fails is that end's failure, with real agents and PostgreSQL.

A failed ``reload`` is never reported as success (``rotate`` saying done, ``drill`` PASSED,
``push`` "all ends agree", the reload never run again). Here a
reload command that fails (and writes an escape sequence on stderr) must make rotate, drill and
push fail and say why, be shown in status, and be run again by the next push.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from meshtui.model import State

GITEA = "database:app1/gitea->db1/postgres"

SCRIPT = """#!/bin/sh
echo run >> {runs}
if [ -e {broken} ]; then
  printf 'System has not been booted with systemd\\033]52;c;aGk=\\007 as init\\n' >&2
  exit 1
fi
exit 0
"""


@pytest.fixture
def mesh(mesh_with_agents, pg, pg_clean, pg_admin_file):
    m = mesh_with_agents(consumers={"app1": ["gitea"]}, port=pg.port, admin=pg_admin_file)
    with m.controller() as ctl:
        assert ctl.push().ok
    return m


def with_reload(mesh) -> tuple[Path, Path]:
    """Declare gitea's reload as a script that fails while ``broken`` exists; (runs, broken)."""
    runs, broken = mesh.root / "reload.runs", mesh.root / "reload.broken"
    script = mesh.root / "reload.sh"
    script.write_text(SCRIPT.format(runs=runs, broken=broken))
    script.chmod(0o755)
    text = mesh.decl.read_text()
    needle = 'file = "srv/app1/gitea/db.password" }'
    assert needle in text
    mesh.decl.write_text(text.replace(needle, needle[:-1] + f', reload = ["{script}"] }}'))
    broken.touch()
    mesh.allow("app1", reload=((str(script),),))  # the node's policy runs it (as the agent's user)
    with mesh.controller() as ctl:
        ctl.declare(mesh.decl)
    return runs, broken


def runs_of(runs: Path) -> int:
    return len(runs.read_text().splitlines()) if runs.exists() else 0


def test_a_failed_reload_fails_rotate_and_push_until_it_works(mesh):
    runs, broken = with_reload(mesh)
    with mesh.controller() as ctl:
        ctl.push()  # the declare's change of reload is delivered (and its reload fails)
        before = runs_of(runs)
        report = ctl.rotate([GITEA])
        assert not report.ok
        (pair,) = report.pairs
        assert pair.generation == report.pairs[0].previous + 1  # the new credential stays
        assert "reload failed: exit 1" in pair.reason
        assert "System has not been booted with systemd" in pair.reason
        assert "\x1b" not in pair.reason and "\\x1b" in pair.reason  # shown, never obeyed
        assert runs_of(runs) == before + 1
        row = {r.pair: r for r in ctl.status()}[GITEA]
        assert row.state is State.STALE and "reload failed" in row.reason
        assert [p.verdict for p in ctl.probe([GITEA])] == ["accepted"]  # the file is right
        # the next push runs the reload again, and fails again
        again = ctl.push()
        assert not again.ok and "reload failed" in again.behind[GITEA]
        assert runs_of(runs) == before + 2
    code = mesh.cli("push")
    assert code.returncode == 1 and "reload failed" in code.stdout, code.stdout
    broken.unlink()
    with mesh.controller() as ctl:
        fixed = ctl.push()
        assert fixed.ok, fixed.behind
        assert [o.pair for o in fixed.delivered] == [GITEA]
        row = {r.pair: r for r in ctl.status()}[GITEA]
        assert "reload" not in row.reason
        quiet = ctl.push()  # nothing left to do: the reload is not run again
        assert quiet.ok and not quiet.delivered
    assert runs_of(runs) == before + 4


def test_rotate_and_drill_exit_non_zero_when_the_reload_fails(mesh):
    _, broken = with_reload(mesh)
    done = mesh.cli("rotate", "--yes", GITEA)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "reload failed" in done.stdout
    drilled = mesh.cli("drill", GITEA)
    assert drilled.returncode == 1, drilled.stdout + drilled.stderr
    assert "FAILED" in drilled.stdout and "reload failed" in drilled.stdout
    broken.unlink()
    drilled = mesh.cli("drill", GITEA)
    assert drilled.returncode == 0, drilled.stdout + drilled.stderr


def test_the_agent_logs_its_start_each_request_and_the_failed_reload(mesh):
    """The agent prints the failed reload, so journalctl -u meshtui-agent is not empty."""
    with_reload(mesh)
    with mesh.controller() as ctl:
        ctl.rotate([GITEA])
    logs = mesh.agent_logs()
    assert "meshtui agent: node app1 starting" in logs
    assert f"listening on unix:{mesh.sockets['app1']}" in logs
    assert "meshtui agent: deliver: ok" in logs and "meshtui agent: state: ok" in logs
    assert f"{GITEA}: reload " in logs and "failed: exit 1: System has not been booted" in logs
    assert "\x1b" not in logs  # the reload's escape sequence is shown, never written raw
    for secret in (
        mesh.root / "srv/app1/gitea/db.password",
        *mesh.root.glob("srv/db1/**/*.secret"),
    ):
        assert secret.read_text() not in logs
