"""An open dashboard on a PostgreSQL inventory: it shows the pairs, stays up when the server
becomes unreachable and says so (naming the server, never the password), and shows the pairs
again once the server is back."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from textual.worker import WorkerFailed

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
