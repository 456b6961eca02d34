"""The main screen with a real inventory: load, filter, sort, group, marks, open, copy, refresh
by key, literal strings, and the small-terminal and NO_COLOR cases."""

from __future__ import annotations

from typing import Any

import pytest

from meshtui.controller.core import Controller
from meshtui.tui.events import Loaded
from meshtui.tui.pairs import PairModel
from meshtui.tui.screens.main import MainScreen
from meshtui.tui.screens.pair import PairScreen
from meshtui.tui.widgets.line_table import GroupHeader, LineTable
from tests.tui.builder import FIXED_NOW, Built, insert_raw_pair, withdraw
from tests.tui.helpers import RecordingApp, settle

GITEA = "database:app1/gitea->db1/postgres"


def table_lines(table: LineTable) -> list[str]:
    """What the table draws, line by line (header first)."""
    return [table.render_line(y).text for y in range(table.scrollable_content_region.height)]


def main(app: RecordingApp) -> MainScreen:
    screen = app.screen
    assert isinstance(screen, MainScreen)
    return screen


async def test_opens_on_every_pair_under_the_summary(make_app: Any, built: Built) -> None:
    messages: list[Any] = []
    app = make_app()
    async with app.run_test(size=(160, 40), message_hook=messages.append) as pilot:
        await settle(pilot)
        screen = main(app)
        assert list(screen.table.entries) == sorted(built.pairs)
        loaded = [m for m in messages if isinstance(m, Loaded)]
        assert len(loaded) == 1 and len(loaded[0].fresh.rows) == 8
        s = app.summary
        assert (s.pairs, s.working, s.stale, s.unknown, s.revoked) == (8, 4, 2, 2, 0)
        lines = table_lines(screen.table)
        assert lines[0].split()[:4] == ["state", "provision", "consumer", "provider"]
        assert "working" in lines[1] and "gitea_app1_" in lines[1]
        summary = screen.query_one("#summary").render()
        assert "8 pairs" in str(summary) and "last push never" in str(summary)
        assert app.screen.focused is screen.table


async def test_filter_as_you_type_and_escape_clears(make_app: Any) -> None:
    app = make_app()
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        screen = main(app)
        await pilot.press("slash", *"gitea")
        assert screen.query_one("#filter").has_focus
        assert len(screen.table.entries) == 2
        await pilot.press("space", *"node:app2")
        assert list(screen.table.entries) == ["database:app2/gitea->db2/postgres"]
        await pilot.press("enter")  # back to the table, filter kept
        assert screen.table.has_focus and len(screen.table.entries) == 1
        await pilot.press("escape")
        assert len(screen.table.entries) == 8
        screen.set_filter("state:stale")
        await pilot.pause()
        assert all(app.model.rows[k].status.state == "stale" for k in screen.table.entries)


async def test_sort_by_key_by_header_click_and_reverse(make_app: Any) -> None:
    app = make_app()
    async with app.run_test(size=(160, 30)) as pilot:
        await settle(pilot)
        screen = main(app)
        await pilot.press("s")  # first column: state
        assert screen.sort == "state"
        first = app.model.rows[screen.table.entries[0]]
        assert first.status.state == "stale"
        await pilot.press("S")
        assert screen.reverse and app.model.rows[screen.table.entries[0]].status.state == "working"
        x = table_lines(screen.table)[0].index("login")
        await pilot.click("#pairs", offset=(x + 1, 0))  # the login header
        await pilot.pause()
        assert screen.sort == "login" and not screen.reverse
        logins = [app.model.rows[k].status.login for k in screen.table.entries]
        assert logins == sorted(logins)
        assert "login ▲" in table_lines(screen.table)[0]


async def test_group_by_provider_then_node_and_fold(make_app: Any) -> None:
    app = make_app()
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        screen = main(app)
        await pilot.press("g")
        headers = [e for e in screen.table.entries if isinstance(e, GroupHeader)]
        assert [h.name for h in headers] == ["db1/postgres", "db2/postgres"]
        await pilot.press("home", "enter")  # fold the first group
        assert len(screen.table.entries) == 8 + 2 - 4
        await pilot.press("g")
        assert [e.name for e in screen.table.entries if isinstance(e, GroupHeader)] == [
            "app1",
            "app2",
        ]
        await pilot.press("g")
        assert screen.group == "none" and len(screen.table.entries) == 8


async def test_space_marks_and_star_marks_every_shown(make_app: Any) -> None:
    app = make_app()
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        screen = main(app)
        await pilot.press("space", "space")
        assert len(screen.table.marked) == 2 and screen.table.cursor == 2
        assert table_lines(screen.table)[1].startswith("●")
        ids, basis = screen.selection()
        assert basis == "2 marked pairs" and len(ids) == 2
        await pilot.press("space")
        await pilot.press("up", "space")  # unmark the third again
        assert len(screen.table.marked) == 2
        await pilot.press("asterisk")
        assert len(screen.table.marked) == 8
        await pilot.press("asterisk")
        assert not screen.table.marked
        await pilot.press("space", "escape")  # escape with no filter clears the marks
        assert not screen.table.marked


async def test_enter_opens_the_pair_with_sparkline_and_holders(make_app: Any) -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, PairScreen) and app.screen.pair == GITEA
        detail = app.screen.detail
        assert detail is not None and len(detail.probes) == 8
        spark = app.screen.query_one("#latency")
        assert len(spark.data) == 8  # type: ignore[attr-defined]
        holders = str(app.screen.query_one("#pair-holders").render())
        assert "file /srv/app1/gitea/db0.password" in holders and "login gitea_app1_" in holders
        await pilot.press("escape")
        assert isinstance(app.screen, MainScreen)


async def test_copy_login_and_pair_id_with_osc52(make_app: Any) -> None:
    app = make_app()
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        await pilot.press("c")
        assert app.clipboard == app.model.rows[GITEA].status.login
        await pilot.press("y")
        assert app.clipboard == GITEA
        assert "copied pair id" not in app.toast_text()  # the title is separate
        assert GITEA in app.toast_text()


async def test_reload_updates_only_the_changed_row(make_app: Any, built: Built) -> None:
    messages: list[Any] = []
    app = make_app()
    async with app.run_test(size=(120, 30), message_hook=messages.append) as pilot:
        await settle(pilot)
        screen = main(app)
        untouched = app.model.rows[GITEA]
        wiki = "database:app2/wiki->db1/postgres"
        with Controller.open(built.state) as ctl:
            withdraw(ctl, wiki, refused=True)
        await pilot.press("f5")
        await settle(pilot)
        assert app.model.rows[GITEA] is untouched
        assert app.model.rows[wiki].status.state == "revoked"
        assert screen.table.entries[-1] == wiki
        with Controller.open(built.state) as ctl:
            raw = insert_raw_pair(ctl)
        app.reload()
        await settle(pilot)
        assert raw in screen.table.entries and len(screen.table.entries) == 9


async def test_markup_in_inventory_strings_shows_literally(make_app: Any, built: Built) -> None:
    with Controller.open(built.state) as ctl:
        raw = insert_raw_pair(ctl)
    app = make_app()
    async with app.run_test(size=(200, 30)) as pilot:
        await settle(pilot)
        screen = main(app)
        screen.set_filter("x[b]y")
        await pilot.pause()
        assert list(screen.table.entries) == [raw]
        line = table_lines(screen.table)[1]
        assert "app1/x[b]y" in line and "login[/]x" in line
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, PairScreen)
        assert "x[b]y" in str(app.screen.query_one("#pair-title").render())
        assert "/srv/[red]f[/red]" in str(app.screen.query_one("#pair-holders").render())
        await pilot.press("c")
        assert app.clipboard == "login[/]x"


async def test_withdrawn_pairs_are_not_acted_on(make_app: Any, built: Built, fake: Any) -> None:
    with Controller.open(built.state) as ctl:
        withdraw(ctl, GITEA, refused=False)
    app = make_app()
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        await pilot.press("r")
        assert isinstance(app.screen, MainScreen)
        assert "withdrawn" in app.toast_text()
        assert fake.calls == []


@pytest.mark.parametrize("size", [(80, 24)])
async def test_usable_at_80x24(make_app: Any, size: tuple[int, int]) -> None:
    app = make_app()
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        screen = main(app)
        table = screen.table
        assert table.region.height >= 14  # header + at least 13 pairs visible
        shown_keys = {b.binding.key for b in app.screen.active_bindings.values() if b.binding.show}
        assert {"slash", "r", "question_mark"} <= shown_keys
        await pilot.press("end")
        assert table.cursor == 7
        await pilot.press("right", "right")
        assert table.scroll_offset.x > 0  # wide columns scroll sideways


async def test_no_color_keeps_states_readable(
    make_app: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    app = make_app()
    assert app.no_color
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        lines = table_lines(main(app).table)
        assert {line.split()[0] for line in lines[1:9]} == {"working", "stale", "unknown"}


async def test_an_older_read_never_replaces_a_newer_one(make_app: Any) -> None:
    app = make_app()
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        newest = app._applied_seq
        stale = Loaded(PairModel.build([], FIXED_NOW), None, 0.0, "", newest - 1)
        app.post_message(stale)
        await pilot.pause()
        assert len(app.model.rows) == 8


async def test_the_first_screenful_shows_before_the_whole_read(
    make_app: Any, built: Built, monkeypatch: pytest.MonkeyPatch, fake: Any
) -> None:
    """On more pairs than a screenful the first frame gets the first ones by id, then the whole
    read replaces them; until it has, the summary says so and nothing can be acted on."""
    import threading

    from meshtui.tui import app as app_module

    monkeypatch.setattr(app_module, "FIRST_PAGE", 3)
    real = Controller.status
    release = threading.Event()

    def status(
        self: Controller, ids: Any = None, *, limit: int | None = None, keep: bool = False
    ) -> Any:
        if limit is None:
            assert release.wait(10), "the test never released the whole read"
        return real(self, ids, limit=limit, keep=keep)

    monkeypatch.setattr(Controller, "status", status)
    messages: list[Any] = []
    app = make_app()
    async with app.run_test(size=(160, 40), message_hook=messages.append) as pilot:
        await pilot.pause(0.2)
        screen = main(app)
        assert list(screen.table.entries) == sorted(built.pairs)[:3]
        assert not app.complete and app.summary is None
        assert "reading the inventory" in str(screen.query_one("#summary").render())
        await pilot.press("r")
        assert "still reading the inventory" in app.toast_text()
        assert isinstance(app.screen, MainScreen) and fake.calls == []
        release.set()
        await settle(pilot)
        loaded = [m for m in messages if isinstance(m, Loaded)]
        assert [(m.partial, len(m.fresh.rows)) for m in loaded] == [(True, 3), (False, 8)]
        assert app.complete and list(screen.table.entries) == sorted(built.pairs)
        assert app.summary is not None and app.summary.pairs == 8


async def test_a_keystroke_that_leaves_the_screenful_as_it_was_redraws_no_row(
    make_app: Any,
) -> None:
    app = make_app()
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot)
        screen = main(app)
        table = screen.table
        await pilot.press("slash")
        await settle(pilot)
        before = table.paints
        await pilot.press(*"data")  # every pair id starts with "database:"
        await pilot.pause()
        assert len(table.entries) == 8
        assert table.paints - before <= 4  # at most the cursor's line, once a key
        before = table.paints
        await pilot.press(*"base:app2")
        await pilot.pause()
        assert len(table.entries) == 4
        assert table.paints - before >= 4  # the rows that did change are drawn
        assert "app2" in table_lines(table)[1]
