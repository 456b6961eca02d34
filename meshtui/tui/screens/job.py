"""An action's progress and outcome: the controller's progress as a bar and a log, then the
result (each rotated pair with its window, each drill as a checklist, each probe's verdict).

The app keeps a :class:`JobRecord` of the last job and tells the screen when it changes, so the
screen can be closed while the job runs (the summary bar keeps the progress) and shown again
with ``o``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Label, Log, ProgressBar, Static

from meshtui.controller.reports import (
    JobResult,
    PushReport,
    RotationReport,
    SecretDrillReport,
    SecretsRotated,
    is_drills,
    is_probes,
)
from meshtui.model import Verdict
from meshtui.terminal import shown
from meshtui.tui import actions
from meshtui.tui.events import Job
from meshtui.tui.screens.base import MeshScreen
from meshtui.tui.widgets.drill_checklist import DrillChecklist
from meshtui.tui.widgets.footer import MeshFooter
from meshtui.tui.widgets.line_table import Column, LineTable, TableRow


def clock() -> float:
    """Seconds for the job log (its own name, so tests can freeze it alone)."""
    return time.monotonic()


@dataclass
class JobRecord:
    """Everything the job screen shows, kept by the app while the screen comes and goes."""

    job: Job
    started: float = field(default_factory=lambda: clock())
    lines: list[str] = field(default_factory=list)
    step: str = "starting"
    done: int = 0
    total: int = 0
    finished: bool = False
    result: JobResult | None = None
    error: BaseException | None = None
    seconds: float | None = None

    def progress(self, text: str, done: int, total: int) -> str:
        """Record one progress call; returns its log line."""
        self.step, self.done, self.total = text, done, total
        line = f"{clock() - self.started:6.2f}s  {text}"
        self.lines.append(line)
        return line


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} ms"


def outcome_rows(result: JobResult) -> tuple[tuple[Column, ...], list[TableRow]]:
    """The outcome table's columns and rows for a rotation, probe or push result."""
    cols: tuple[Column, ...]
    if isinstance(result, RotationReport):
        cols = (
            Column("pair", "pair", max_width=60),
            Column("ok", "ok", max_width=4),
            Column("gen", "generation", max_width=12),
            Column("window", "window", align="right", max_width=10),
            Column("reason", "reason", max_width=60),
        )
        rows = [
            TableRow(
                p.pair,
                (
                    p.pair,
                    "✓" if p.ok else "✗",
                    f"{p.previous if p.previous is not None else '-'} → {p.generation}",
                    _ms(p.window_ms),
                    p.reason,
                ),
                "good" if p.ok else "bad",
            )
            for p in result.pairs
        ]
        return cols, rows
    if isinstance(result, PushReport):
        cols = (
            Column("pair", "pair", max_width=60),
            Column("what", "what", max_width=10),
            Column("gen", "gen", align="right", max_width=5),
            Column("reason", "reason", max_width=60),
        )
        rows = [  # ends ahead of the inventory (after a restore), first: the news
            TableRow(f"a:{pid}", (pid, "ahead", "", what), "warn")
            for pid, what in sorted(result.ahead.items())
        ]
        rows += [  # a node's word on ends not its own: not believed, named
            TableRow(f"c:{node}", (node, "claim", "", what), "alarm")
            for node, what in sorted(result.claims.items())
        ]
        rows += [
            TableRow(f"d:{p.pair}", (p.pair, "delivered", str(p.generation), p.reason), "good")
            for p in result.delivered
        ]
        rows += [
            TableRow(f"w:{p.pair}", (p.pair, "withdrawn", str(p.generation), p.reason), "muted")
            for p in result.withdrawn
        ]
        rows += [
            TableRow(f"b:{pid}", (pid, "behind", "", why), "warn")
            for pid, why in sorted(result.behind.items())
        ]
        return cols, rows
    if isinstance(result, SecretDrillReport):
        cols = (
            Column("check", "check", max_width=60),
            Column("state", "state", max_width=8),
            Column("seen", "seen", max_width=60),
        )
        rows = [
            TableRow(
                c.name, (c.name, "ok" if c.ok else "FAILED", c.seen), "good" if c.ok else "bad"
            )
            for c in result.checks
        ]
        return cols, rows
    if isinstance(result, SecretsRotated):
        cols = (
            Column("secret", "secret", max_width=60),
            Column("state", "state", max_width=8),
            Column("version", "version", align="right", max_width=8),
            Column("reason", "reason", max_width=60),
        )
        rows = [
            TableRow(
                f"{s.module} {s.name}",
                (f"{s.module} {s.name}", s.state, str(s.version), s.reason),
                "good" if s.state == "working" else "warn",
            )
            for s in result.secrets
        ]
        return cols, rows
    cols = (
        Column("pair", "pair", max_width=60),
        Column("verdict", "verdict", max_width=20),
        Column("latency", "latency", align="right", max_width=10),
        Column("reason", "reason", max_width=60),
    )
    rows = []
    for o in result if is_probes(result) else []:
        verdict = o.verdict + (" (loopback)" if o.loopback else "")
        tone = "good" if o.verdict == Verdict.ACCEPTED else "warn"
        rows.append(TableRow(o.pair, (o.pair, verdict, _ms(o.latency_ms), o.reason), tone))
    return cols, rows


class JobScreen(MeshScreen):
    """Progress, then outcome, of one job."""

    SCOPE = "job"
    BINDINGS: ClassVar[list[BindingType]] = actions.bindings("job")

    def __init__(self, record: JobRecord) -> None:
        super().__init__()
        self.record = record
        self._written = 0
        """How many of the record's lines the log shows."""

    def compose(self) -> ComposeResult:
        with Vertical(id="job"):
            yield Label(Text(self.record.job.title, style="bold"), id="job-title")
            yield ProgressBar(total=None, show_eta=False, id="job-bar")
            yield Label(Text(""), id="job-step")
            yield Log(id="job-log", max_lines=2000)
            yield VerticalScroll(id="job-outcome")
        yield MeshFooter()

    def on_mount(self) -> None:
        self._write_new_lines()
        self._show_progress()
        if self.record.finished:
            self._show_outcome()

    def progressed(self) -> None:
        """The job reported progress, one line or many (called by the app)."""
        if self.is_mounted:
            self._write_new_lines()
            self._show_progress()

    def _write_new_lines(self) -> None:
        lines = self.record.lines
        if len(lines) > self._written:
            self.query_one(Log).write_lines(lines[self._written :])
            self._written = len(lines)

    def finished(self) -> None:
        """The job ended (called by the app)."""
        if self.is_mounted:
            self._show_progress()
            self._show_outcome()

    def _show_progress(self) -> None:
        r = self.record
        bar = self.query_one(ProgressBar)
        if r.finished:
            bar.update(total=max(1, r.total), progress=max(1, r.total))
        elif r.total:
            bar.update(total=r.total, progress=r.done)
        step = r.step if not r.finished else self._end_line()
        of = f" ({r.done}/{r.total})" if r.total and not r.finished else ""
        self.query_one("#job-step", Label).update(Text(step + of))

    def _end_line(self) -> str:
        r = self.record
        took = f" in {r.seconds:.1f} s" if r.seconds is not None else ""
        if r.error is not None:
            return f"FAILED: {r.error}"
        if isinstance(r.result, RotationReport):
            return f"rotation {r.result.rotation or ''} {r.result.outcome}{took}".replace("  ", " ")
        return f"finished{took} (escape closes)"

    def _show_outcome(self) -> None:
        area = self.query_one("#job-outcome", VerticalScroll)
        area.remove_children()
        r = self.record
        if r.error is not None:
            said = shown(f"{type(r.error).__name__}: {r.error}")
            area.mount(Static(Text(said, style="bold red")))
            return
        result = r.result
        if result is None:
            return
        if result and is_drills(result):
            area.mount_all(DrillChecklist(report) for report in result)
            return
        if isinstance(result, RotationReport) and result.reason:
            area.mount(Static(Text(result.reason)))
        columns, rows = outcome_rows(result)
        table = LineTable(columns, empty_text="no pairs", id="job-table")
        area.mount(table)
        table.set_rows({row.key: row for row in rows})
        table.set_view([row.key for row in rows])
