"""A one-line text box for filter-as-you-type that never asks the screen for a layout pass.

Textual's stock ``Input`` sets its virtual size (a layout reactive) on every change, so each
keystroke re-arranged and repainted the whole main screen: with 10,000 pairs that cost more
than the filtering itself. This box is drawn with the Line API, has a fixed height of one
line, and a change repaints only its own line. The owner hears of a change through
:class:`Changed`, or, when what it shows must change in the same frame as the box, through an
``on_change`` callback called at once: the box's repaint and the owner's then reach the screen
together, where a message would arrive after the box's own frame and leave the owner's for the
next one, up to a sixtieth of a second later.

Keys: printable characters insert at the cursor; backspace, delete, ctrl+w (word) and
ctrl+u / ctrl+k (to the start / end) delete; left, right, home, end (ctrl+a, ctrl+e) move;
enter posts :class:`Submitted`. Escape is left to the screen. Pasted text inserts its first
line. Control characters are never inserted, so the text can always be shown as typed.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import ClassVar

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.strip import Strip
from textual.widget import Widget

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_WORD_LEFT = re.compile(r"\S*\s*$")


class FilterBox(Widget, can_focus=True):
    """A single-line text box that repaints only itself."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("backspace,ctrl+h", "delete_left", "Delete left", show=False),
        Binding("delete,ctrl+d", "delete_right", "Delete right", show=False),
        Binding("ctrl+w,ctrl+backspace,alt+backspace", "delete_word", "Delete word", show=False),
        Binding("ctrl+u", "delete_to_start", "Delete to start", show=False),
        Binding("ctrl+k", "delete_to_end", "Delete to end", show=False),
        Binding("left", "move(-1)", "Left", show=False),
        Binding("right", "move(1)", "Right", show=False),
        Binding("home,ctrl+a", "home", "Start", show=False),
        Binding("end,ctrl+e", "end", "End", show=False),
        Binding("enter", "submit", "Submit", show=False),
    ]

    COMPONENT_CLASSES: ClassVar[set[str]] = {"filter-box--cursor", "filter-box--placeholder"}

    DEFAULT_CSS = """
    FilterBox { height: 1; width: 1fr; background: $surface; color: $foreground; }
    FilterBox > .filter-box--cursor {
        background: $input-cursor-background;
        color: $input-cursor-foreground;
        text-style: $input-cursor-text-style;
    }
    FilterBox > .filter-box--placeholder { color: $text-disabled; }
    """

    class Changed(Message):
        """The text changed (typed, deleted, pasted or set)."""

        def __init__(self, box: FilterBox, value: str) -> None:
            super().__init__()
            self.box, self.value = box, value

        @property
        def control(self) -> FilterBox:
            """The box that sent it (what ``@on(..., selector)`` matches)."""
            return self.box

    class Submitted(Message):
        """Enter was pressed."""

        def __init__(self, box: FilterBox, value: str) -> None:
            super().__init__()
            self.box, self.value = box, value

        @property
        def control(self) -> FilterBox:
            """The box that sent it."""
            return self.box

    def __init__(
        self,
        value: str = "",
        *,
        placeholder: str = "",
        on_change: Callable[[str], object] | None = None,
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._value = _CONTROL.sub("", value)
        self.cursor = len(self._value)
        """Index into the text where the next character goes."""
        self.placeholder = placeholder
        self.on_change = on_change
        """Called with the new text on every change, before the box repaints."""
        self._offset = 0
        """First cell shown, so the cursor stays visible in a text wider than the box."""

    # ---- the text -----------------------------------------------------------------------
    @property
    def value(self) -> str:
        """The text in the box."""
        return self._value

    @value.setter
    def value(self, text: str) -> None:
        text = _CONTROL.sub("", text)
        self._change(text, len(text))

    def _change(self, text: str, cursor: int) -> None:
        """Take ``text`` with the cursor at ``cursor``: repaint this line, tell the owner."""
        cursor = max(0, min(cursor, len(text)))
        if text == self._value:
            self._move(cursor)
            return
        self._value, self.cursor = text, cursor
        if self.on_change is not None:
            self.on_change(text)
        self.refresh()  # a repaint of this one line, never a layout
        self.post_message(self.Changed(self, text))

    def _move(self, cursor: int) -> None:
        cursor = max(0, min(cursor, len(self._value)))
        if cursor != self.cursor:
            self.cursor = cursor
            self.refresh()

    def insert(self, text: str) -> None:
        """Insert ``text`` (control characters dropped) at the cursor."""
        text = _CONTROL.sub("", text)
        if text:
            v, c = self._value, self.cursor
            self._change(v[:c] + text + v[c:], c + len(text))

    # ---- keys ---------------------------------------------------------------------------
    async def _on_key(self, event: events.Key) -> None:
        if event.is_printable and event.character is not None:
            event.stop()
            event.prevent_default()
            self.insert(event.character)

    def _on_paste(self, event: events.Paste) -> None:
        event.stop()
        lines = event.text.splitlines()
        if lines:
            self.insert(lines[0])

    async def _on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None:
            return
        target, cells = offset.x + self._offset, 0
        for index, char in enumerate(self._value):
            cells += cell_len(char)
            if cells > target:
                self._move(index)
                return
        self._move(len(self._value))

    def _on_focus(self, event: events.Focus) -> None:
        self.refresh()

    def _on_blur(self, event: events.Blur) -> None:
        self.refresh()

    def action_delete_left(self) -> None:
        """Delete the character left of the cursor."""
        v, c = self._value, self.cursor
        if c:
            self._change(v[: c - 1] + v[c:], c - 1)

    def action_delete_right(self) -> None:
        """Delete the character under the cursor."""
        v, c = self._value, self.cursor
        if c < len(v):
            self._change(v[:c] + v[c + 1 :], c)

    def action_delete_word(self) -> None:
        """Delete the word left of the cursor (and the spaces after it)."""
        v, c = self._value, self.cursor
        match = _WORD_LEFT.search(v[:c])
        start = match.start() if match and match.start() < c else max(0, c - 1)
        self._change(v[:start] + v[c:], start)

    def action_delete_to_start(self) -> None:
        """Delete everything left of the cursor."""
        self._change(self._value[self.cursor :], 0)

    def action_delete_to_end(self) -> None:
        """Delete everything from the cursor on."""
        self._change(self._value[: self.cursor], self.cursor)

    def action_move(self, delta: int) -> None:
        """Move the cursor by ``delta`` characters."""
        self._move(self.cursor + delta)

    def action_home(self) -> None:
        """Cursor to the start."""
        self._move(0)

    def action_end(self) -> None:
        """Cursor to the end."""
        self._move(len(self._value))

    def action_submit(self) -> None:
        """Tell the owner enter was pressed."""
        self.post_message(self.Submitted(self, self._value))

    # ---- drawing ------------------------------------------------------------------------
    def render_line(self, y: int) -> Strip:
        base = self.rich_style
        width = self.content_size.width
        if y != 0 or width <= 0:
            return Strip.blank(max(0, width), base)
        focused = self.has_focus
        cursor_style = base + self.get_component_rich_style("filter-box--cursor")
        if self.app.no_color:
            cursor_style += Style(reverse=True)  # colours are gone: keep the cursor visible
        if not self._value:
            placeholder = base + self.get_component_rich_style("filter-box--placeholder")
            text = self.placeholder
            if focused:
                runs = [(text[:1] or " ", cursor_style), (text[1:], placeholder)]
            else:
                runs = [(text, placeholder)]
            self._offset = 0
            return self._strip(runs, 0, width, base)
        value, cursor = self._value, self.cursor
        if focused:
            at = value[cursor : cursor + 1] or " "  # at the end, the cursor is a blank cell
            runs = [(value[:cursor], base), (at, cursor_style), (value[cursor + 1 :], base)]
            # scroll sideways so the cursor cell is inside the box
            start = cell_len(value[:cursor])
            end = start + cell_len(at)
            if start < self._offset:
                self._offset = start
            elif end > self._offset + width:
                self._offset = end - width
        else:
            runs = [(value, base)]
            self._offset = 0
        return self._strip(runs, self._offset, width, base)

    @staticmethod
    def _strip(runs: list[tuple[str, Style]], offset: int, width: int, fill: Style) -> Strip:
        """``runs`` seen through the box: cells [offset, offset + width), padded with ``fill``."""
        strip = Strip([Segment(text, style) for text, style in runs if text])
        return strip.crop_extend(offset, offset + width, fill)
