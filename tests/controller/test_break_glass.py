"""Break-glass rotation with real agents (uvicorn on Unix sockets) and the session's real
PostgreSQL: a consumer credential file its owner made unusable (over 4 KiB, or immutable, as
the app's user can make its own file before a rotation) vetoes an ordinary rotation, and the
stolen password keeps working; ``rotate --revoke-old`` (and ``watch --revoke-old-overdue``
for an overdue pair) revokes it at the server all the same, says the consumer is locked out,
and the next push once the file is fixed ends in working."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from meshtui.controller import lock
from meshtui.controller.unattended.watch import Watch
from tests.controller.test_rotate import can_login, login_of, refused
from tests.controller.test_watch import with_policy

GITEA = "database:app1/gitea->db1/postgres"
WIKI = "database:app1/wiki->db1/postgres"
FILE = "srv/app1/gitea/db.password"


def oversized(path: Path) -> Callable[[], None]:
    """The file grown past 4 KiB (its owner may write it); returns how to fix it."""
    path.write_bytes(b"x" * 5000)
    return path.unlink


def immutable(path: Path) -> Callable[[], None]:
    """The file made immutable (``chattr +i``): no rename replaces it; returns how to fix it."""
    subprocess.run(["chattr", "+i", str(path)], check=True)
    return lambda: subprocess.run(["chattr", "-i", str(path)], check=True)


DAMAGES = {"oversized": oversized, "immutable": immutable}


@pytest.fixture
def mesh(mesh_with_agents, pg, pg_clean, pg_admin_file) -> Iterator:
    m = mesh_with_agents(consumers={"app1": ["gitea", "wiki"]}, port=pg.port, admin=pg_admin_file)
    with m.controller() as ctl:
        assert ctl.push().ok
    yield m
    lock.WHO = None  # an in-process Watch labels the lock; later tests are operators again
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        subprocess.run(["chattr", "-i", str(m.root / FILE)], check=False)


def status_of(mesh, pid: str) -> dict:
    (row,) = [r for r in json.loads(mesh.cli("status", "--json").stdout) if r["pair"] == pid]
    return row


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_revoke_old_locks_out_a_consumer_that_vetoes_and_push_brings_it_back(mesh, pg, damage):
    path = mesh.root / FILE
    stolen = path.read_text()
    login = login_of(mesh, GITEA)
    fix = DAMAGES[damage](path)
    # an ordinary rotation is vetoed by that end: rolled back, the stolen password still works
    vetoed = mesh.cli("rotate", "--yes", GITEA)
    assert vetoed.returncode == 1, vetoed.stdout + vetoed.stderr
    assert "rolled back" in vetoed.stdout or "converging" in vetoed.stdout, vetoed.stdout
    assert can_login(pg, login, stolen, "gitea_app1") is True
    # break-glass asks like any rotation, and says what it does before
    asked = mesh.cli("rotate", "--revoke-old", GITEA)
    assert asked.returncode == 2 and "pass --yes" in asked.stderr
    assert "LOCKED OUT until a later push" in asked.stdout
    done = mesh.cli("rotate", "--revoke-old", "--yes", GITEA)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "locked out" in done.stdout and "LOCKED OUT: app1/gitea could not take" in done.stdout
    assert refused(can_login(pg, login, stolen, "gitea_app1"))
    # the consumer is behind and says so loudly; the other pair of that node is untouched
    row = status_of(mesh, GITEA)
    assert row["state"] == "stale" and row["reason"].startswith("LOCKED OUT"), row
    assert (row["generation"], row["provider_generation"], row["consumer_generation"]) == (
        row["generation"],
        row["generation"],
        1,
    )
    assert "LOCKED OUT" in mesh.cli("status").stdout
    assert status_of(mesh, WIKI)["generation"] == 1
    events = json.loads(mesh.cli("audit", "--json").stdout)
    (event,) = [e for e in events if e["kind"] == "rotate-revoke-old"]
    assert event["outcome"] == "locked out" and GITEA in event["detail"]["locked_out"]
    # push cannot deliver while the file is as the owner left it; once fixed, it can
    assert mesh.cli("push").returncode == 1
    assert status_of(mesh, GITEA)["reason"].startswith("LOCKED OUT")
    fix()
    pushed = mesh.cli("push")
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    new = path.read_text()
    assert new != stolen and can_login(pg, login, new, "gitea_app1") is True
    assert mesh.cli("probe", GITEA).returncode == 0
    assert status_of(mesh, GITEA)["state"] == "working"


def test_watch_revokes_an_overdue_pairs_old_credential_only_when_told(mesh, pg):
    with_policy(mesh, 'rotate_every = "1h"')
    path = mesh.root / FILE
    stolen = path.read_text()
    login = login_of(mesh, GITEA)
    fix = oversized(path)
    later = lambda: time.time() + 7200  # noqa: E731 (every pair is overdue by then)
    with mesh.controller() as ctl:
        report = Watch(ctl, clock=later, log=print).cycle()
    assert GITEA not in report.rotated
    assert can_login(pg, login, stolen, "gitea_app1") is True  # vetoed without the opt-in
    alerts = []
    with mesh.controller() as ctl:
        watch = Watch(ctl, clock=later, log=print, revoke_old_overdue=True, notify=alerts.append)
        report = watch.cycle()
    assert GITEA in report.rotated and WIKI in report.rotated
    assert refused(can_login(pg, login, stolen, "gitea_app1"))
    assert [(a.event, a.pair) for a in alerts if a.event == "locked-out"] == [("locked-out", GITEA)]
    assert status_of(mesh, GITEA)["reason"].startswith("LOCKED OUT")
    fix()
    assert mesh.cli("push").returncode == 0
    assert can_login(pg, login, path.read_text(), "gitea_app1") is True


def test_a_break_glass_rotation_interrupted_after_its_journal_is_finished_break_glass(mesh, pg):
    """The controller killed right after journaling a ``--revoke-old`` rotation: the next
    command (push) finishes it as one, so the vetoing consumer is locked out, not rolled back."""
    path = mesh.root / FILE
    stolen = path.read_text()
    fix = oversized(path)
    script = textwrap.dedent(f"""
        import os, signal
        from meshtui.controller.core import Controller
        ctl = Controller.open({str(mesh.state)!r})
        ctl.faults["after-journal"] = lambda: os.kill(os.getpid(), signal.SIGKILL)
        ctl.rotate([{GITEA!r}], revoke_old=True)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert done.returncode == -signal.SIGKILL
    with mesh.controller() as ctl:
        (journaled,) = ctl.inventory.open_rotations()
        assert [i.get("revoke_old") for i in journaled["items"]] == [True]
    assert mesh.cli("push").returncode == 1  # the rotation finished; that consumer is behind
    assert refused(can_login(pg, login_of(mesh, GITEA), stolen, "gitea_app1"))
    assert status_of(mesh, GITEA)["reason"].startswith("LOCKED OUT")
    fix()
    assert mesh.cli("push").returncode == 0


async def test_the_dashboard_shows_a_locked_out_pair(mesh) -> None:
    from tests.tui.helpers import RecordingApp, settle

    fix = immutable(mesh.root / FILE)
    with mesh.controller() as ctl:
        report = ctl.rotate([GITEA], revoke_old=True)
    assert report.outcome == "locked out", report
    app = RecordingApp(mesh.state)
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot)
        row = app.model.rows[GITEA]
        assert str(row.status.state) == "stale"
        assert row.cells[-1].startswith("LOCKED OUT: the provider refuses what the consumer holds")
    fix()


def test_revoke_old_does_not_wait_for_a_consumer_node_that_does_not_answer(mesh, pg):
    """Only the providers' nodes must answer a break-glass rotation: a consumer node whose
    agent is down is locked out (an ordinary rotation refuses to start without it)."""
    stolen = mesh.secret(FILE)
    login = login_of(mesh, GITEA)
    mesh.stop("app1")
    assert mesh.cli("rotate", "--yes", GITEA).returncode == 1  # not resolved: nothing sent
    assert can_login(pg, login, stolen, "gitea_app1") is True
    done = mesh.cli("rotate", "--revoke-old", "--yes", GITEA)
    assert done.returncode == 1 and "LOCKED OUT: app1/gitea" in done.stdout, done.stdout
    assert refused(can_login(pg, login, stolen, "gitea_app1"))
    mesh.start("app1")
    assert mesh.cli("push").returncode == 0
    assert can_login(pg, login, mesh.secret(FILE), "gitea_app1") is True
