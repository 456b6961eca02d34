"""A histogram of credential ages: how long since each live pair's password was minted.

Old credentials are the ones a rotation policy cares about, so the buckets are the usual
policy steps (a day, a week, a month, a quarter); each bucket's count is printed under its bar
so the picture still reads without colour.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from typing import ClassVar

from rich.text import Text
from textual.widget import Widget

BUCKETS: tuple[tuple[str, float], ...] = (
    ("<1d", 86400.0),
    ("<7d", 7 * 86400.0),
    ("<30d", 30 * 86400.0),
    ("<90d", 90 * 86400.0),
    ("90d+", float("inf")),
)
BLOCKS = " ▁▂▃▄▅▆▇█"
_LIMITS = tuple(limit for _, limit in BUCKETS)


def bucket_counts(ages: Iterable[float | None]) -> list[int]:
    """How many ages fall in each bucket (unknown ages are left out)."""
    counts = [0] * len(BUCKETS)
    for age in ages:
        if age is not None:
            counts[bisect_right(_LIMITS, age)] += 1  # the first bucket whose limit is above
    return counts


def bars(counts: list[int], height: int) -> list[str]:
    """``height`` lines of block characters, tallest bucket full, top line first."""
    peak = max(counts, default=0) or 1
    levels = [round(c / peak * height * 8) if c else 0 for c in counts]
    lines = []
    for row in range(height - 1, -1, -1):
        cells = []
        for level in levels:
            fill = max(0, min(8, level - row * 8))
            cells.append(BLOCKS[fill] * 3)
        lines.append(" ".join(f"{c} " for c in cells))
    return lines


class AgeHistogram(Widget):
    """Bars per age bucket, then the bucket names, then the counts."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"age-histogram--bar", "age-histogram--label"}

    DEFAULT_CSS = """
    AgeHistogram { width: 24; height: 4; }
    AgeHistogram > .age-histogram--bar { color: $accent; }
    AgeHistogram > .age-histogram--label { color: $text-muted; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.counts = [0] * len(BUCKETS)

    def set_ages(self, ages: Iterable[float | None]) -> None:
        """Recount and redraw."""
        counts = bucket_counts(ages)
        if counts != self.counts:
            self.counts = counts
            self.refresh()

    def render(self) -> Text:
        bar_style = self.get_component_rich_style("age-histogram--bar")
        label_style = self.get_component_rich_style("age-histogram--label")
        height = max(1, self.size.height - 2)
        text = Text(no_wrap=True)
        for line in bars(self.counts, height):
            text.append(line + "\n", bar_style)
        text.append(" ".join(f"{name:<4}" for name, _ in BUCKETS) + "\n", label_style)
        text.append(" ".join(f"{_short(c):<4}" for c in self.counts), label_style)
        return text


def _short(n: int) -> str:
    return str(n) if n < 10000 else f"{n // 1000}k"
