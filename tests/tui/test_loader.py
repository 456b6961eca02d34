"""The dashboard's one background loader, and the typed results its jobs hand back.

Every thread worker goes through ``screens/base.run_in_background``: the app's numbered loads
and its jobs, each screen's reads, the plan and the audit export. A failed read is reported
once, by the app's error boundary, as "<context> failed"; a job's result is one of the
controller's report types and its toast says how it went in a severity Textual knows.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any, get_args

import pytest
from textual.notifications import SeverityLevel

from meshtui.controller.core import Controller
from meshtui.controller.reports import (
    DrillReport,
    DrillStep,
    JobResult,
    PairOutcome,
    ProbeOutcome,
    PushReport,
    RotationReport,
)
from meshtui.errors import InventoryError
from meshtui.inventory import Inventory, now
from meshtui.inventory.rows import ProbeRecord
from meshtui.model import RotationState
from meshtui.tui.app import job_toast
from meshtui.tui.events import Job, JobKind, Loaded
from tests.tui.helpers import settle

GITEA = "database:app1/gitea->db1/postgres"


def titled(app: Any, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Every toast from now on as (title, message)."""
    seen: list[tuple[str, str]] = []
    notify = app.notify

    def record(message: Any, *, title: str = "", **kwargs: Any) -> None:
        seen.append((title, str(message)))
        notify(message, title=title, **kwargs)

    monkeypatch.setattr(app, "notify", record)
    return seen


async def test_a_failed_read_is_reported_once_with_its_context(
    make_app: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: Controller, *args: Any, **kwargs: Any) -> Any:
        raise InventoryError("the inventory went away")

    monkeypatch.setattr(Controller, "pair_detail", broken)
    app = make_app()
    seen = titled(app, monkeypatch)
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        await pilot.press("enter")  # the pair screen reads its detail in the background
        await settle(pilot)
        pair = app.screen.pair
    assert [t for t in seen if "went away" in t[1]] == [
        (f"reading {pair} failed", "the inventory went away")
    ]


async def test_loads_keep_their_numbers_and_an_older_one_never_wins(make_app: Any) -> None:
    messages: list[Any] = []
    app = make_app()
    async with app.run_test(size=(120, 36), message_hook=messages.append) as pilot:
        await settle(pilot)
        app.reload()
        app.reload()  # replaces the one before it (which may still post, or never start)
        for _ in range(200):
            await pilot.pause(0.05)
            if app._applied_seq == 3:
                break
        seqs = [m.seq for m in messages if isinstance(m, Loaded)]
        assert {1, 3} <= set(seqs) <= {1, 2, 3} and app._applied_seq == 3
        stale = next(m for m in messages if isinstance(m, Loaded) and m.seq == 1)
        app.post_message(Loaded(stale.fresh, None, 0.0, "stale", 1))
        await pilot.pause(0.1)
        assert app.note != "stale" and app._applied_seq == 3


def step(name: str, expected: str, verdict: str) -> DrillStep:
    return DrillStep(name, expected, verdict, 2.0)


@pytest.mark.parametrize(
    ("kind", "result", "text", "severity"),
    [
        (
            JobKind.ROTATE,
            RotationReport(7, RotationState.DONE, [PairOutcome(GITEA, True, 2, 1, 12.5)]),
            "rotation 7 done: 1 pairs, longest window 12 ms",
            "information",
        ),
        (
            JobKind.ROTATE,
            RotationReport(8, RotationState.ROLLED_BACK, [], reason="db1 refused"),
            "rotation 8 rolled back: 0 pairs (db1 refused)",
            "warning",
        ),
        (
            JobKind.PUSH,
            PushReport([PairOutcome(GITEA, True, 1)], [], {"p": "app2 down"}),
            "delivered 1, withdrawn 0, 1 still behind",
            "warning",
        ),
        (
            JobKind.DRILL,
            [
                DrillReport(GITEA, True, [step("old after", "refused", "refused")], 4.0, 1),
                DrillReport("p2", False, [step("old after", "refused", "accepted")], 4.0, 2),
            ],
            "1 passed, 1 FAILED",
            "error",
        ),
        (
            JobKind.PROBE,
            [
                ProbeOutcome(GITEA, "accepted", "ok", 1.0),
                ProbeOutcome("p2", "refused", "28P01", 1.0),
            ],
            "probed 2: 1 accepted, 1 refused",
            "warning",
        ),
    ],
    ids=["rotated", "rolled-back", "push-behind", "drill-failed", "probe-refused"],
)
def test_each_job_result_gets_its_toast(
    kind: JobKind, result: JobResult, text: str, severity: str
) -> None:
    said, level = job_toast(Job(kind, (GITEA,), "the selected pair"), result)
    assert (said, level) == (text, severity)
    assert level in get_args(SeverityLevel)


async def test_the_dashboard_keeps_one_status_reader_that_sees_every_write_and_a_new_file(
    make_app: Any, built: Any, tmp_path: Path
) -> None:
    """The dashboard reads every pair's status through one read-only controller kept open
    between loads (it reads next only the pairs written since): another process's probe shows
    in the next load, exactly as a fresh read shows it, through the same reader; an inventory
    put in the folder's place (as a restore into this folder) is read through a new one."""
    path = built.state / "inventory.db"
    older = tmp_path / "older.db"
    with Inventory.open(path) as inv, sqlite3.connect(older) as copy:
        inv._db.conn.backup(copy)
    app = make_app()
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot)  # the first load: one screenful, all 8 pairs
        app.reload()
        await settle(pilot)
        reader = app._status_reader
        assert reader is not None
        pid = sorted(built.pairs)[0]
        with Inventory.open(path) as inv, inv.transaction("test") as tx:
            generation = inv.pairs([pid])[0]["generation"]
            tx.add_probes([ProbeRecord(pair=pid, at=now(), generation=generation,
                           verdict="refused", reason="password authentication failed (28P01)",
                           latency_ms=None, used_password=1, loopback=0, client_addr=None,
                           control=None, withdrawn=0)])  # fmt: skip
        app.reload()
        await settle(pilot)
        assert app._status_reader is reader
        with Controller.open(built.state, read_only=True) as ctl:
            fresh = ctl.status()
        assert [r.status for r in app.model.rows.values()] == fresh
        shown = app.model.rows[pid].status
        assert shown.reason == "probe refused: password authentication failed (28P01)"
        moved = tmp_path / "moved"  # the folder's inventory moved away, another put in place
        moved.mkdir()
        for name in ("inventory.db", "inventory.db-wal", "inventory.db-shm"):
            if (built.state / name).exists():
                os.rename(built.state / name, moved / name)
        os.rename(older, path)
        app.reload()
        await settle(pilot)
        assert app._status_reader is not reader
        assert app.model.rows[pid].status.reason != shown.reason
    assert app._status_reader is None  # closed with the app
