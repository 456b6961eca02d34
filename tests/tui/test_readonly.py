"""Read-only is real: the actions that change things or ask an agent are absent from keys,
footer, help and palette, nothing reaches the inventory file through any of them, and the
controller refuses what gets through. Against real agents that count every request: every
action of the registry and every palette command, hidden or let through by a UI bug, sends
nothing, writes nothing in the state folder and never opens ``controller.key``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from textual.command import CommandPalette
from textual.widgets import Button, Static
from textual.worker import WorkerCancelled, WorkerFailed

from meshtui.errors import ReadOnlyError
from meshtui.tui import actions
from meshtui.tui.events import Job, JobFailed
from meshtui.tui.palette import MeshCommands
from meshtui.tui.screens.audit import AuditScreen
from meshtui.tui.screens.confirm import ConfirmScreen, ErrorScreen
from meshtui.tui.screens.help import HelpScreen
from meshtui.tui.screens.hosts import HostsScreen
from meshtui.tui.screens.job import JobRecord, JobScreen
from meshtui.tui.screens.main import MainScreen
from meshtui.tui.screens.pair import PairScreen
from tests.fix_counted_agents import (
    GITEA,
    CountedMesh,
    counted_mesh,
    folder_digest,
    watch_key_opens,
    written,
)
from tests.tui.builder import Built
from tests.tui.helpers import FakeActions, RecordingApp, settle, sha256, static_text

MUTATING_KEYS = ["r", "R", "d", "p", "P", "u"]


def shown_actions(app: Any) -> set[str]:
    return {b.binding.action for b in app.screen.active_bindings.values()}


async def palette_titles(app: Any, query: str) -> list[str]:
    provider = MeshCommands(app.screen)
    hits = [hit async for hit in provider.search(query)]
    return [str(hit.text or hit.match_display) for hit in hits]


async def test_read_only_hides_every_mutating_action(make_app: Any, built: Built) -> None:
    app = make_app(read_only=True)
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        assert not (shown_actions(app) & actions.MUTATING)
        for action in actions.MUTATING:
            assert app.screen.check_action(action, ()) is False
        assert "rotate" not in " ".join(await palette_titles(app, "rot"))
        assert "Probe" not in " ".join(await palette_titles(app, "pro"))
        assert "Filter provider db1/postgres" in await palette_titles(app, "filter provider db1")
        summary = str(app.screen.query_one("#summary").render())
        assert "READ-ONLY" in summary
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        table = static_text(app.screen.query_one("#help-table"))
        assert "rotate-set" not in table and "probe-all" not in table
        assert "READ-ONLY" in str(app.screen.query_one("#help-readonly").render())


async def test_no_key_palette_or_screen_writes_the_inventory(
    make_app: Any, built: Built, fake: FakeActions, tmp_path: Any
) -> None:
    db = built.state / "inventory.db"
    before = sha256(db)
    app = make_app(read_only=True)
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        await pilot.press(*MUTATING_KEYS)
        await pilot.press("space", "space", *MUTATING_KEYS)
        await settle(pilot)
        assert isinstance(app.screen, MainScreen)
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, PairScreen)
        await pilot.press("r", "d", "p")
        await settle(pilot)
        assert isinstance(app.screen, PairScreen)
        await pilot.press("escape")
        # the palette: open it, type "rotate", run whatever it offers
        await pilot.press("colon")
        assert isinstance(app.screen, CommandPalette)
        await pilot.press(*"rotate", "enter")
        await settle(pilot)
        await pilot.press("escape")
        # run the actions by name, as a remapped key or a stray binding would
        for action in sorted(actions.MUTATING):
            await app.run_action(f"screen.{action}")
        await settle(pilot)
        # the audit screen, its export (a new file elsewhere) and verification
        await pilot.press("a")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, AuditScreen)
        screen.export_folders = [tmp_path]
        await pilot.press("e", "x", "v")
        await settle(pilot)
    assert fake.calls == []
    assert sha256(db) == before


async def test_the_controller_refuses_if_the_ui_is_bypassed(
    make_app: Any, built: Built, fake: FakeActions
) -> None:
    db = built.state / "inventory.db"
    before = sha256(db)
    messages: list[Any] = []
    app = make_app(read_only=True)
    async with app.run_test(size=(120, 36), message_hook=messages.append) as pilot:
        await settle(pilot)
        app.allows = lambda action: True  # type: ignore[method-assign]  # a UI bug lets it through
        app.start_job(Job("rotate", ("database:app1/gitea->db1/postgres",), "pair x"))
        await settle(pilot)
        failed = [m for m in messages if isinstance(m, JobFailed)]
        assert len(failed) == 1 and isinstance(failed[0].error, ReadOnlyError)
        assert "open read-only" in app.toast_text()
    assert fake.calls == []
    assert sha256(db) == before


async def test_meshtui_audit_opens_on_the_audit_view(make_app: Any, built: Built) -> None:
    before = sha256(built.state / "inventory.db")
    app = make_app(read_only=True, screen="audit")
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, AuditScreen)
        assert "verified" in str(app.screen.query_one("#chain").render())
        await pilot.press("escape")
        assert isinstance(app.screen, MainScreen)
        assert app.screen.check_action("rotate", ()) is False
    assert sha256(built.state / "inventory.db") == before


# ---- against real agents that count every request ----------------------------------------
@pytest.fixture
def mesh() -> Iterator[CountedMesh]:
    yield from counted_mesh()


async def settle_all(pilot: Any, rounds: int = 3) -> None:
    """:func:`settle`, where a worker may fail: the failure is the app's to report."""
    for _ in range(rounds):
        try:
            await pilot.app.workers.wait_for_complete()
        except (WorkerFailed, WorkerCancelled):  # a failure is the app's; a newer load replaced
            continue
        await pilot.pause(0.01)


SCREEN_OF: dict[str, type[Any]] = {
    "app": MainScreen,
    "pairs": MainScreen,
    "pair": PairScreen,
    "hosts": HostsScreen,
    "audit": AuditScreen,
    "job": JobScreen,
}


async def goto(app: RecordingApp, pilot: Any, scope: str, outside: Path) -> Any:
    """A screen of ``scope`` on top: the one there if it is of that kind, else a fresh one
    (every dialog and screen above the main one closed first)."""
    if scope in SCREEN_OF and isinstance(app.screen, SCREEN_OF[scope]):
        return app.screen
    app.action_pairs()
    await settle_all(pilot)
    if scope == "pair":
        app.screen.table.move_to(GITEA)
        await pilot.press("enter")
    elif scope == "hosts":
        app.action_hosts()
    elif scope == "audit":
        app.action_audit()
        await settle_all(pilot)
        app.screen.export_folders = [outside]  # an export is a file elsewhere, never in state
    elif scope == "job":
        app.push_screen(JobScreen(JobRecord(Job("probe", (GITEA,), "the selected pair"))))
    elif scope == "dialog":
        app.push_screen(ConfirmScreen("Push every end", "really?", confirm="Push"))
    await settle_all(pilot)
    return app.screen


async def answer_dialogs(app: RecordingApp, pilot: Any) -> None:
    """Let work finish; confirm a confirmation dialog, so what it guards is tried too."""
    await settle_all(pilot)
    if isinstance(app.screen, ConfirmScreen):
        app.screen.query_one("#confirm", Button).press()
        await settle_all(pilot)


async def drive(
    app: RecordingApp, pilot: Any, outside: Path, acts: list[actions.Act], skip: set[str]
) -> list[str]:
    """``acts`` on every screen they belong to (by name; the refused ones by key too), then
    every palette command of every screen whose "scope:title" is not in ``skip``."""
    driven = []
    for act in acts:
        for scope in act.scopes:
            screen = await goto(app, pilot, scope, outside)
            await (app if scope == "app" else screen).run_action(act.action)
            await answer_dialogs(app, pilot)
            if act.action in actions.READ_ONLY_OFF:
                await goto(app, pilot, scope, outside)
                await pilot.press(act.keys.split(",")[0])
                await answer_dialogs(app, pilot)
            driven.append(f"{scope}:{act.id}")
    for scope in ("pairs", "pair", "hosts", "audit", "job"):
        screen = await goto(app, pilot, scope, outside)
        titles = [c.title for c in MeshCommands(screen).commands()]
        for title in titles:
            if title == "Quit" or f"{scope}:{title}" in skip:
                continue
            screen = await goto(app, pilot, scope, outside)
            (command,) = [c for c in MeshCommands(screen).commands() if c.title == title]
            result = command.run()
            if result is not None:
                await result
            await answer_dialogs(app, pilot)
            driven.append(f"{scope}:{title}")
    await goto(app, pilot, "pairs", outside)
    return driven


@pytest.mark.slow
async def test_every_action_and_command_sends_nothing_and_writes_nothing(
    mesh: CountedMesh, tmp_path: Path
) -> None:
    """Read-only, hidden or not: no agent hears from the dashboard and the key stays unread."""
    before = mesh.requests()
    state = folder_digest(mesh.state)
    opened = watch_key_opens()
    app = RecordingApp(mesh.state, read_only=True)
    async with app.run_test(size=(140, 40)) as pilot:
        await settle_all(pilot)
        everything = [a for a in actions.ACTIONS if a.id != "quit"]
        shown = await drive(app, pilot, tmp_path, everything, set())
        assert opened == [] and mesh.requests() == before
        assert not [m for m, sev in app.toasts if sev == "error"], app.toast_text()

        # a UI bug lets everything through: the controller refuses each, by name, as a toast
        app.allows = lambda action: True  # type: ignore[method-assign]
        refused = [a for a in everything if a.action in actions.READ_ONLY_OFF]
        bypassed = await drive(app, pilot, tmp_path, refused, set(shown))
        for kind in ("rotate", "drill", "probe", "push"):
            app.start_job(Job(kind, (GITEA,), "the selected pair"))
            await settle_all(pilot)
        assert not isinstance(app.screen, ErrorScreen)
        toasts = app.toast_text()
    registry = {f"{scope}:{a.id}" for a in everything for scope in a.scopes}
    assert registry <= set(shown) and len(shown) > len(registry) + 40  # + palette commands
    assert "pairs:Rotate provider db1/postgres" in bypassed  # offered once let through
    assert opened == [], "the read-only dashboard opened controller.key"
    assert mesh.requests() == before, "an agent received a request"
    assert written(state, folder_digest(mesh.state)) == {}
    errors = [m for m, sev in app.toasts if sev == "error"]
    assert errors and all(m.startswith("read-only: ") for m in errors), toasts
    for refusal in (
        "read-only: checking the agents would contact app1, app2, db1;",
        "read-only: planning a rotation would contact app1, db1;",
        "read-only: probe would contact app1;",
        "read-only: probe would contact app1, app2;",
        "read-only: push would contact app1, app2, db1;",
        "read-only: rotate would contact app1, db1;",
        "read-only: drill would contact app1, db1;",
    ):
        assert refusal in toasts, f"{refusal}\n{toasts}"


@pytest.mark.slow
async def test_read_only_hosts_shows_the_declared_nodes_without_asking(mesh: CountedMesh) -> None:
    before = mesh.requests()
    app = RecordingApp(mesh.state, read_only=True, screen="hosts")
    async with app.run_test(size=(140, 40)) as pilot:
        await settle_all(pilot)
        screen = app.screen
        assert isinstance(screen, HostsScreen)
        assert sorted(screen.hosts) == ["app1", "app2", "db1"]
        assert {h.reachable for h in screen.hosts.values()} == {None}
        assert screen.hosts["db1"].holds == 3 and screen.hosts["app1"].holds == 2
        note = str(screen.query_one("#hosts-note", Static).render())
        assert "read-only" in note and "checks are off" in note
        row = screen.table.rows["db1"].cells
        assert row[1] == "off" and row[-1] == "checks are off (read-only)"
        assert "check" not in shown_actions(app)
        await pilot.press("k")
        await settle_all(pilot)
    assert mesh.requests() == before


@pytest.mark.slow
async def test_a_writable_dashboard_still_checks_every_agent(mesh: CountedMesh) -> None:
    """The control: the same keys on a writable dashboard reach every agent, once each."""
    before = mesh.requests()
    app = RecordingApp(mesh.state, screen="hosts")
    async with app.run_test(size=(140, 40)) as pilot:
        await settle_all(pilot)
        await pilot.press("k")
        await settle_all(pilot)
        assert isinstance(app.screen, HostsScreen)
        assert {h.reachable for h in app.screen.hosts.values()} == {True}
        assert "all 3 nodes answered" in app.toast_text()
        assert not app.screen.query_one("#hosts-note", Static).display
    after = mesh.requests()
    assert {n: len(after[n]) - len(before[n]) for n in after} == {"app1": 1, "app2": 1, "db1": 1}
