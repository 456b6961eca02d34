"""The filter box: editing keys, paste, drawing, and that a keystroke repaints without laying the
screen out again (the 10,000-pair benchmark measures the speed; these tests pin the behaviour)."""

from __future__ import annotations

from typing import Any

import pytest
from textual import events
from textual.app import App, ComposeResult
from textual.screen import Screen

from meshtui.tui.screens.help import HelpScreen
from meshtui.tui.screens.main import MainScreen
from meshtui.tui.widgets.filter_box import FilterBox
from tests.tui.helpers import settle


class BoxApp(App[None]):
    """A filter box alone, recording what it tells its owner."""

    def __init__(self, width: int = 30) -> None:
        super().__init__()
        self.width = width
        self.changed: list[str] = []
        self.called: list[str] = []
        self.submitted: list[str] = []

    def compose(self) -> ComposeResult:
        box = FilterBox(placeholder="filter: words", on_change=self.called.append, id="box")
        box.styles.width = self.width
        yield box

    def on_filter_box_changed(self, event: FilterBox.Changed) -> None:
        self.changed.append(event.value)

    def on_filter_box_submitted(self, event: FilterBox.Submitted) -> None:
        self.submitted.append(event.value)


def line(box: FilterBox) -> str:
    return box.render_line(0).text


async def test_editing_keys_move_and_delete_around_the_cursor() -> None:
    app = BoxApp()
    async with app.run_test() as pilot:
        box = app.query_one(FilterBox)
        box.focus()
        await pilot.press(*"abc", "left", "X")
        assert (box.value, box.cursor) == ("abXc", 3)
        await pilot.press("home", "delete")
        assert (box.value, box.cursor) == ("bXc", 0)
        await pilot.press("end", "backspace")
        assert (box.value, box.cursor) == ("bX", 2)
        await pilot.press("space", *"node:app1", "ctrl+w")
        assert box.value == "bX "
        await pilot.press(*"state:stale", "left", "left", "ctrl+k")
        assert box.value == "bX state:sta"
        await pilot.press("left", "ctrl+u")
        assert (box.value, box.cursor) == ("a", 0)
        await pilot.press("ctrl+e", "q", "question_mark", "slash", "enter")
        assert box.value == "aq?/"  # printable keys are text here, never the app's bindings
        assert app.submitted == ["aq?/"]
        # every change told the owner twice: at once (on_change) and by message
        assert app.called == app.changed
        assert app.changed[:3] == ["a", "ab", "abc"]


async def test_value_setter_paste_and_control_characters() -> None:
    app = BoxApp()
    async with app.run_test() as pilot:
        box = app.query_one(FilterBox)
        box.value = "node:app2"
        box.value = "node:app2"  # the same text again is not a change
        await pilot.pause()
        assert app.changed == ["node:app2"] and box.cursor == len("node:app2")
        box.value = "x\x1b[31my\x07"
        assert box.value == "x[31my"  # escape and bell never reach the terminal
        box.value = ""
        box.focus()
        box.post_message(events.Paste("gitea\nwiki"))
        await pilot.pause()
        assert box.value == "gitea"  # the first line only


async def test_draws_placeholder_cursor_and_keeps_the_cursor_in_view() -> None:
    app = BoxApp(width=10)
    async with app.run_test() as pilot:
        box = app.query_one(FilterBox)
        assert line(box) == "filter: wo"  # not focused: the placeholder, cut to the box
        box.focus()
        await pilot.press(*"provider:db1/postgres")
        assert line(box) == "/postgres "  # the end of the text and the cursor cell
        await pilot.press("home")
        assert line(box) == "provider:d"
        cursor = list(box.render_line(0))[0]
        assert cursor.text == "p" and cursor.style is not None and cursor.style.bgcolor


async def test_no_color_cursor_is_reverse_video(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    app = BoxApp()
    async with app.run_test() as pilot:
        box = app.query_one(FilterBox)
        box.focus()
        await pilot.press("a")
        segments = list(box.render_line(0))
        assert [s.text for s in segments[:2]] == ["a", " "]
        assert segments[1].style is not None and segments[1].style.reverse


async def test_typing_in_the_main_filter_never_lays_out_the_screen(
    make_app: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    layouts: list[str] = []
    real = Screen._refresh_layout

    def counting(self: Screen[Any], *args: Any, **kwargs: Any) -> None:
        layouts.append(type(self).__name__)
        real(self, *args, **kwargs)

    app = make_app()
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, MainScreen)
        await pilot.press("slash")
        await settle(pilot)
        monkeypatch.setattr(Screen, "_refresh_layout", counting)
        await pilot.press(*"gitea", "backspace", "space", *"state:working")
        await pilot.pause(0.1)
        monkeypatch.setattr(Screen, "_refresh_layout", real)
        assert screen.query_one("#filter", FilterBox).value == "gite state:working"
        assert len(screen.table.entries) == 2
        assert layouts == []


async def test_the_scrollbar_comes_and_goes_with_the_filter(make_app: Any) -> None:
    app = make_app()
    async with app.run_test(size=(100, 13)) as pilot:  # room for 6 of the 8 pairs
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, MainScreen)
        table = screen.table
        assert table.show_vertical_scrollbar
        screen.set_filter("gitea")
        await pilot.pause()
        assert len(table.entries) == 2 and not table.show_vertical_scrollbar
        await pilot.press("end")  # the cursor still works in the shorter view
        assert table.cursor == 1
        screen.set_filter("")
        await pilot.pause()
        assert len(table.entries) == 8 and table.show_vertical_scrollbar
        await pilot.press("end")
        assert table.cursor == 7 and table.scroll_offset.y > 0


async def test_escape_leaves_the_box_then_clears_it(make_app: Any) -> None:
    app = make_app()
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, MainScreen)
        box = screen.query_one("#filter", FilterBox)
        await pilot.press("slash", *"provider:db1/postgres", "question_mark", "backspace")
        assert not isinstance(app.screen, HelpScreen)
        assert box.has_focus and len(screen.table.entries) == 4
        await pilot.press("escape")
        assert screen.table.has_focus and box.value == "provider:db1/postgres"
        await pilot.press("escape")
        assert box.value == "" and len(screen.table.entries) == 8
