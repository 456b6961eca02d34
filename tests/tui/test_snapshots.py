"""A few SVG snapshots at fixed sizes (pytest-textual-snapshot); state is asserted elsewhere.

Everything shown is deterministic: the builder stamps rows against a fixed clock, the app is
given the same clock, logins derive from names, and the job log's timer is frozen. Update with
``pytest tests/tui/test_snapshots.py --snapshot-update`` after a deliberate change.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from textual.pilot import Pilot

from tests.tui.helpers import FakeActions, settle


@pytest.fixture
def frozen_job_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """The job log prints seconds since start; make them all zero."""
    from meshtui.tui.screens import job

    monkeypatch.setattr(job, "clock", lambda: 100.0)


def test_main_screen_80x24(snap_compare: Any, make_app: Any) -> None:
    async def before(pilot: Pilot[Any]) -> None:
        await settle(pilot)

    assert snap_compare(make_app(), terminal_size=(80, 24), run_before=before)


def test_main_grouped_and_marked_120x36(snap_compare: Any, make_app: Any) -> None:
    async def before(pilot: Pilot[Any]) -> None:
        await settle(pilot)
        await pilot.press("g", "down", "space", "space", "s")
        await pilot.pause()

    assert snap_compare(make_app(), terminal_size=(120, 36), run_before=before)


def test_rotation_plan_100x30(snap_compare: Any, make_app: Any, fake: FakeActions) -> None:
    fake.unresolved = {"app2": "connection refused"}

    async def before(pilot: Pilot[Any]) -> None:
        await settle(pilot)
        await pilot.press("down", "down", "down", "down", "space", "up", "up", "up", "space", "R")
        await settle(pilot)

    assert snap_compare(make_app(), terminal_size=(100, 30), run_before=before)


def test_drill_outcome_100x32(
    snap_compare: Any, make_app: Any, fake: FakeActions, frozen_job_clock: None
) -> None:
    async def before(pilot: Pilot[Any]) -> None:
        await settle(pilot)
        await pilot.press("d")
        await settle(pilot)
        await pilot.click("#confirm")
        app = pilot.app
        # the job's last messages come from its thread: wait for them by time, not by turns,
        # so a loaded machine gets as long as it needs
        deadline = time.monotonic() + 60.0
        while time.monotonic() < deadline:
            await settle(pilot, rounds=1)
            record = getattr(app, "job_record", None)
            if record is not None and record.finished and app.screen.query("DrillChecklist"):
                break
        await settle(pilot)
        await pilot.pause(0.1)

    assert snap_compare(make_app(), terminal_size=(100, 32), run_before=before)


def test_read_only_help_100x40(snap_compare: Any, make_app: Any) -> None:
    async def before(pilot: Pilot[Any]) -> None:
        await settle(pilot)
        await pilot.press("question_mark")
        await pilot.pause()

    assert snap_compare(make_app(read_only=True), terminal_size=(100, 40), run_before=before)


def test_no_color_80x24(snap_compare: Any, make_app: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")

    async def before(pilot: Pilot[Any]) -> None:
        await settle(pilot)
        await pilot.press("down", "space")

    assert snap_compare(make_app(), terminal_size=(80, 24), run_before=before)
