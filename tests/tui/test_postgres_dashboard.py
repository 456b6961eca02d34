"""An open dashboard on a PostgreSQL inventory: it shows the pairs, stays up when the server
becomes unreachable and says so (naming the server, never the password), and shows the pairs
again once the server is back; another controller's write shows on it within a second,
woken by the inventory's change feed rather than a poll."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import pytest
from textual.worker import WorkerFailed

from meshtui.controller import config
from meshtui.controller.core import Controller
from meshtui.kinds.postgres.lab import Cluster
from tests.fix_lab import cli
from tests.fix_pg import inventory_database
from tests.test_status_read import PAIRS, pair_record
from tests.tui.helpers import RecordingApp, settle

SECRET = "hunter2-never-shown"


@pytest.fixture
def server(own_pg: Cluster) -> Cluster:
    return own_pg


@pytest.fixture
def state(server: Cluster, tmp_path: Path) -> Path:
    """A state folder whose inventory (a few pairs) is on the server; the conninfo carries a
    password libpq never needs (peer login) that must never be shown."""
    folder = tmp_path / "pg"
    folder.mkdir(mode=0o700)
    conninfo = inventory_database(server, folder)
    conninfo.write_text(conninfo.read_text().strip() + f" password={SECRET} connect_timeout=2\n")
    state = tmp_path / "state"
    done = cli(state, "init", "--postgres", str(conninfo))
    assert done.returncode == 0, done.stderr
    with Controller.open(state) as ctl, ctl.inventory.transaction("test") as tx:
        tx.put_pairs([pair_record(pid) for pid in PAIRS])
    return state


async def test_the_dashboard_stays_up_while_postgres_is_away_and_recovers(
    server: Cluster, state: Path
) -> None:
    app = RecordingApp(state, read_only=True)
    async with app.run_test(size=(140, 36)) as pilot:
        await settle(pilot)
        assert len(app.model.rows) == len(PAIRS), app.toast_text()
        server.stop()
        app.reload()
        with contextlib.suppress(WorkerFailed):  # the load fails: what the app does with it
            await settle(pilot)
        await settle(pilot)
        assert app.is_running
        away = [msg for msg, sev in app.toasts if sev == "error"]
        assert away, app.toast_text()
        assert f":{server.port}/" in away[-1] and "PostgreSQL" in away[-1], away[-1]
        assert SECRET not in app.toast_text()
        assert len(app.model.rows) == len(PAIRS)  # what it showed stays shown
        server.start()
        app.toasts.clear()
        app.reload()
        await settle(pilot)
        assert not [msg for msg, sev in app.toasts if sev == "error"], app.toast_text()
        assert len(app.model.rows) == len(PAIRS)


async def test_another_controllers_write_shows_on_the_open_dashboard_within_a_second(
    state: Path, tmp_path: Path
) -> None:
    conninfo = config.inventory_postgres(state)
    other = tmp_path / "ctl-b"
    done = cli(other, "init", "--postgres", str(conninfo), "--name", "ctl-b")
    assert done.returncode == 0, done.stderr
    app = RecordingApp(state, read_only=True)  # no poll: only the feed can wake it
    async with app.run_test(size=(140, 36)) as pilot:
        await settle(pilot)
        assert len(app.model.rows) == len(PAIRS), app.toast_text()
        await pilot.pause(0.5)  # the feed's thread listening
        with Controller.open(other) as ctl_b, ctl_b.inventory.transaction("declare") as tx:
            tx.put_pairs([pair_record("database:late/svc->db1/postgres")])
        committed = time.monotonic()
        while len(app.model.rows) == len(PAIRS):
            assert time.monotonic() - committed < 5, "the dashboard never showed ctl-b's pair"
            await pilot.pause(0.02)
        assert time.monotonic() - committed < 1.0
