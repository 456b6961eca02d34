"""The dashboard end to end: real agents (``meshtui host serve`` on Unix sockets), the session's
PostgreSQL through the built-in provisioner, and the keys an operator would press."""

from __future__ import annotations

import signal
from typing import Any

import pytest
from textual.widgets import Button, Log

from meshtui.controller.core import Controller
from meshtui.controller.reports import DrillReport, ProbeOutcome, PushReport, RotationReport
from meshtui.tui.events import Job, JobFinished, JobProgress, PlanReady
from meshtui.tui.screens.hosts import HostsScreen
from meshtui.tui.screens.job import JobScreen
from meshtui.tui.screens.main import MainScreen
from meshtui.tui.screens.plan import PlanScreen
from meshtui.tui.widgets.drill_checklist import DrillChecklist
from tests.tui.helpers import RecordingApp, settle

GITEA = "database:app1/gitea->db1/postgres"
WIKI = "database:app1/wiki->db1/postgres"

pytestmark = pytest.mark.slow


@pytest.fixture
def mesh(mesh_with_agents: Any, pg: Any, pg_clean: Any, pg_admin_file: Any) -> Any:
    return mesh_with_agents(
        consumers={"app1": ["gitea", "wiki"], "app2": ["grafana"]},
        port=pg.port,
        admin=pg_admin_file,
    )


async def wait_job(app: RecordingApp, pilot: Any, messages: list[Any]) -> Any:
    """Settle until the job's JobFinished arrives; returns its result."""
    for _ in range(200):
        await settle(pilot, rounds=1)
        done = [m for m in messages if isinstance(m, JobFinished)]
        if done and app.job is None:
            return done[-1].result
        await pilot.pause(0.05)
    raise AssertionError(f"the job never finished: {app.toast_text()}")


async def test_push_probe_rotate_and_drill_from_the_keyboard(mesh: Any) -> None:
    messages: list[Any] = []
    app = RecordingApp(mesh.state)
    async with app.run_test(size=(140, 40), message_hook=messages.append) as pilot:
        await settle(pilot)
        assert app.summary.pairs == 3 and app.summary.working == 0

        await pilot.press("u")
        await pilot.click("#confirm")
        push = await wait_job(app, pilot, messages)
        assert isinstance(push, PushReport) and push.ok, push.behind

        await pilot.press("escape", "P")
        probes = await wait_job(app, pilot, messages)
        assert isinstance(probes, list) and all(isinstance(p, ProbeOutcome) for p in probes)
        assert {p.verdict for p in probes} == {"accepted"}, probes
        await settle(pilot)
        assert app.summary.working == 3

        await pilot.press("escape")
        assert isinstance(app.screen, MainScreen)
        app.screen.table.move_to(GITEA)
        await pilot.press("r")
        await settle(pilot)
        assert isinstance(app.screen, PlanScreen)
        for _ in range(100):
            if app.screen.plan is not None:
                break
            await pilot.pause(0.05)
        plan = [m.plan for m in messages if isinstance(m, PlanReady)][-1]
        assert plan is not None and plan.ok and {n.node for n in plan.nodes} == {"app1", "db1"}
        await pilot.click("#confirm")
        rotation = await wait_job(app, pilot, messages)
        assert isinstance(rotation, RotationReport) and rotation.ok, rotation
        assert rotation.pairs[0].generation == 2 and rotation.pairs[0].window_ms is not None
        assert "done" in app.toast_text()
        # the pair's outcome came as progress, before the job ended, and the log shows it
        outcome = (
            f"{GITEA}: generation 1->2, window {rotation.pairs[0].window_ms:.1f} ms"
            "; 0 sessions on the old credential ended"  # the dashboard's rotation: the default
        )
        assert outcome in progress_before_end(messages)
        assert isinstance(app.screen, JobScreen)
        assert any(line.endswith(outcome) for line in app.screen.query_one(Log).lines)
        await settle(pilot)
        assert app.model.rows[GITEA].status.generation == 2
        # the rotation ended with a probe of what it rotated: working, not "not probed since"
        assert [p.verdict for p in rotation.probes] == ["accepted"], rotation.probes
        assert app.model.rows[GITEA].status.state.value == "working"

        await pilot.press("escape", "d")
        await settle(pilot)
        for _ in range(100):
            if isinstance(app.screen, PlanScreen) and app.screen.plan is not None:
                break
            await pilot.pause(0.05)
        await pilot.click("#confirm")
        drills = await wait_job(app, pilot, messages)
        (report,) = drills
        assert isinstance(report, DrillReport) and report.ok, report
        assert isinstance(app.screen, JobScreen)
        (check,) = app.screen.query(DrillChecklist)
        assert "✓ PASSED" in str(check.render())
        # the old credential's sessions, counted by its provider before and after they ended
        assert "· sessions on the old credential: 0 before, 0 after (ended)" in str(
            check.render()
        ), str(check.render())
        assert [s.name for s in report.steps] == ["old before", "new after", "old after"]


def progress_before_end(messages: list[Any]) -> list[str]:
    """The texts of the last job's progress messages that arrived before it finished."""
    end = max(i for i, m in enumerate(messages) if isinstance(m, JobFinished))
    start = max((i for i, m in enumerate(messages[:end]) if isinstance(m, JobFinished)), default=0)
    return [m.text for m in messages[start:end] if isinstance(m, JobProgress)]


class FaultyApp(RecordingApp):
    """The dashboard, with faults injected into the controllers its jobs open."""

    def __init__(self, *args: Any, faults: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.faults = faults

    def open_controller(self, *, reader: bool = False) -> Controller:
        ctl = super().open_controller(reader=reader)
        if not reader:
            ctl.faults.update(self.faults)
        return ctl


async def test_a_rolled_back_rotation_says_so_for_each_pair(mesh: Any) -> None:
    with mesh.controller() as ctl:
        assert ctl.push().ok
    faults = {
        # the consumer's node dies once the provider holds the new credential ...
        "after-providers:to": lambda: mesh.stop("app1", signal.SIGKILL),
        # ... and is back for the rollback, so both ends return to the old one
        "after-providers:from": lambda: mesh.start("app1"),
    }
    messages: list[Any] = []
    app = FaultyApp(mesh.state, faults=faults)
    async with app.run_test(size=(140, 40), message_hook=messages.append) as pilot:
        await settle(pilot)
        app.start_job(Job("rotate", (GITEA, WIKI), "two pairs"))
        rotation = await wait_job(app, pilot, messages)
        assert isinstance(rotation, RotationReport), rotation
        assert rotation.outcome == "rolled back", rotation
        lines = [t for t in progress_before_end(messages) if ": rolled back" in t]
        assert [line.split(": rolled back")[0] for line in lines] == [GITEA, WIKI]
        assert all("rolled back to generation 1" in line for line in lines), lines
        assert "app1" in lines[0]  # each line names what went wrong for that pair
        log = app.screen.query_one(Log).lines
        assert any(line.endswith(lines[-1]) for line in log)
    with mesh.controller() as ctl:
        rows = {r.pair: r for r in ctl.status([GITEA, WIKI])}
        assert {
            (r.generation, r.consumer_generation, r.provider_generation) for r in rows.values()
        } == {(1, 1, 1)}


async def test_a_stopped_agent_blocks_the_plan_and_shows_on_hosts(mesh: Any) -> None:
    mesh.stop("app2")
    messages: list[Any] = []
    app = RecordingApp(mesh.state)
    async with app.run_test(size=(140, 40), message_hook=messages.append) as pilot:
        await settle(pilot)
        app.screen.table.move_to("database:app2/grafana->db1/postgres")  # type: ignore[attr-defined]
        await pilot.press("r")
        for _ in range(200):
            await settle(pilot, rounds=1)
            if [m for m in messages if isinstance(m, PlanReady)]:
                break
        (ready,) = [m for m in messages if isinstance(m, PlanReady)]
        assert ready.plan is not None and not ready.plan.ok
        assert app.screen.query_one("#confirm", Button).disabled
        assert "app2" in str(app.screen.query_one("#plan-text").render())
        await pilot.press("escape", "h")
        await settle(pilot)
        await pilot.press("k")
        for _ in range(200):
            await settle(pilot, rounds=1)
            screen = app.screen
            if isinstance(screen, HostsScreen) and screen.checked:
                break
        assert isinstance(app.screen, HostsScreen)
        reach = {n: h.reachable for n, h in app.screen.hosts.items()}
        assert reach == {"db1": True, "app1": True, "app2": False}
