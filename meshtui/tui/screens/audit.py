"""The audit screen: the hash-chained event log, whether the chain verifies, filters by pair,
node, operator and kind, and export to JSON or CSV.

Nothing here writes to the inventory, so the whole screen works read-only (``meshtui audit``).
An export is a new 0600 file in the current directory (or the state folder when the current
directory cannot be written); the toast says which.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Horizontal
from textual.widgets import Input, Static

from meshtui.controller.core import Controller
from meshtui.controller.reports import AuditEvent, ChainReport
from meshtui.model import split_pair_id
from meshtui.tui import actions
from meshtui.tui.events import AuditLoaded, Exported
from meshtui.tui.pairs import Changes
from meshtui.tui.screens.base import MeshScreen, run_in_background
from meshtui.tui.widgets.footer import MeshFooter
from meshtui.tui.widgets.line_table import Column, LineTable, TableRow

COLUMNS = (
    Column("seq", "#", align="right", max_width=6),
    Column("at", "at (UTC)", max_width=19),
    Column("operator", "operator", max_width=12),
    Column("kind", "kind", max_width=10),
    Column("outcome", "outcome", max_width=14),
    Column("pairs", "pairs", max_width=60),
    Column("detail", "detail", max_width=80),
)
FILTERS = ("pair", "node", "operator", "kind")


def event_nodes(event: AuditEvent) -> set[str]:
    """Every node an event touches: both ends of its pairs, and nodes named in its detail."""
    nodes: set[str] = set()
    for pid in event.pairs:
        try:
            _, consumer, provider = split_pair_id(pid)
        except ValueError:
            continue
        nodes.update((consumer.split("/", 1)[0], provider.split("/", 1)[0]))
    for key in ("nodes", "node", "refused"):
        value = event.detail.get(key)
        if isinstance(value, str):
            nodes.add(value)
        elif isinstance(value, list | dict):
            nodes.update(str(v) for v in value)
    return nodes


def event_row(event: AuditEvent) -> TableRow:
    """One event as a row (toned by outcome)."""
    pairs = event.pairs
    shown = pairs[0] + (f" +{len(pairs) - 1}" if len(pairs) > 1 else "") if pairs else "-"
    detail = json.dumps(event.detail, sort_keys=True, separators=(",", ":"))
    tone = "good" if event.outcome in ("ok", "done") else "warn"
    return TableRow(
        str(event.seq),
        (
            str(event.seq),
            event.at[:19],
            event.operator,
            event.kind,
            event.outcome,
            shown,
            detail,
        ),
        tone,
    )


FILTERED: dict[str, Callable[[AuditEvent], str]] = {
    "operator": lambda e: e.operator,
    "kind": lambda e: e.kind,
}
"""The filters that match one field of an event (pair and node look wider)."""


def matches(event: AuditEvent, terms: dict[str, str]) -> bool:
    """True when the event passes every non-empty filter (case-insensitive substrings)."""
    for name, value in terms.items():
        if not value:
            continue
        if name == "pair":
            if not any(value in p.lower() for p in event.pairs):
                return False
        elif name == "node":
            if not any(value in n.lower() for n in event_nodes(event)):
                return False
        elif value not in FILTERED[name](event).lower():
            return False
    return True


def chain_text(check: ChainReport) -> Text:
    """The chain's verdict in one line."""
    if check.ok:
        return Text(
            f"✓ audit chain verified: {check.events} events, none edited or deleted",
            style="bold green",
        )
    return Text(
        f"✗ audit chain BROKEN at event {check.bad_seq}: {check.problem}", style="bold red reverse"
    )


def export_path(folders: list[Path], fmt: str, stamp: datetime) -> Path | None:
    """A new file name in the first writable folder of ``folders``."""
    name = f"meshtui-audit-{stamp:%Y%m%d-%H%M%S}"
    for folder in folders:
        for n in range(100):
            candidate = folder / (f"{name}.{fmt}" if n == 0 else f"{name}-{n}.{fmt}")
            if not candidate.exists():
                return candidate
    return None


class AuditScreen(MeshScreen):
    """The audit log."""

    SCOPE = "audit"
    BINDINGS: ClassVar[list[BindingType]] = actions.bindings("audit")
    AUTO_FOCUS = "#events"

    def __init__(self) -> None:
        super().__init__()
        self.events: list[AuditEvent] = []
        self.check: ChainReport | None = None
        self.terms: dict[str, str] = {name: "" for name in FILTERS}
        self.export_folders: list[Path] | None = None

    def compose(self) -> ComposeResult:
        yield Static(Text("reading the audit log…"), id="chain")
        with Horizontal(id="audit-filters"):
            for name in FILTERS:
                yield Input(placeholder=name, id=f"f-{name}", classes="audit-filter")
        yield LineTable(COLUMNS, empty_text="no events", id="events")
        yield Static(id="event-detail")
        yield MeshFooter()

    @property
    def table(self) -> LineTable:
        """The events table."""
        return self.query_one("#events", LineTable)

    def on_mount(self) -> None:
        self.load()

    def load(self) -> None:
        """Read every event and verify the chain, in a thread."""
        self.read_in_background(
            lambda ctl: AuditLoaded(ctl.events(), ctl.verify_chain()), name="audit", context="audit"
        )

    def pairs_changed(self, changes: Changes, first: bool) -> None:
        if changes.any and not first:
            self.load()

    @on(AuditLoaded)
    def _loaded(self, message: AuditLoaded) -> None:
        message.stop()
        self.events, self.check = message.events, message.check
        self.query_one("#chain", Static).update(chain_text(message.check))
        self.table.set_rows({str(e.seq): event_row(e) for e in self.events})
        self.apply_filters()

    def shown(self) -> list[AuditEvent]:
        """The events the filters keep, newest first."""
        terms = {k: v.strip().lower() for k, v in self.terms.items()}
        return [e for e in reversed(self.events) if matches(e, terms)]

    def apply_filters(self) -> None:
        """Show the events that pass every filter."""
        self.table.set_view([str(e.seq) for e in self.shown()])
        self._show_detail()

    @on(Input.Changed, ".audit-filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        name = (event.input.id or "f-").removeprefix("f-")
        self.terms[name] = event.value
        self.apply_filters()

    @on(Input.Submitted, ".audit-filter")
    def _filter_done(self, event: Input.Submitted) -> None:
        self.table.focus()

    def set_filter(self, name: str, value: str) -> None:
        """Set one filter box (tests and the palette use this)."""
        self.query_one(f"#f-{name}", Input).value = value

    def action_filter(self) -> None:
        """Type in the pair filter (tab moves to node, operator, kind)."""
        self.query_one("#f-pair", Input).focus()

    @on(LineTable.Highlighted, "#events")
    def _highlighted(self, event: LineTable.Highlighted) -> None:
        self._show_detail()

    def _show_detail(self) -> None:
        key = self.table.current_key
        event = next((e for e in self.events if str(e.seq) == key), None) if key else None
        if event is None:
            self.query_one("#event-detail", Static).update("")
            return
        text = Text()
        text.append(f"event {event.seq} ", "bold")
        text.append(f"{event.kind} by {event.operator}")
        if event.ssh_client:
            text.append(f" from {event.ssh_client}")
        text.append(f" at {event.at}: {event.outcome}\n")
        text.append(f"pairs: {', '.join(event.pairs) or '-'}\n", "dim")
        text.append(json.dumps(event.detail, sort_keys=True), "dim")
        text.append(f"\nhash {event.hash[:16]}… prev {event.prev[:16]}…", "dim")
        self.query_one("#event-detail", Static).update(text)

    def action_open(self) -> None:
        """Enter: keep the detail of the event under the cursor in view."""
        self._show_detail()

    def action_verify(self) -> None:
        """Read and verify again."""
        self.load()

    def action_refresh(self) -> None:
        """Read the log again."""
        self.load()

    def action_export(self, fmt: str) -> None:
        """Write every event as ``fmt`` (json or csv) to a new file."""
        folders = self.export_folders or [Path.cwd()]
        if not self.export_folders and not self.mesh.read_only:
            folders.append(self.mesh.state_dir)  # read-only never writes into the state folder
        run_in_background(
            self,
            partial(self._export, fmt, folders),
            name=f"export {fmt}",
            context=f"export {fmt}",
            exclusive=False,
        )

    def _export(self, fmt: str, folders: list[Path]) -> Exported:
        body, count = self.mesh.read(lambda ctl: (ctl.export_events(fmt), len(ctl.events())))
        last: OSError | None = None
        for folder in folders:
            path = export_path([folder], fmt, datetime.now(UTC))
            if path is None:
                continue
            try:
                Controller.write_export(path, body)
            except OSError as exc:
                last = exc
                continue
            return Exported(str(path), fmt, count)
        raise OSError(f"no folder to write the export to ({last})")

    @on(Exported)
    def _exported(self, message: Exported) -> None:
        message.stop()
        self.notify(
            f"{message.count} events written to {message.path}",
            markup=False,
            title=f"exported {message.fmt.upper()}",
            timeout=10,
        )
