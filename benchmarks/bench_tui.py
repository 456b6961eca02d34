"""Dashboard speed on 10,000 pairs: time to first paint, and to apply one filter keystroke.

Run from the repository root::

    .venv/bin/python benchmarks/bench_tui.py            # builds a 10k-pair state in a temp dir
    .venv/bin/python benchmarks/bench_tui.py --state S  # or measures an existing state folder
    .venv/bin/python benchmarks/bench_tui.py --pairs 50000 --skip-baseline   # the 50k goals

Goals: up to 10,000 pairs, first paint <= 120 ms and a keystroke's median <= 8 ms;
at 50,000, <= 250 ms and <= 15 ms. ``--skip-baseline`` leaves out the stock DataTable (at
50,000 pairs it takes minutes to mount every row).

Both the meshtui dashboard and a baseline (the stock Textual DataTable mounting every row, the
obvious way to write it) run in this one process on the same rows, headless at 160x50, and the
table prints each figure with the ratio. "First paint" is from constructing the app to the first
frame that draws pair rows (the read of the inventory included: on more than a screenful of
pairs the dashboard reads and shows the first screenful, then the rest); "all pairs shown" is
to the frame after the whole read (summary counted, every pair filterable); a "keystroke" is
from pressing a key in the filter box to the next frame drawing the filtered rows.

Each figure of the dashboard is over ``--starts`` starts (5): the median first paint, every
start's keystrokes pooled; before each start the previous one's garbage is collected, as a
fresh process has none.

The floor is measured in the same run: Textual's own first frame of a trivial app (one Static)
at the same size, and the dashboard's own first frame on an inventory with no pairs.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Coroutine, Iterable
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rich.text import Text  # noqa: E402
from textual import events  # noqa: E402
from textual.app import App, ComposeResult  # noqa: E402
from textual.strip import Strip  # noqa: E402
from textual.widgets import DataTable, Input, Static  # noqa: E402

from meshtui.controller.core import Controller  # noqa: E402
from meshtui.model import PairStatus  # noqa: E402
from meshtui.tui.app import MeshApp  # noqa: E402
from meshtui.tui.pairs import COLUMNS, Query, make_row  # noqa: E402
from meshtui.tui.screens.main import MainScreen  # noqa: E402
from meshtui.tui.widgets.filter_box import FilterBox  # noqa: E402
from meshtui.tui.widgets.line_table import LineTable  # noqa: E402
from tests.tui.builder import FIXED_NOW, build  # noqa: E402

SIZE = (160, 50)
T = TypeVar("T")
TYPED = ["a", "p", "p", "1", "backspace", "space", "s", "t", "a", "l", "e"]
KEYS = [*TYPED, *["backspace"] * 9]
"""Typed into the filter: "app1" narrows step by step, then " stale" adds a second term; then
backspace to an empty filter, so the view widens again key by key back to every pair."""


def send_key(app: App[Any], key: str) -> None:
    """Hand a key to the app the way the terminal driver does (no test-harness waits)."""
    char = {"space": " ", "backspace": None}.get(key, key)
    event = events.Key(key, char)
    event.set_sender(app)
    assert app._driver is not None
    app._driver.send_message(event)


async def _until(predicate: Any, limit: float = 30.0) -> None:
    end = time.perf_counter() + limit
    while not predicate():
        if time.perf_counter() > end:
            raise TimeoutError("the frame never came")
        await asyncio.sleep(0.001)


# ---- meshtui ----------------------------------------------------------------------------
async def bench_meshtui(state: Path) -> dict[str, Any]:
    """First paint and per-keystroke times of the real dashboard."""
    draw, draw_box = LineTable.render_line, FilterBox.render_line
    frames: list[tuple[float, int]] = []  # when a table line was drawn, and the view's length
    boxes: list[float] = []  # when the filter box was drawn

    def timed_line(self: LineTable, y: int) -> Strip:
        frames.append((time.perf_counter(), len(self.entries)))
        return draw(self, y)

    def timed_box(self: FilterBox, y: int) -> Strip:
        boxes.append(time.perf_counter())
        return draw_box(self, y)

    LineTable.render_line = timed_line  # type: ignore[method-assign]
    FilterBox.render_line = timed_box  # type: ignore[method-assign]
    try:
        return await _bench_meshtui(state, frames, boxes)
    finally:
        LineTable.render_line, FilterBox.render_line = draw, draw_box  # type: ignore[method-assign]


async def _bench_meshtui(
    state: Path, frames: list[tuple[float, int]], boxes: list[float]
) -> dict[str, Any]:
    start = time.perf_counter()
    app = MeshApp(state, clock=lambda: FIXED_NOW, keymap_paths=[], poll_seconds=0)
    out: dict[str, Any] = {}
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        assert isinstance(screen, MainScreen)
        table = screen.table
        await _until(lambda: table.paints > 0)
        out["first_paint"] = time.perf_counter() - start
        out["first_rows"] = len(app.model.rows)
        await _until(lambda: app.complete and frames[-1][1] == len(app.model.rows))
        out["complete"] = next(t for t, n in frames if n == len(app.model.rows)) - start
        out["load"] = app.load_seconds
        out["rows"] = len(app.model.rows)
        await pilot.pause()
        await pilot.press("slash")
        await pilot.pause()
        times, views, redrawn = [], [], []
        for key in KEYS:
            # the keystroke's frame: the box redraws its line, and in the same frame the
            # table redraws the lines whose content changed (none when the screenful is the
            # same); the view was computed before either, in the box's change callback
            before, lines = len(boxes), table.paints
            t0 = time.perf_counter()
            send_key(app, key)
            await _until(lambda b=before: len(boxes) > b)
            times.append(time.perf_counter() - t0)
            views.append(screen.view_seconds)
            redrawn.append(table.paints - lines)
            assert list(table.entries) == app.model.view(screen.parsed)
            await pilot.pause()
        out["keys"] = times
        out["view"] = views
        out["redrawn"] = redrawn
        out["shown"] = len(table.entries)
        # a reload that changes nothing must not redraw the table
        before = table.paints
        app.reload()
        await app.workers.wait_for_complete()
        await pilot.pause(0.05)
        out["idle_reload_paints"] = table.paints - before
    return out


async def bench_no_pairs(state: Path) -> float:
    """First frame of the dashboard when the read finds no pairs: its own start-up cost."""
    real, draw = Controller.status, LineTable.render_line
    drawn: list[int] = []

    def counted(self: LineTable, y: int) -> Strip:
        drawn.append(y)
        return draw(self, y)

    Controller.status = lambda self, ids=None, *, limit=None: []  # type: ignore[method-assign]
    LineTable.render_line = counted  # type: ignore[method-assign]
    try:
        start = time.perf_counter()
        app = MeshApp(state, clock=lambda: FIXED_NOW, keymap_paths=[], poll_seconds=0)
        async with app.run_test(size=SIZE):
            await _until(lambda: app.loaded_once and bool(drawn))  # read, and a frame drawn
            return time.perf_counter() - start
    finally:
        Controller.status, LineTable.render_line = real, draw  # type: ignore[method-assign]


class PaintedStatic(Static):
    """A Static that counts the lines it draws."""

    paints = 0

    def render_line(self, y: int) -> Strip:
        self.paints += 1
        return super().render_line(y)


class TrivialApp(App[None]):
    """Textual's floor: one widget, no data."""

    def compose(self) -> ComposeResult:
        yield PaintedStatic("hello")


class BoxAlone(App[None]):
    """The floor of a keystroke: the same filter box alone, nothing behind it."""

    def compose(self) -> ComposeResult:
        yield FilterBox(placeholder="filter")


async def bench_box_keys() -> list[float]:
    """Key press to the frame that draws it, for a box with nothing to filter: Textual's own
    cost of a keystroke, including its frame pacing (a frame waits for the next 1/60 s tick)."""
    draw = FilterBox.render_line
    boxes: list[float] = []

    def timed_box(self: FilterBox, y: int) -> Strip:
        boxes.append(time.perf_counter())
        return draw(self, y)

    FilterBox.render_line = timed_box  # type: ignore[method-assign]
    try:
        app = BoxAlone()
        async with app.run_test(size=SIZE) as pilot:
            app.query_one(FilterBox).focus()
            await pilot.pause()
            times = []
            for key in KEYS:
                before = len(boxes)
                t0 = time.perf_counter()
                send_key(app, key)
                await _until(lambda b=before: len(boxes) > b)
                times.append(time.perf_counter() - t0)
                await pilot.pause()
            return times
    finally:
        FilterBox.render_line = draw  # type: ignore[method-assign]


async def bench_trivial() -> float:
    """Time to the first frame of :class:`TrivialApp` at the same size."""
    start = time.perf_counter()
    app = TrivialApp()
    async with app.run_test(size=SIZE):
        widget = app.query_one(PaintedStatic)
        await _until(lambda: widget.paints > 0)
        return time.perf_counter() - start


# ---- baseline: the stock DataTable with every row mounted -------------------------------
class CountingTable(DataTable[Any]):
    """DataTable that counts drawn lines, so the benchmark sees its first frame."""

    paints = 0

    def render_line(self, y: int) -> Strip:
        self.paints += 1
        return super().render_line(y)


class BaselineApp(App[None]):
    """The straightforward dashboard: every pair added to a DataTable; filtering re-adds rows."""

    def __init__(self, state: Path) -> None:
        super().__init__()
        self.state = state
        self.rows: list[tuple[str, tuple[str, ...], str]] = []

    def compose(self) -> ComposeResult:
        yield Input(id="filter")
        yield CountingTable(cursor_type="row", id="table")

    def on_mount(self) -> None:
        with Controller.open(self.state, read_only=True) as ctl:
            statuses = ctl.status()
        self.rows = [(r.key, r.cells, r.hay) for r in (make_row(s, FIXED_NOW) for s in statuses)]
        table = self.query_one(CountingTable)
        for column in COLUMNS:
            table.add_column(column.label, key=column.key)
        self.fill(self.rows)

    def fill(self, rows: Iterable[tuple[str, tuple[str, ...], str]]) -> None:
        table = self.query_one(CountingTable)
        for key, cells, _ in rows:
            table.add_row(*(Text(c) for c in cells), key=key)

    def on_input_changed(self, event: Input.Changed) -> None:
        words = Query.parse(event.value).words
        table = self.query_one(CountingTable)
        table.clear()
        self.fill(r for r in self.rows if all(w in r[2] for w in words))


async def bench_baseline(state: Path) -> dict[str, Any]:
    """The same measurements on the baseline."""
    start = time.perf_counter()
    app = BaselineApp(state)
    out: dict[str, Any] = {}
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(CountingTable)
        await _until(lambda: table.paints > 0)
        out["first_paint"] = time.perf_counter() - start
        app.query_one(Input).focus()
        await pilot.pause()
        times = []
        for key in TYPED[:4]:
            before = table.paints
            t0 = time.perf_counter()
            send_key(app, key)
            await _until(lambda b=before: table.paints > b)
            times.append(time.perf_counter() - t0)
            await pilot.pause()
        out["keys"] = times
    return out


def fresh(start: Coroutine[Any, Any, T]) -> T:
    """One start of an app as a fresh process would make it: the previous start's garbage
    collected first (a dashboard unfreezes its heap when it exits, and a collection of that
    heap landing inside the next start's first paint is this script's cost, not the app's)."""
    gc.collect()
    return asyncio.run(start)


def pooled(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Several dashboard starts as one result: the median start's first paint, whole read and
    complete frame, every start's keystrokes pooled (a single start is one sample of a noisy
    machine: its first paint swung 104–238 ms in three starts in a row at load 2.9)."""
    out = dict(runs[-1])
    out["first_paints"] = [r["first_paint"] for r in runs]
    for key in ("first_paint", "complete", "load"):
        out[key] = statistics.median(r[key] for r in runs)
    for key in ("keys", "view", "redrawn"):
        out[key] = [x for r in runs for x in r[key]]
    assert len({(r["rows"], r["first_rows"], r["shown"]) for r in runs}) == 1
    return out


def bench_controller(state: Path) -> dict[str, float]:
    """The controller reads the dashboard needs, on their own."""
    out: dict[str, float] = {}
    with Controller.open(state, read_only=True) as ctl:
        runs = []
        for _ in range(3):
            t0 = time.perf_counter()
            rows: list[PairStatus] = ctl.status()
            runs.append(time.perf_counter() - t0)
        out["status"] = statistics.median(runs)
        t0 = time.perf_counter()
        ctl.summary(rows)
        out["summary"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        ctl.pair_detail(rows[len(rows) // 2].pair)
        out["pair_detail"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        ctl.hosts()
        out["hosts"] = time.perf_counter() - t0
    return out


def _fmt(seconds: float) -> str:
    return f"{seconds * 1000:8.1f} ms"


def main(argv: list[str] | None = None) -> int:
    """Build or open the state, measure, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--state", type=Path, help="an existing state folder to measure")
    parser.add_argument(
        "--pairs", type=int, default=10000, help="pairs to build (multiple of 1000)"
    )
    parser.add_argument(
        "--skip-baseline", action="store_true", help="leave out the stock DataTable baseline"
    )
    parser.add_argument(
        "--starts", type=int, default=5, help="dashboard starts measured (the median is shown)"
    )
    args = parser.parse_args(argv)
    tmp: Path | None = None
    state = args.state
    if state is None:
        tmp = Path(tempfile.mkdtemp(prefix="meshtui-bench-"))
        t0 = time.perf_counter()
        providers = 20
        consumers = args.pairs // providers
        build(
            tmp,
            providers=providers,
            consumers_per_node=10,
            consumer_nodes=max(1, consumers // 10),
            requires_each=providers,
        )
        state = tmp / "st"
        print(f"built {args.pairs} pairs in {time.perf_counter() - t0:.1f} s ({state})")
    try:
        ctl = bench_controller(state)
        mine = pooled([fresh(bench_meshtui(state)) for _ in range(max(1, args.starts))])
        no_pairs = statistics.median(fresh(bench_no_pairs(state)) for _ in range(3))
        trivial = statistics.median(asyncio.run(bench_trivial()) for _ in range(3))
        box_keys = asyncio.run(bench_box_keys())
        base = None if args.skip_baseline else asyncio.run(bench_baseline(state))
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    starts = mine["first_paints"]
    key_med, key_max = statistics.median(mine["keys"]), max(mine["keys"])
    nan = float("nan")
    base_paint = base["first_paint"] if base else nan
    base_med = statistics.median(base["keys"]) if base else nan
    base_max = max(base["keys"]) if base else nan
    paint_goal, key_goal = (0.12, 0.008) if mine["rows"] <= 10000 else (0.25, 0.015)
    print(f"\n{mine['rows']} pairs, headless {SIZE[0]}x{SIZE[1]}, textual DataTable as baseline")
    print(f"load average {', '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
    print(f"{'measure':<42}{'meshtui':>12}{'baseline':>12}{'ratio':>8}{'goal':>10}")
    print("-" * 84)
    rows = [
        ("first paint (incl. status read), median", mine["first_paint"], base_paint, paint_goal),
        ("filter keystroke, median (press → frame)", key_med, base_med, key_goal),
        ("filter keystroke, worst", key_max, base_max, nan),
    ]
    for name, a, b, goal in rows:
        ok = "" if goal != goal else "ok" if a <= goal else "MISSED"
        print(f"{name:<42}{_fmt(a):>12}{_fmt(b):>12}{b / a:>7.1f}x{_fmt(goal):>10} {ok}")
    print("-" * 84)
    view_med, view_max = statistics.median(mine["view"]), max(mine["view"])
    print(
        f"{'  of which view compute (median / worst)':<42}{_fmt(view_med):>12}{_fmt(view_max):>12}"
    )
    print(f"{'  table lines redrawn per key (median)':<42}{statistics.median(mine['redrawn']):>12}")
    print(f"{'  rows in the first frame':<42}{mine['first_rows']:>12}")
    print(
        f"{'  first paint of each start (min / max)':<42}{_fmt(min(starts)):>12}"
        f"{_fmt(max(starts)):>12}   ({len(starts)} starts, in order: "
        + " ".join(f"{t * 1000:.0f}" for t in starts)
        + " ms)"
    )
    print(f"{'all pairs shown (whole read, summary)':<42}{_fmt(mine['complete']):>12}")
    print(f"{'  of which the whole read in its worker':<42}{_fmt(mine['load']):>12}")
    print(f"{'floor: dashboard first frame, no pairs':<42}{_fmt(no_pairs):>12}")
    print(f"{'floor: Textual trivial app first frame':<42}{_fmt(trivial):>12}")
    box_med, box_max = statistics.median(box_keys), max(box_keys)
    print(
        f"{'floor: keystroke, box alone (med / worst)':<42}{_fmt(box_med):>12}{_fmt(box_max):>12}"
    )
    print(f"{'lines redrawn by a no-change reload':<42}{mine['idle_reload_paints']:>12}")
    print("\ncontroller reads alone (median of 3 for status):")
    for name, seconds in ctl.items():
        print(f"  {name:<20}{_fmt(seconds)}")
    print(f"\nkeys typed: {' '.join(KEYS)}  → {mine['shown']} rows shown")
    print(
        "per key, first start (ms): "
        + " ".join(f"{k * 1000:.1f}" for k in mine["keys"][: len(KEYS)])
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
