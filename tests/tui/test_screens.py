"""Hosts, audit, help, the command palette, keymaps from files, and the empty state."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
from pathlib import Path
from typing import Any

from textual.command import CommandPalette

from meshtui.tui import actions
from meshtui.tui.app import MeshApp
from meshtui.tui.events import AuditLoaded, Exported, HostsLoaded
from meshtui.tui.palette import MeshCommands
from meshtui.tui.screens.audit import AuditScreen
from meshtui.tui.screens.help import HelpScreen
from meshtui.tui.screens.hosts import HostsScreen
from meshtui.tui.screens.main import MainScreen
from meshtui.tui.screens.plan import PlanScreen
from tests.tui.builder import Built
from tests.tui.helpers import FakeActions, RecordingApp, settle, static_text


async def test_hosts_screen_lists_nodes_keys_and_who_is_behind(make_app: Any) -> None:
    messages: list[Any] = []
    app = make_app()
    async with app.run_test(size=(140, 36), message_hook=messages.append) as pilot:
        await settle(pilot)
        await pilot.press("h")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, HostsScreen)
        (loaded,) = [m for m in messages if isinstance(m, HostsLoaded)]
        assert {h.name for h in loaded.hosts} == {"db1", "db2", "app1", "app2"}
        rows = [screen.table.render_line(y).text for y in range(1, 5)]
        assert all("not asked" in r for r in rows)
        app1 = next(h for h in loaded.hosts if h.name == "app1")
        assert len(app1.behind) == 1 and app1.holds == 4  # its keycloak end never received it
        assert app1.fingerprint in " ".join(rows)
        screen.table.move_to("app1")
        await pilot.pause()
        assert "behind on 1" in str(screen.query_one("#host-detail").render())
        await pilot.press("c")
        assert app.clipboard == app1.fingerprint
        await pilot.press("enter")  # the node's pairs on the main screen
        await pilot.pause()
        assert isinstance(app.screen, MainScreen)
        assert app.screen.query_text == "node:app1" and len(app.screen.table.entries) == 4


async def test_hosts_check_asks_agents_and_says_who_did_not_answer(make_app: Any) -> None:
    app = make_app()
    async with app.run_test(size=(140, 36)) as pilot:
        await settle(pilot)
        await pilot.press("h")
        await settle(pilot)
        await pilot.press("k")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, HostsScreen)
        assert all(h.reachable is False for h in screen.hosts.values())
        assert "4 of 4 nodes did not answer" in app.toast_text()
        assert "NO" in screen.table.render_line(1).text


async def test_audit_filters_by_pair_node_operator_and_kind(make_app: Any, built: Built) -> None:
    app = make_app()
    async with app.run_test(size=(140, 36)) as pilot:
        await settle(pilot)
        with app.open_controller() as ctl:
            ctl.inventory.record("probe", ["database:app2/wiki->db1/postgres"], {"n": 1}, "ok")
            ctl.inventory.record("rotate", [], {"refused": {"app9": "down"}}, "not resolved")
        await pilot.press("a")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, AuditScreen)
        assert [e.kind for e in screen.shown()] == ["rotate", "probe", "declare"]
        screen.set_filter("kind", "prob")
        await pilot.pause()
        assert list(screen.table.entries) == ["2"]
        screen.set_filter("kind", "")
        screen.set_filter("node", "app9")
        await pilot.pause()
        assert list(screen.table.entries) == ["3"]
        screen.set_filter("node", "app2")
        screen.set_filter("pair", "wiki")
        await pilot.pause()
        assert list(screen.table.entries) == ["2", "1"]
        screen.set_filter("operator", "nobody-like-this")
        await pilot.pause()
        assert list(screen.table.entries) == []
        await pilot.press("slash")
        assert screen.query_one("#f-pair").has_focus


async def test_audit_shows_a_broken_chain(make_app: Any, built: Built) -> None:
    db = built.state / "inventory.db"
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE audit SET outcome = 'forged' WHERE seq = 1")
    messages: list[Any] = []
    app = make_app(read_only=True, screen="audit")
    async with app.run_test(size=(140, 36), message_hook=messages.append) as pilot:
        await settle(pilot)
        (loaded,) = [m for m in messages if isinstance(m, AuditLoaded)]
        assert not loaded.check.ok and loaded.check.bad_seq == 1
        chain = str(app.screen.query_one("#chain").render())
        assert "BROKEN at event 1" in chain and "edited" in chain


async def test_audit_exports_json_and_csv_and_says_where(
    make_app: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    out = tmp_path / "exports"
    out.mkdir()
    monkeypatch.chdir(out)
    messages: list[Any] = []
    app = make_app(read_only=True, screen="audit")
    async with app.run_test(size=(140, 36), message_hook=messages.append) as pilot:
        await settle(pilot)
        await pilot.press("e")
        await settle(pilot)
        await pilot.press("x")
        await settle(pilot)
    paths = [Path(m.path) for m in messages if isinstance(m, Exported)]
    assert [p.suffix for p in paths] == [".json", ".csv"] and all(p.parent == out for p in paths)
    events = json.loads(paths[0].read_text())
    assert events[0]["kind"] == "declare"
    rows = list(csv.DictReader(io.StringIO(paths[1].read_text())))
    assert rows[0]["kind"] == "declare" and rows[0]["hash"] == events[0]["hash"]
    assert str(paths[0]) in app.toast_text() and str(paths[1]) in app.toast_text()


async def test_export_falls_back_to_the_state_folder(make_app: Any, built: Built) -> None:
    messages: list[Any] = []
    app = make_app(screen="audit")
    async with app.run_test(size=(140, 36), message_hook=messages.append) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, AuditScreen)
        screen.export_folders = [Path("/proc/no-such-dir"), built.state]
        await pilot.press("e")
        await settle(pilot)
    (exported,) = [m for m in messages if isinstance(m, Exported)]
    assert Path(exported.path).parent == built.state


async def test_help_lists_every_binding_with_its_keymap_id(make_app: Any) -> None:
    app = make_app()
    async with app.run_test(size=(140, 50)) as pilot:
        await settle(pilot)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        text = static_text(app.screen.query_one("#help-table"))
        for act in actions.ACTIONS:
            assert act.id in text, act.id
        assert "tui.toml" in str(app.screen.query_one("#help-keymap").render())
        await pilot.press("escape")
        assert isinstance(app.screen, MainScreen)


async def test_palette_offers_every_action_of_the_screen(make_app: Any) -> None:
    app = make_app()
    async with app.run_test(size=(140, 36)) as pilot:
        await settle(pilot)
        provider = MeshCommands(app.screen)
        titles = {c.title for c in provider.commands()}
        for act in actions.in_scope("pairs") + actions.in_scope("app"):
            if act.id not in ("palette",):
                assert act.description in titles, act.id
        assert {"Group by provider", "Sort by age", "Rotate provider db1/postgres"} <= titles
        await pilot.press("colon")
        assert isinstance(app.screen, CommandPalette)
        await pilot.press(*"group by provider")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, MainScreen) and app.screen.group == "provider"
        await pilot.press("colon", *"hosts")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, HostsScreen)


async def test_keymap_from_the_state_folder_moves_a_key(
    built: Built, fake: FakeActions, tmp_path: Path
) -> None:
    (built.state / "tui.toml").write_text('[keymap]\nrotate = "f2"\nnope = "x"\n')
    app = RecordingApp(built.state, keymap_paths=None)
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        assert app.keymap == {"rotate": "f2"}
        assert "nope" in app.toast_text()
        await pilot.press("r")
        await settle(pilot)
        assert isinstance(app.screen, MainScreen) and fake.calls == []
        await pilot.press("f2")
        await settle(pilot)
        assert isinstance(app.screen, PlanScreen)
        await pilot.press("escape", "question_mark")
        text = static_text(app.screen.query_one("#help-table"))
        assert "f2" in text


async def test_user_keymap_from_xdg(built: Built, monkeypatch: Any, tmp_path: Path) -> None:
    xdg = tmp_path / "xdg"
    (xdg / "meshtui").mkdir(parents=True)
    (xdg / "meshtui" / "keymap.toml").write_text('[keymap]\nhosts = "f3"\n')
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    app = RecordingApp(built.state, keymap_paths=None)
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        await pilot.press("f3")
        await settle(pilot)
        assert isinstance(app.screen, HostsScreen)


async def test_an_empty_state_folder_says_what_to_do(tmp_path: Path) -> None:
    app = RecordingApp(tmp_path / "nothing-here")
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        assert "run meshtui init" in str(app.screen.query_one("#summary").render())
        await pilot.press("q")
    assert app.return_code == 0


def test_run_dashboard_returns_when_the_app_exits(built: Built, monkeypatch: Any) -> None:
    from meshtui.tui import app as app_module

    seen: list[MeshApp] = []

    def fake_run(self: MeshApp, **kwargs: Any) -> int:
        seen.append(self)
        return 0

    monkeypatch.setattr(app_module.MeshApp, "run", fake_run)
    monkeypatch.setattr(app_module, "require_terminal", lambda what: None)  # pytest has none
    assert app_module.run_dashboard(built.state, read_only=True, screen="audit") == 0
    assert seen[0].read_only and seen[0].start_screen == "audit"
