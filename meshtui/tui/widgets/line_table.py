"""A keyed, virtualised table built on Textual's Line API: it renders only the lines on screen.

The stock DataTable builds every row when it is filled, which costs about a second for 10,000
pairs. This table holds rows in a dict by key and a *view* (the ordered list of keys and group
headers to show after filtering, sorting and grouping); drawing a frame touches only the rows in
the viewport, so filling, filtering and re-sorting cost what computing the view costs.

Every cell is a plain string turned into a Rich ``Segment``: nothing is ever parsed as markup,
and control characters are made visible, so a module named ``x[b]y`` shows literally.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal, Protocol

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Region, Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from meshtui.tui.textual_private import update_scrollbars

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")

ROW_STYLES = ("good", "warn", "bad", "muted", "info", "alarm")
"""The row tones a table knows; the stylesheet gives each a colour and NO_COLOR a text style."""


def clean(text: str) -> str:
    """``text`` with control characters shown as ``\\xNN`` so they cannot drive the terminal."""
    if _CONTROL.search(text) is None:
        return text
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


class RowLike(Protocol):
    """What the table needs of a row: its key, one string per column, and a tone."""

    @property
    def key(self) -> str: ...

    @property
    def cells(self) -> Sequence[str]: ...

    @property
    def tone(self) -> str: ...


@dataclass(frozen=True)
class TableRow:
    """A plain row, for tables that have no richer row type of their own."""

    key: str
    cells: tuple[str, ...]
    tone: str = ""


@dataclass(frozen=True)
class Column:
    """A column: its key (for sorting and clicks), its header and its width limits."""

    key: str
    label: str
    min_width: int = 3
    max_width: int = 40
    align: Literal["left", "right"] = "left"


@dataclass(frozen=True)
class GroupHeader:
    """A group's title line in the view; ``keys`` are the rows under it (shown or collapsed)."""

    name: str
    label: str
    keys: tuple[str, ...]
    collapsed: bool = False

    @property
    def key(self) -> str:
        """A key that can never collide with a row's."""
        return f"\x00group:{self.name}"


Entry = str | GroupHeader
"""One line of the view: a row key or a group header."""


class LineTable(ScrollView, can_focus=True):
    """A table that draws only the visible lines of a possibly huge keyed view."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "cursor(-1)", "Up", show=False),
        Binding("down", "cursor(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "first", "First", show=False),
        Binding("end", "last", "Last", show=False),
        Binding("left", "scroll_left", "Left", show=False),
        Binding("right", "scroll_right", "Right", show=False),
    ]

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "line-table--header",
        "line-table--cursor",
        "line-table--cursor-blurred",
        "line-table--group",
        "line-table--mark",
        "line-table--empty",
        *(f"line-table--{tone}" for tone in ROW_STYLES),
    }

    DEFAULT_CSS = """
    LineTable { height: 1fr; background: $surface; }
    LineTable > .line-table--header { background: $panel; color: $foreground; text-style: bold; }
    LineTable > .line-table--cursor {
        background: $block-cursor-background; color: $block-cursor-foreground; text-style: bold;
    }
    LineTable > .line-table--cursor-blurred {
        background: $block-cursor-blurred-background; text-style: none;
    }
    LineTable > .line-table--group { color: $accent; text-style: bold; }
    LineTable > .line-table--mark { color: $accent; text-style: bold; }
    LineTable > .line-table--empty { color: $text-muted; text-style: italic; }
    LineTable > .line-table--good { color: $success; }
    LineTable > .line-table--warn { color: $warning; }
    LineTable > .line-table--bad { color: $error; }
    LineTable > .line-table--muted { color: $text-muted; }
    LineTable > .line-table--info { color: $foreground; }
    LineTable > .line-table--alarm { color: $error; text-style: bold reverse; }
    """

    cursor: reactive[int] = reactive(0, always_update=True, repaint=False)
    """Index into the view of the highlighted line."""

    class Highlighted(Message):
        """The cursor moved onto ``key`` (a row key or a group header's key)."""

        def __init__(self, table: LineTable, key: str | None) -> None:
            super().__init__()
            self.table, self.key = table, key

        @property
        def control(self) -> LineTable:
            """The table that sent it (what ``@on(..., selector)`` matches)."""
            return self.table

    class Activated(Message):
        """A second click (or double click) on the line with ``key``."""

        def __init__(self, table: LineTable, key: str) -> None:
            super().__init__()
            self.table, self.key = table, key

        @property
        def control(self) -> LineTable:
            """The table that sent it."""
            return self.table

    class HeaderClicked(Message):
        """A column's header was clicked (the owner sorts by it)."""

        def __init__(self, table: LineTable, column: str) -> None:
            super().__init__()
            self.table, self.column = table, column

        @property
        def control(self) -> LineTable:
            """The table that sent it."""
            return self.table

    def __init__(
        self,
        columns: Sequence[Column],
        *,
        markable: bool = False,
        empty_text: str = "nothing to show",
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.columns: tuple[Column, ...] = tuple(columns)
        self.markable = markable
        self.empty_text = empty_text
        self.rows: Mapping[str, RowLike] = {}
        self.marked: set[str] = set()
        self.sort_column: str | None = None
        self.sort_reverse = False
        self._entries: list[Entry] = []
        self._index: dict[str, int] | None = {}
        self._widths: list[int] = [c.min_width for c in self.columns]
        self._text_cache: dict[str, tuple[RowLike, str]] = {}
        self._frame: tuple[Style, Style, int, int, int] | None = None
        self._drawn: tuple[object, ...] | None = None  # what set_view last put on screen
        self.paints = 0
        """How many data lines were drawn (the benchmark waits for the first)."""

    # ---- data ---------------------------------------------------------------------------
    @property
    def entries(self) -> Sequence[Entry]:
        """The view: what is shown, in order."""
        return self._entries

    def set_rows(self, rows: Mapping[str, RowLike], widths: Sequence[int] | None = None) -> None:
        """Use ``rows`` (keyed) from now on; ``widths`` skips measuring when the owner knows."""
        self.rows = rows
        self._drawn = None  # rows may have changed under the same keys: redraw all next time
        new_widths = list(widths) if widths is not None else self.measure(rows.values())
        if new_widths != self._widths:
            self._text_cache.clear()
        self._widths = new_widths

    def measure(self, rows: Iterable[RowLike]) -> list[int]:
        """Column widths that fit ``rows`` within each column's limits."""
        widths = [max(c.min_width, cell_len(c.label)) for c in self.columns]
        limits = [c.max_width for c in self.columns]
        for row in rows:
            for i, text in enumerate(row.cells):
                n = len(text)
                if n > widths[i]:
                    widths[i] = min(n, limits[i])
        return widths

    def set_view(self, entries: list[Entry]) -> None:
        """Show ``entries``; the cursor stays on the same key when it is still shown.

        The lines on screen are drawn again only when what they show changed: a filter
        keystroke that leaves the first screenful as it was (most do, on a large mesh) costs
        the scrollbar and the filter box's own line, not a repaint of the whole table.
        """
        current = self.current_key
        self._entries = entries
        self._index = None
        self._set_virtual_size(Size(self.content_width, len(entries) + 1))
        target = self._find(current) if current else None
        self.cursor = max(0, target if target is not None else min(self.cursor, len(entries) - 1))
        drawn = self._window()
        if drawn != self._drawn:
            self._drawn = drawn
            self.refresh()

    def _window(self) -> tuple[object, ...]:
        """What the visible lines depend on besides the rows: the header's sort mark, the
        scroll position and the entries on screen."""
        top, height = int(self.scroll_offset.y), self._body_height
        return (
            self.sort_column,
            self.sort_reverse,
            int(self.scroll_offset.x),
            top,
            *self._entries[top : top + height],
        )

    def _set_virtual_size(self, size: Size) -> None:
        """Take a new scrollable size without a layout pass when the scrollbars stay as they are.

        ``virtual_size`` is a layout reactive: setting it re-arranges the whole screen, which for
        a ScrollView only ends in ``_scroll_update`` (scrollbar thumbs and the scroll clamp).
        A filter keystroke changes the height nearly every time, so do that part directly and
        ask for the layout only when a scrollbar must appear or go (the content area changes).
        """
        if size == self.virtual_size:
            return
        if not self.is_mounted or not self.container_size:
            self.virtual_size = size  # not arranged yet: the first layout does it all
            return
        shown = (self.show_vertical_scrollbar, self.show_horizontal_scrollbar)
        self.set_reactive(LineTable.virtual_size, size)
        update_scrollbars(self, size)
        if (self.show_vertical_scrollbar, self.show_horizontal_scrollbar) != shown:
            self.refresh(layout=True)

    def index_of(self, key: str) -> int | None:
        """Where ``key`` is in the view (a dict is built on first lookup by key after a change)."""
        if self._index is None:
            self._index = {
                (e if isinstance(e, str) else e.key): i for i, e in enumerate(self._entries)
            }
        return self._index.get(key)

    def _find(self, key: str) -> int | None:
        """One lookup without building the index (a linear scan in C is cheaper once)."""
        if self._index is not None:
            return self._index.get(key)
        try:
            return self._entries.index(key)
        except ValueError:
            return next(
                (
                    i
                    for i, e in enumerate(self._entries)
                    if isinstance(e, GroupHeader) and e.key == key
                ),
                None,
            )

    def refresh_keys(self, keys: Iterable[str]) -> int:
        """Redraw the visible lines of ``keys``; returns how many were on screen."""
        top, height = int(self.scroll_offset.y), self._body_height
        drawn = 0
        for key in keys:
            i = self.index_of(key)
            if i is not None and top <= i < top + height:
                self.refresh_line(i + 1)
                drawn += 1
        return drawn

    @property
    def content_width(self) -> int:
        """Width of a full line: the mark gutter plus every column and its gap."""
        return (2 if self.markable else 0) + sum(w + 1 for w in self._widths)

    @property
    def current_entry(self) -> Entry | None:
        """The line under the cursor."""
        if 0 <= self.cursor < len(self._entries):
            return self._entries[self.cursor]
        return None

    @property
    def current_key(self) -> str | None:
        """Key of the line under the cursor (a group header's key for a header)."""
        entry = self.current_entry
        if entry is None:
            return None
        return entry if isinstance(entry, str) else entry.key

    def move_to(self, key: str) -> bool:
        """Put the cursor on ``key`` when it is shown."""
        i = self.index_of(key)
        if i is None:
            return False
        self.cursor = i
        return True

    # ---- cursor -------------------------------------------------------------------------
    def validate_cursor(self, value: int) -> int:
        return max(0, min(value, len(self._entries) - 1))

    def watch_cursor(self, old: int, new: int) -> None:
        self.refresh_line(old + 1)
        self.refresh_line(new + 1)
        self._scroll_cursor_into_view()
        self.post_message(self.Highlighted(self, self.current_key))

    @property
    def _body_height(self) -> int:
        """How many data lines fit under the header."""
        return max(1, self.scrollable_content_region.height - 1)

    def _scroll_cursor_into_view(self) -> None:
        rows = self._body_height
        top = int(self.scroll_offset.y)
        if self.cursor < top:
            self.scroll_to(y=self.cursor, animate=False)
        elif self.cursor >= top + rows:
            self.scroll_to(y=self.cursor - rows + 1, animate=False)

    def action_cursor(self, delta: int) -> None:
        """Move the cursor by ``delta`` lines."""
        self.cursor += delta

    def action_page(self, direction: int) -> None:
        """Move the cursor by one screenful."""
        self.cursor += direction * max(1, self._body_height - 1)

    def action_first(self) -> None:
        """Cursor to the first line."""
        self.cursor = 0

    def action_last(self) -> None:
        """Cursor to the last line."""
        self.cursor = len(self._entries) - 1

    def action_activate(self) -> None:
        """Tell the owner the line under the cursor was chosen."""
        key = self.current_key
        if key is not None:
            self.post_message(self.Activated(self, key))

    def on_resize(self, event: events.Resize) -> None:
        self._scroll_cursor_into_view()
        self._drawn = self._window()  # a resize redraws every line: the screen shows this

    def on_focus(self, event: events.Focus) -> None:
        self.refresh_line(self.cursor + 1)

    def on_blur(self, event: events.Blur) -> None:
        self.refresh_line(self.cursor + 1)

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None:
            return
        if offset.y == 0:
            column = self._column_at(offset.x + int(self.scroll_offset.x))
            if column is not None:
                self.post_message(self.HeaderClicked(self, column))
            return
        index = int(self.scroll_offset.y) + offset.y - 1
        if 0 <= index < len(self._entries):
            again = index == self.cursor
            self.cursor = index
            if again or event.chain > 1:
                self.action_activate()

    def _column_at(self, x: int) -> str | None:
        pos = 2 if self.markable else 0
        for column, width in zip(self.columns, self._widths, strict=True):
            if pos <= x < pos + width + 1:
                return column.key
            pos += width + 1
        return None

    # ---- drawing ------------------------------------------------------------------------
    # A frame draws only the visible lines. Each line is built as a few (text, style) runs and
    # cropped to the viewport as text, so one Strip is made per line; styles that depend only
    # on the widget are looked up once per frame, not once per line.
    def _style(self, name: str) -> Style:
        return self.get_component_rich_style(f"line-table--{name}")

    def _frame_info(self) -> tuple[Style, Style, int, int, int]:
        return (
            self.rich_style,
            self._style("cursor" if self.has_focus else "cursor-blurred"),
            int(self.scroll_offset.x),
            int(self.scroll_offset.y),
            self.scrollable_content_region.width,
        )

    def render_lines(self, crop: Region) -> list[Strip]:
        self._frame = self._frame_info()
        try:
            return super().render_lines(crop)
        finally:
            self._frame = None

    def render_line(self, y: int) -> Strip:
        base, cursor_style, x, top, width = self._frame or self._frame_info()
        if y == 0:
            style = self._style("header")
            return self._line([(self._header_text(), style)], x, width, style)
        index = top + y - 1
        if not self._entries:
            if y == 1:
                return self._line([(" " + self.empty_text, self._style("empty"))], x, width, base)
            return Strip.blank(width, base)
        if index >= len(self._entries):
            return Strip.blank(width, base)
        entry = self._entries[index]
        at_cursor = index == self.cursor
        if isinstance(entry, GroupHeader):
            style = self._style("group")
            if at_cursor:
                style += cursor_style
            arrow = "▸" if entry.collapsed else "▾"
            return self._line([(f"{arrow} {clean(entry.label)}", style)], x, width, style)
        row = self.rows.get(entry)
        if row is None:
            return Strip.blank(width, base)
        self.paints += 1
        style = base + self._style(row.tone) if row.tone else base
        if at_cursor:
            style += cursor_style
        runs: list[tuple[str, Style]] = []
        if self.markable:
            if entry in self.marked:
                runs.append(("● ", style + self._style("mark")))
            else:
                runs.append(("  ", style))
        runs.append((self._row_text(row), style))
        return self._line(runs, x, width, style if at_cursor else base)

    @staticmethod
    def _line(runs: list[tuple[str, Style]], x: int, width: int, fill: Style) -> Strip:
        """One Strip of ``runs`` seen through the viewport [x, x + width), padded with ``fill``."""
        if not all(text.isascii() for text, _ in runs):  # wide characters: let Strip measure
            strip = Strip([Segment(text, style) for text, style in runs])
            return strip.crop_extend(x, x + width, fill)
        out: list[Segment] = []
        pos, end, used = 0, x + width, 0
        for text, style in runs:
            n = len(text)
            a, b = max(x, pos), min(end, pos + n)
            if a < b:
                out.append(Segment(text[a - pos : b - pos], style))
                used += b - a
            pos += n
            if pos >= end:
                break
        if used < width:
            out.append(Segment(" " * (width - used), fill))
        return Strip(out, width)

    def _header_text(self) -> str:
        parts = ["  "] if self.markable else []
        for column, width in zip(self.columns, self._widths, strict=True):
            label = column.label
            if column.key == self.sort_column:
                label += " ▼" if self.sort_reverse else " ▲"
            parts.append(self._fit(label, width, column.align) + " ")
        return "".join(parts)

    def _row_text(self, row: RowLike) -> str:
        """A row's cells fitted to the column widths, as one string (cached per row object)."""
        cached = self._text_cache.get(row.key)
        if cached is not None and cached[0] is row:
            return cached[1]
        text = "".join(
            self._fit(clean(cell), width, column.align) + " "
            for column, width, cell in zip(self.columns, self._widths, row.cells, strict=False)
        )
        self._text_cache[row.key] = (row, text)
        return text

    @staticmethod
    def _fit(text: str, width: int, align: Literal["left", "right"]) -> str:
        # printable ASCII (control characters were made visible) is one cell a character
        length = len(text) if text.isascii() else cell_len(text)
        if length > width:
            return set_cell_size(text, width - 1) + "…"
        if align == "right":
            return " " * (width - length) + text
        return text + " " * (width - length)
