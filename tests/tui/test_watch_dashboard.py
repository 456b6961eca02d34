"""The dashboard knows about the watch: the header says whether one runs and its last cycle,
pair rows show the policy and when each is due, the filter understands ``due:<7d`` and
``overdue``, and the pair screen names the policy's source."""

from __future__ import annotations

import json
import os
from datetime import timedelta
from typing import Any

import pytest

from meshtui.controller.core import Controller
from meshtui.controller.read.heartbeat import HEARTBEAT
from meshtui.controller.read.schedule import schedule
from meshtui.controller.unattended.watch import Watch
from meshtui.tui.screens.main import MainScreen
from meshtui.tui.screens.pair import PairScreen
from tests.tui.builder import FIXED_NOW, Built
from tests.tui.helpers import settle


def set_policy(built: Built, rotate_s: float, source: str = "global") -> dict[str, Any]:
    """Every pair gets ``rotate_s`` (as declare would store it); returns each pair's schedule."""
    with Controller.open(built.state) as ctl:
        with ctl.inventory.transaction("test policy") as tx:
            tx.put_policies(
                [
                    {"pair": pid, "rotate_every": rotate_s, "probe_every": 300.0,
                     "rotate_source": source, "probe_source": "default"}
                    for pid in built.pairs
                ]
            )  # fmt: skip
        return {d.pair: d for d in schedule(ctl.inventory)}


def beat(built: Built, **fields: Any) -> None:
    body = {"pid": os.getpid(), "started_at": FIXED_NOW.isoformat(), "cycles": 7,
            "last_cycle_at": None, "last_ok_at": None, "stopped_at": None} | fields  # fmt: skip
    (built.state / HEARTBEAT).write_text(json.dumps(body))


async def test_rows_show_policy_and_the_filter_finds_due_and_overdue(
    make_app: Any, built: Built
) -> None:
    plan = set_policy(built, 90 * 86400.0)
    now = FIXED_NOW.timestamp()
    overdue = {p for p, d in plan.items() if d.is_overdue(now)}
    soon = {p for p, d in plan.items() if d.due_at is not None and d.due_at - now < 30 * 86400}
    assert overdue and soon > overdue and soon != set(built.pairs)  # the data tests something
    app = make_app()
    async with app.run_test(size=(200, 40)) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, MainScreen)
        cells = {k: r.cells[COL_AGE] for k, r in app.model.rows.items()}
        assert all(cells[p].startswith("OVERDUE ") for p in overdue)
        assert all(cells[p].endswith(" of 90d") for p in set(built.pairs) - overdue)
        await pilot.press("slash", *"overdue")
        await settle(pilot)
        assert set(screen.table.entries) == overdue
        await pilot.press("enter", "escape", "slash", *keys("due:<30d"))
        await settle(pilot)
        assert set(screen.table.entries) == soon, screen.query_one("#filter").value
        await pilot.press("enter", "escape", "slash", *keys("due:>30d"))
        await settle(pilot)
        assert set(screen.table.entries) == set(built.pairs) - soon


COL_AGE = 8


def keys(text: str) -> list[str]:
    """Key names for typing ``text`` (Textual names '<' and '>' and ':')."""
    names = {"<": "less_than_sign", ">": "greater_than_sign", ":": "colon"}
    return [names.get(c, c) for c in text]


async def test_header_says_whether_a_watch_runs(make_app: Any, built: Built) -> None:
    app = make_app()
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot)
        summary = str(app.screen.query_one("#summary").render())
        assert "watch" not in summary  # no heartbeat: nothing claimed
        beat(built, last_cycle_at=(FIXED_NOW - timedelta(seconds=3)).isoformat())
        app._read_heartbeat()
        await settle(pilot)
        assert "watch running · last cycle 3s ago" in str(app.screen.query_one("#summary").render())
        beat(built, stopped_at=(FIXED_NOW - timedelta(minutes=5)).isoformat())
        app._read_heartbeat()
        await settle(pilot)
        assert "watch stopped 5m ago" in str(app.screen.query_one("#summary").render())
        beat(built, role="standby", leader="ctl-a", lease_s=15.0)
        app._read_heartbeat()
        await settle(pilot)
        assert "watch standing by for ctl-a" in str(app.screen.query_one("#summary").render())


async def test_pair_screen_names_the_policy_source(make_app: Any, built: Built) -> None:
    set_policy(built, 30 * 86400.0, source="provider")
    pid = built.pairs[0]
    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot)
        app.push_screen(PairScreen(pid))
        await settle(pilot)
        text = str(app.screen.query_one("#pair-overview").render())
        assert "policy    rotate 30d (provider), probe 5m (default)" in text
        assert "due in" in text or "OVERDUE" in text


@pytest.mark.parametrize("scope", ["pairs", "read-only", "audit"])
async def test_dashboard_starts_after_a_watch_ran(make_app: Any, built: Built, scope: str) -> None:
    """A ``watch.json`` left by a watch (running or stopped) does not crash the start: the
    heartbeat is read before the main screen has composed its summary bar."""
    with Controller.open(built.state) as ctl:
        Watch(ctl, log=lambda _line: None)._beat(stopped=True)  # what a stopped watch leaves
    assert (built.state / HEARTBEAT).is_file()
    kwargs: dict[str, Any] = {"read_only": scope != "pairs"}
    if scope == "audit":
        kwargs["screen"] = "audit"
    app = make_app(**kwargs)
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot)
        assert app.return_code is None, app.toast_text()
        main = app.screen_stack[0]
        assert isinstance(main, MainScreen)
        assert "watch stopped" in str(main.query_one("#summary").render())


async def test_header_names_the_leader_of_a_shared_inventory(
    make_app: Any, built: Built, pg_clean: Any
) -> None:
    """A shared inventory's leader, its epoch and the seconds left on its lease (the database's
    clock); and a controller meant for several machines but alone on SQLite says so."""
    import psycopg
    from psycopg import sql

    from meshtui.atomic import write_private
    from meshtui.controller.config import LeaseConfig
    from meshtui.controller.turn import Turn, claimant
    from meshtui.inventory import lease
    from meshtui.inventory.lease import Leases

    config = built.state / "controller.toml"
    config.write_text('name = "ctl-b"\n[lease]\nlength_s = 15\n')
    app = make_app()
    async with app.run_test(size=(220, 40)) as pilot:
        await settle(pilot)
        await pilot.pause(0.3)
        app._read_heartbeat()
        await settle(pilot)
        await pilot.pause(0.3)
        assert "HA off" in str(app.screen.query_one("#summary").render())

    with psycopg.connect(pg_clean.admin_conninfo(), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier("shared")))
    conninfo = psycopg.conninfo.make_conninfo(pg_clean.admin_conninfo(), dbname="shared")
    write_private(built.state / "pg.conninfo", conninfo.encode())
    config.write_text('name = "ctl-b"\n[inventory]\npostgres = "pg.conninfo"\n[lease]\n')
    Controller.open(built.state).close()  # the shared inventory made (empty)
    leases = Leases(conninfo)
    lead = Turn(leases, lease.WATCH, claimant("ctl-a"), "watch", LeaseConfig(length_s=60))
    assert lead.try_take()
    try:
        app = make_app()
        async with app.run_test(size=(220, 40)) as pilot:
            for _ in range(20):
                app._read_heartbeat()
                await settle(pilot)
                await pilot.pause(0.1)
                summary = str(app.screen.query_one("#summary").render())
                if "leader" in summary:
                    break
            assert "leader ctl-a (host " in summary and ", epoch 1, " in summary
            assert " s left on its lease" in summary
    finally:
        lead.release()
        leases.close()
