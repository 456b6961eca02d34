"""Read-only is real: mutating actions are absent from keys, footer, help and palette, nothing
reaches the inventory file through any of them, and the controller refuses what gets through."""

from __future__ import annotations

from typing import Any

from textual.command import CommandPalette

from meshtui.errors import ReadOnlyError
from meshtui.tui import actions
from meshtui.tui.commands import MeshCommands
from meshtui.tui.messages import Job, JobFailed
from meshtui.tui.screens.audit import AuditScreen
from meshtui.tui.screens.help import HelpScreen
from meshtui.tui.screens.main import MainScreen
from meshtui.tui.screens.pair import PairScreen
from tests.tui.builder import Built
from tests.tui.helpers import FakeActions, settle, sha256, static_text

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
