"""The summary bar over the pairs table: counts by state, alarms, the last push, and the job.

It is the one place an operator looks to know whether the mesh is fine, so it says so in words
(not only in colour, which NO_COLOR takes away).
"""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar

from rich.style import Style
from rich.text import Text
from textual.widget import Widget

from meshtui.controller.reports import Summary
from meshtui.tui.pairs import parse_time, short_age


class SummaryBar(Widget):
    """Three lines: where we are, the counts, and what is going on."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "summary--title",
        "summary--good",
        "summary--warn",
        "summary--bad",
        "summary--muted",
        "summary--readonly",
    }

    DEFAULT_CSS = """
    SummaryBar {
        height: 3; width: 1fr; padding: 0 1; text-wrap: nowrap; text-overflow: ellipsis;
    }
    SummaryBar > .summary--title { text-style: bold; color: $accent; }
    SummaryBar > .summary--good { color: $success; text-style: bold; }
    SummaryBar > .summary--warn { color: $warning; text-style: bold; }
    SummaryBar > .summary--bad { color: $error; text-style: bold reverse; }
    SummaryBar > .summary--muted { color: $text-muted; }
    SummaryBar > .summary--readonly { color: $error; text-style: bold; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.state_name = ""
        self.read_only = False
        self.summary: Summary | None = None
        self.shown: int | None = None
        self.marked = 0
        self.now: datetime | None = None
        self.note = ""
        self.job: tuple[str, str, int, int] | None = None
        self.watch_text = ""  # whether a meshtui watch runs, and its last cycle ("" without one)

    def _s(self, name: str) -> Style:
        return self.get_component_rich_style(f"summary--{name}")

    def render(self) -> Text:
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append("meshtui ", self._s("title"))
        text.append(self.state_name)
        if self.read_only:
            text.append("  READ-ONLY (audit)", self._s("readonly"))
        text.append("\n")
        s = self.summary
        if s is None:
            text.append(self.note or "reading the inventory…", self._s("muted"))
            text.append("\n")
        else:
            text.append(f"{s.pairs} pairs  ")
            for count, word, tone in (
                (s.working, "working", "good"),
                (s.stale, "stale", "warn"),
                (s.revoked, "revoked", "muted"),
                (s.unknown, "unknown", "muted"),
            ):
                text.append(f"{count} {word}", self._s(tone) if count else Style())
                text.append("  ")
            if s.alarms:
                text.append(f" {s.alarms} ALARM ", self._s("bad"))
            if s.secrets:
                text.append(f" {sum(n for _, n in s.secrets)} own secrets ")
                for word, n in s.secrets:
                    tone = {"working": "good", "stale": "warn"}.get(word, "muted")
                    text.append(f"{n} {word}", self._s(tone))
                    text.append(" ")
            text.append("\n")
        if self.job is not None:
            title, what, done, total = self.job
            of = f" {done}/{total}" if total else ""
            text.append(f"▶ {title}: {what}{of}", self._s("warn"))
        elif s is not None:
            text.append(f"last push {self._ago(s.last_push)}", self._s("muted"))
            if s.withdrawn:
                text.append(f" · {s.withdrawn} withdrawn", self._s("muted"))
            if self.shown is not None and self.shown != s.pairs:
                text.append(f" · {self.shown} shown", self._s("muted"))
            if self.marked:
                text.append(f" · {self.marked} marked", self._s("warn"))
            if self.watch_text:
                calm = self.watch_text.startswith(("watch running", "watch standing", "leader "))
                tone = "good" if calm and "no leader" not in self.watch_text else "warn"
                text.append(" · ", self._s("muted"))
                text.append(self.watch_text, self._s(tone))
        return text

    def _ago(self, stamp: str | None) -> str:
        when = parse_time(stamp)
        if when is None or self.now is None:
            return "never"
        return short_age((self.now - when).total_seconds()) + " ago"
