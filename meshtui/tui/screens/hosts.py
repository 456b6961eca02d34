"""The hosts screen: every node, whether its agent answered, its key fingerprint, how many pair
ends it should hold and which pairs it is behind on.

Reachability is only known after ``k`` asks every agent (a read: nothing is written), so by
default the column says "not asked" rather than guessing. ``d`` runs ``meshtui doctor`` in a
worker and shows its lines, one per problem, under the table. A read-only dashboard shows the nodes
as the inventory declares them and never asks: its controller has no key to ask with.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.widgets import Label, Static

from meshtui.controller.reports import HostView
from meshtui.tui import actions
from meshtui.tui.events import HostsLoaded
from meshtui.tui.outside import Outside
from meshtui.tui.pairs import Changes
from meshtui.tui.screens.base import MeshScreen
from meshtui.tui.widgets.footer import MeshFooter
from meshtui.tui.widgets.line_table import Column, LineTable, TableRow

if TYPE_CHECKING:  # the doctor (and httpx) load only when it runs
    from meshtui.controller.read.doctor import DoctorReport

COLUMNS = (
    Column("name", "node", max_width=20),
    Column("reachable", "reachable", max_width=12),
    Column("address", "address", max_width=16),
    Column("fingerprint", "key", max_width=24),
    Column("holds", "holds", align="right", max_width=6),
    Column("behind", "behind", align="right", max_width=6),
    Column("agent", "agent", max_width=40),
    Column("reason", "answer", max_width=50),
)


def host_row(h: HostView, *, checks_off: bool = False) -> TableRow:
    """A node as a table row, toned by reachability and whether it is behind (``checks_off``:
    a read-only dashboard, which never asks, says so instead of "not asked")."""
    reach = {True: "yes", False: "NO", None: "off" if checks_off else "not asked"}[h.reachable]
    tone = (
        "bad" if h.reachable is False else "warn" if h.behind else "good" if h.reachable else "info"
    )
    name = h.name if h.declared else f"{h.name} (undeclared)"
    return TableRow(
        h.name,
        (
            name,
            reach,
            h.address,
            h.fingerprint,
            str(h.holds),
            str(len(h.behind)),
            h.agent,
            "checks are off (read-only)" if checks_off and h.reachable is None else h.reason,
        ),
        tone,
    )


class DoctorDone(Outside):
    """``meshtui doctor`` finished (in a worker)."""

    def __init__(self, report: DoctorReport) -> None:
        super().__init__()
        self.report = report


def doctor_text(report: DoctorReport) -> Text:
    """Doctor's lines as the CLI prints them: one per problem, with what to do."""
    text = Text()
    answered = sum(1 for n in report.nodes if n.answered)
    head = (
        f"doctor: {len(report.problems)} problems; {answered} of {len(report.nodes)} nodes "
        f"answered ({report.elapsed_ms / 1000:.2f} s)"
    )
    text.append(head, "bold red" if report.problems else "bold green")
    for p in report.problems:
        text.append(f"\n{p.node} {p.check} {p.subject}: ", "bold")
        text.append(p.problem)
        text.append(f" -> {p.fix}", "dim")
    return text


class HostsScreen(MeshScreen):
    """Every node."""

    SCOPE = "hosts"
    BINDINGS: ClassVar[list[BindingType]] = actions.bindings("hosts")
    AUTO_FOCUS = "#hosts"

    def __init__(self) -> None:
        super().__init__()
        self.hosts: dict[str, HostView] = {}
        self.checked = False

    def compose(self) -> ComposeResult:
        yield Label(Text("Hosts", style="bold"), id="hosts-title")
        yield Static(
            Text(
                "read-only: agent checks are off; these are the nodes as declared in the "
                "inventory, and none of them is contacted",
                style="bold",
            ),
            id="hosts-note",
        )
        yield LineTable(COLUMNS, empty_text="reading the nodes…", id="hosts")
        yield Static(id="host-detail")
        yield Static(id="host-doctor")
        yield MeshFooter()

    @property
    def table(self) -> LineTable:
        """The nodes table."""
        return self.query_one("#hosts", LineTable)

    def on_mount(self) -> None:
        self.query_one("#hosts-note", Static).display = self.mesh.read_only
        self.load(check=False)

    def load(self, *, check: bool) -> None:
        """Read the nodes (``check``: ask every agent too) in a thread."""
        self.read_in_background(
            lambda ctl: HostsLoaded(ctl.hosts(check=check), check),
            name="hosts",
            context="hosts",
            reader=not check,  # a check asks the agents
        )

    def pairs_changed(self, changes: Changes, first: bool) -> None:
        if changes.any:
            self.load(check=False)

    @on(HostsLoaded)
    def _loaded(self, message: HostsLoaded) -> None:
        message.stop()
        fresh = {h.name: h for h in message.hosts}
        if not message.checked and self.checked:
            # keep what the agents said last time; only holdings are re-read
            fresh = {
                n: replace(h, reachable=self.hosts[n].reachable, reason=self.hosts[n].reason)
                if n in self.hosts
                else h
                for n, h in fresh.items()
            }
        self.checked = self.checked or message.checked
        self.hosts = fresh
        rows = {n: host_row(h, checks_off=self.mesh.read_only) for n, h in fresh.items()}
        table = self.table
        table.set_rows(rows)
        table.set_view(list(rows))
        self._show_detail()
        if message.checked:
            down = [h.name for h in message.hosts if h.reachable is False]
            self.notify(
                f"{len(down)} of {len(message.hosts)} nodes did not answer: {', '.join(down)}"
                if down
                else f"all {len(message.hosts)} nodes answered",
                severity="warning" if down else "information",
                markup=False,
            )

    @on(LineTable.Highlighted, "#hosts")
    def _highlighted(self, event: LineTable.Highlighted) -> None:
        self._show_detail()

    def _show_detail(self) -> None:
        key = self.table.current_key
        host = self.hosts.get(key) if key else None
        if host is None:
            self.query_one("#host-detail", Static).update("")
            return
        text = Text()
        text.append(f"{host.name}", "bold")
        text.append(f" holds {host.holds} pair ends; ")
        if host.behind:
            text.append(f"behind on {len(host.behind)}: ", "bold")
            text.append(", ".join(host.behind[:6]) + (" …" if len(host.behind) > 6 else ""))
        else:
            text.append("behind on none")
        self.query_one("#host-detail", Static).update(text)

    def action_check(self) -> None:
        """Ask every agent whether it answers (reads only)."""
        self.notify("asking every agent…", timeout=3)
        self.load(check=True)

    def action_doctor(self) -> None:
        """Run ``meshtui doctor`` in a worker; its lines appear under the table."""
        self.notify("doctor: checking every node…", timeout=3)
        self.query_one("#host-doctor", Static).update(Text("doctor: checking every node…"))
        self.read_in_background(
            lambda ctl: DoctorDone(ctl.doctor()), name="doctor", context="doctor", reader=False
        )

    @on(DoctorDone)
    def _doctor_done(self, message: DoctorDone) -> None:
        message.stop()
        self.query_one("#host-doctor", Static).update(doctor_text(message.report))

    def action_open(self) -> None:
        """Show the node's pairs on the main screen."""
        key = self.table.current_key
        if key is None:
            return
        self.mesh.action_pairs()
        main = self.app.screen
        set_filter = getattr(main, "set_filter", None)
        if set_filter is not None:
            set_filter(f"node:{key}")

    @on(LineTable.Activated, "#hosts")
    def _activated(self, event: LineTable.Activated) -> None:
        self.action_open()

    def action_copy_fingerprint(self) -> None:
        """Copy the node's key fingerprint."""
        key = self.table.current_key
        if key is not None and key in self.hosts:
            self.mesh.copy_value("key fingerprint", self.hosts[key].fingerprint)

    def action_refresh(self) -> None:
        """Read the nodes again (without asking agents)."""
        self.load(check=False)
