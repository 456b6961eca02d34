"""Rotation, drill, probe and push flows against the controller's API (its actions answered by
FakeActions): the plan modal defaults to Cancel, confirmation runs a worker whose progress and
outcome reach the screen as messages, and one error boundary turns failures into toasts."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from textual.widgets import Button, Label, Log

from meshtui.controller.core import Controller
from meshtui.controller.reports import PairOutcome, RotationReport
from meshtui.errors import NotResolvedError
from meshtui.model import RotationState
from meshtui.tui.events import Job, JobFailed, JobFinished, JobProgress, PlanReady
from meshtui.tui.screens.confirm import ConfirmScreen
from meshtui.tui.screens.job import JobScreen
from meshtui.tui.screens.main import MainScreen
from meshtui.tui.screens.plan import PlanScreen
from meshtui.tui.widgets.drill_checklist import DrillChecklist
from meshtui.tui.widgets.line_table import LineTable
from tests.tui.helpers import FakeActions, settle

GITEA = "database:app1/gitea->db1/postgres"


async def test_r_plans_first_and_focus_starts_on_cancel(make_app: Any, fake: FakeActions) -> None:
    messages: list[Any] = []
    app = make_app()
    async with app.run_test(size=(120, 36), message_hook=messages.append) as pilot:
        await settle(pilot)
        await pilot.press("r")
        await settle(pilot)
        plan = app.screen
        assert isinstance(plan, PlanScreen)
        assert plan.focused is plan.query_one("#cancel")
        assert [m.plan.pairs for m in messages if isinstance(m, PlanReady)] == [[GITEA]]
        assert not plan.query_one("#confirm", Button).disabled
        text = str(plan.query_one("#plan-text").render())
        assert "✓ resolved" in text and "db1" in text and "app1" in text
        await pilot.press("enter")  # enter presses the focused button: Cancel
        assert isinstance(app.screen, MainScreen)
        await pilot.press("r")
        await settle(pilot)
        await pilot.press("escape")
        assert isinstance(app.screen, MainScreen)
        assert fake.kinds() == ["plan", "plan"]  # nothing was rotated


async def test_confirmed_rotation_shows_progress_outcome_and_toast(
    make_app: Any, fake: FakeActions
) -> None:
    messages: list[Any] = []
    app = make_app()
    async with app.run_test(size=(120, 36), message_hook=messages.append) as pilot:
        await settle(pilot)
        await pilot.press("r")
        await settle(pilot)
        await pilot.click("#confirm")
        await settle(pilot)
        assert fake.calls[-1] == ("rotate", (GITEA,))
        assert isinstance(app.screen, JobScreen)
        progress = [m for m in messages if isinstance(m, JobProgress)]
        assert [p.text for p in progress][-1] == "done" and progress[-1].done == 4
        (finished,) = [m for m in messages if isinstance(m, JobFinished)]
        assert isinstance(finished.result, RotationReport) and finished.result.ok
        table = app.screen.query_one("#job-table", LineTable)
        assert list(table.entries) == [GITEA]
        assert "12.5 ms" in table.render_line(1).text and "1 → 2" in table.render_line(1).text
        log = app.screen.query_one("#job-log")
        assert len(log.lines) == 5  # type: ignore[attr-defined]
        assert "rotation 7 done: 1 pairs, longest window 12 ms" in app.toast_text()
        assert app.job is None
        await pilot.press("escape", "o")  # the outcome can be shown again
        assert isinstance(app.screen, JobScreen) and app.screen.record.finished


async def test_unresolved_plan_cannot_be_confirmed(make_app: Any, fake: FakeActions) -> None:
    fake.unresolved = {"app1": "connection refused"}
    app = make_app()
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        await pilot.press("r")
        await settle(pilot)
        assert app.screen.query_one("#confirm", Button).disabled
        text = str(app.screen.query_one("#plan-text").render())
        assert "✗ NOT resolved" in text and "connection refused" in text
        assert "nothing will be minted" in text
        await pilot.click("#confirm")
        await pilot.pause()
        assert isinstance(app.screen, PlanScreen)
        assert fake.kinds() == ["plan"]


async def test_R_takes_marks_then_filter_then_provider(make_app: Any, fake: FakeActions) -> None:
    app = make_app()
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, MainScreen)
        await pilot.press("R")
        await settle(pilot)
        assert isinstance(app.screen, PlanScreen)
        assert app.screen.job.basis == "every pair of provider db1/postgres"
        assert len(app.screen.job.ids) == 4
        await pilot.press("escape")
        screen.set_filter("state:working")
        await pilot.pause()
        await pilot.press("R")
        await settle(pilot)
        assert app.screen.job.basis.startswith("4 filtered pairs (state:working)")  # type: ignore[attr-defined]
        await pilot.press("escape", "space", "space", "R")
        await settle(pilot)
        assert app.screen.job.basis == "2 marked pairs"  # type: ignore[attr-defined]
        await pilot.press("escape")
        assert [k for k in fake.kinds()] == ["plan", "plan", "plan"]


async def test_palette_rotates_a_providers_pairs(make_app: Any, fake: FakeActions) -> None:
    app = make_app()
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        app.screen.rotate_provider("db2/postgres")  # type: ignore[attr-defined]
        await settle(pilot)
        assert isinstance(app.screen, PlanScreen)
        assert set(fake.calls[-1][1]) == {
            k for k, r in app.model.rows.items() if r.status.provider == "db2/postgres"
        }


async def test_drill_shows_the_three_logins_as_a_checklist(
    make_app: Any, fake: FakeActions
) -> None:
    fake.drill_ok, fake.drill_sessions = False, ("end", 2, 1)
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("d")
        await settle(pilot)
        assert isinstance(app.screen, PlanScreen)
        assert app.screen.query_one("#confirm", Button).label.plain == "Drill 1"
        await pilot.click("#confirm")
        await settle(pilot)
        (check,) = app.screen.query(DrillChecklist)
        text = str(check.render())
        assert "✗ FAILED" in text and "window 41.5 ms" in text
        for line in ("✓ old before", "✓ new after", "✗ old after"):
            assert line in text
        assert "expected refused" in text and "got accepted" in text
        # a session the rotation was to end, open still: a failure of its own line
        assert "✗ sessions on the old credential: 2 before, 1 after (ended)" in text, text
        assert "0 passed, 1 FAILED" in app.toast_text()


async def test_p_probes_the_selection_and_P_everything(make_app: Any, fake: FakeActions) -> None:
    app = make_app()
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        await pilot.press("p")
        await settle(pilot)
        assert fake.calls[-1] == ("probe", (GITEA,))
        assert isinstance(app.screen, JobScreen)
        assert "probed 1: 1 accepted" in app.toast_text()
        await pilot.press("escape", "P")
        await settle(pilot)
        assert len(fake.calls[-1][1]) == 8
        table = app.screen.query_one("#job-table", LineTable)
        assert len(table.entries) == 8


async def test_push_asks_first_with_cancel_focused(make_app: Any, fake: FakeActions) -> None:
    app = make_app()
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        await pilot.press("u")
        assert isinstance(app.screen, ConfirmScreen)
        assert app.screen.focused is app.screen.query_one("#cancel")
        await pilot.press("escape")
        assert fake.calls == []
        await pilot.press("u")
        await pilot.click("#confirm")
        await settle(pilot)
        assert fake.kinds() == ["push"]
        assert "delivered 1, withdrawn 0" in app.toast_text()


async def test_a_failed_job_becomes_one_error_toast(make_app: Any, fake: FakeActions) -> None:
    fake.fail_with = NotResolvedError({"app1": "connection refused"})
    messages: list[Any] = []
    app = make_app()
    async with app.run_test(size=(120, 36), message_hook=messages.append) as pilot:
        await settle(pilot)
        await pilot.press("p")
        await settle(pilot)
        assert [type(m.error) for m in messages if isinstance(m, JobFailed)] == [NotResolvedError]
        assert "error: not rotated, nothing was minted or sent: app1: connection refused" in (
            app.toast_text()
        )
        assert isinstance(app.screen, JobScreen)
        assert "FAILED" in str(app.screen.query_one("#job-step").render())
        assert app.job is None


async def test_unexpected_errors_open_the_error_modal(make_app: Any, fake: FakeActions) -> None:
    fake.fail_with = RuntimeError("boom [b]x[/b]")
    app = make_app()
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        await pilot.press("p")
        await settle(pilot)
        assert type(app.screen).__name__ == "ErrorScreen"
        assert "boom [b]x[/b]" in str(app.screen.query_one("#dialog-question").render())
        await pilot.press("escape")
        assert isinstance(app.screen, JobScreen)


async def test_one_job_at_a_time(make_app: Any, fake: FakeActions) -> None:
    app = make_app()
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        app.job = Job("rotate", (GITEA,), "pair x")  # as if one were running
        app.job_progress = ("x", 0, 0)
        await pilot.press("p")
        await pilot.pause()
        assert "still running" in app.toast_text() and fake.calls == []


async def test_each_pairs_outcome_shows_while_the_rotation_runs(
    make_app: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = threading.Event()

    def rotate(
        ctl: Controller, ids: Any, progress: Any = None, probe_after: bool = False
    ) -> RotationReport:
        progress(f"{GITEA}: generation 1->2, window 12.5 ms", 1, 2)
        gate.wait(10)  # the test looks at the screen while the job is still running
        return RotationReport(
            rotation=7, outcome=RotationState.DONE, pairs=[PairOutcome(GITEA, True, 2, 1, 12.5)]
        )

    monkeypatch.setattr(Controller, "rotate", rotate)
    app = make_app()
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        app.start_job(Job("rotate", (GITEA,), f"pair {GITEA}"))
        try:
            for _ in range(200):
                await pilot.pause(0.02)
                screen = app.screen
                if isinstance(screen, JobScreen) and screen.query_one(Log).line_count:
                    break
            assert app.job is not None  # still running
            screen = app.screen
            assert isinstance(screen, JobScreen)
            (line,) = screen.query_one(Log).lines
            assert line.endswith(f"{GITEA}: generation 1->2, window 12.5 ms")
            step = str(screen.query_one("#job-step", Label).render())
            assert step == f"{GITEA}: generation 1->2, window 12.5 ms (1/2)"
        finally:
            gate.set()
        await settle(pilot)
        assert app.job is None and "rotation 7 done" in app.toast_text()


async def test_a_burst_of_progress_lines_is_drawn_in_batches(
    make_app: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    texts = [
        f"database:app{i}/x->db1/postgres: generation 1->2, window 1.0 ms" for i in range(1500)
    ]

    def rotate(
        ctl: Controller, ids: Any, progress: Any = None, probe_after: bool = False
    ) -> RotationReport:
        for n, text in enumerate(texts, 1):
            progress(text, n, len(texts))
        return RotationReport(rotation=8, outcome=RotationState.DONE, pairs=[])

    draws: list[int] = []
    real = JobScreen.progressed

    def progressed(self: JobScreen) -> None:
        draws.append(len(self.record.lines))
        real(self)

    monkeypatch.setattr(Controller, "rotate", rotate)
    monkeypatch.setattr(JobScreen, "progressed", progressed)
    app = make_app()
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        app.start_job(Job("rotate", (GITEA,), f"pair {GITEA}"))
        await settle(pilot)
        assert app.job is None
        screen = app.screen
        assert isinstance(screen, JobScreen)
        lines = screen.query_one(Log).lines
        assert len(lines) == len(texts) and lines[-1].endswith(texts[-1])
        assert [line.split("s  ", 1)[1] for line in lines] == texts  # each once, in order
        assert 1 <= len(draws) < len(texts) // 10  # drawn in batches, not once per line
