"""One pair: its state and why, who holds it, its generations, deliveries, probes (with a latency
sparkline), drills and rotations, and for a vault pair its module's own secrets (their state, the
versions the vault and the file hold, where). Never a secret: digests are shown shortened, as
fingerprints, and a secret's value is never read.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

from rich import box
from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Label, LoadingIndicator, Sparkline, Static

from meshtui.controller.read.schedule import PairDue
from meshtui.controller.reports import PairDetail, SecretStatus
from meshtui.kinds import registry
from meshtui.model import OVERLAP, PairStatus, PolicySource, RotationMode, State, format_duration
from meshtui.tui import actions
from meshtui.tui.events import DetailLoaded, Job, JobKind
from meshtui.tui.pairs import Changes, parse_time, short_age, short_time
from meshtui.tui.screens.base import MeshScreen
from meshtui.tui.widgets.drill_checklist import DrillChecklist
from meshtui.tui.widgets.footer import MeshFooter

STATE_STYLE = {
    State.WORKING: "green",
    State.STALE: "yellow",
    State.REVOKED: "dim",
    State.UNKNOWN: "cyan",
}


def _cell(value: Any) -> Text:
    """A table cell from any inventory value, literally."""
    if value is None:
        return Text("-", style="dim")
    if isinstance(value, float):
        return Text(f"{value:.1f}")
    return Text(str(value))


def _short_digest(digest: Any) -> str:
    text = str(digest or "-")
    return text if len(text) < 24 else text[:20] + "…"


def small_table(title: str, headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> Table:
    """A compact Rich table whose every cell is literal Text."""
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, expand=False)
    for h in headers:
        table.add_column(h, overflow="fold")
    for row in rows:
        table.add_row(*(_cell(v) for v in row))
    if not table.row_count:
        table.add_row(
            *(Text("none", style="dim") if i == 0 else Text("") for i in range(len(headers)))
        )
    return table


def policy_text(due: PairDue | None, now: Any) -> Text:
    """The pair's policy and where each value comes from (empty when nothing is declared)."""
    p = due.policy if due is not None else None
    if due is None or p is None or PolicySource.DEFAULT == p.rotate_source == p.probe_source:
        return Text()
    text = Text("\n")
    text.append("policy    ", "bold")
    text.append(p.describe())
    if due.due_at is not None and not due.withdrawn:
        late = now.timestamp() - due.due_at
        if due.is_overdue(now.timestamp()):
            text.append(f" · OVERDUE by {short_age(late)}", "bold")
        elif late >= 0:
            text.append(" · due now")
        else:
            text.append(f" · due in {short_age(-late)}")
    return text


def overview_text(st: PairStatus, now: Any, due: PairDue | None = None) -> Text:
    """State, reason, generations, times and the policy in a few lines."""
    text = Text()
    text.append(
        f"{'ALARM ' if st.alarm else ''}{st.state}", f"bold {STATE_STYLE.get(st.state, '')}"
    )
    text.append("  ")
    text.append(st.reason)
    text.append("\n")
    text.append(f"generation {st.generation} · consumer holds {st.consumer_generation or '-'}")
    text.append(f" · provider holds {st.provider_generation or '-'}")
    if st.withdrawn:
        text.append(" · WITHDRAWN", "bold")
    text.append("\n")
    for label, stamp in (
        ("created", st.created_at),
        ("rotated", st.rotated_at),
        ("probed", st.probed_at),
    ):
        when = parse_time(stamp)
        age = short_age((now - when).total_seconds()) + " ago" if when else "never"
        text.append(f"{label} {age}   ", "dim")
    text.append_text(policy_text(due, now))
    return text


def rotation_words(mode: RotationMode) -> str:
    """How the pair rotates, as its screen says it."""
    if mode.rotation == OVERLAP:
        return (
            f"overlap: the new added beside the old, the old removed once the consumer "
            f"logs in with the new (grace {format_duration(mode.grace)})"
        )
    return "swap: the new replaces the old at the provider, then at the consumer"


def holders_text(st: PairStatus, detail: PairDetail | None) -> Text:
    """Who holds the credential: the consumer's file and the provider's login."""
    text = Text()
    text.append("consumer  ", "bold")
    text.append(f"{st.consumer} on {st.consumer_node}, file {st.consumer_file}\n")
    text.append("provider  ", "bold")
    text.append(f"{st.provider} on {st.provider_node} ({registry.kind_of(st.kind).title})")
    text.append(f", login {st.login}")
    if detail is not None:
        text.append("\nrotation  ", "bold")
        text.append(rotation_words(detail.rotation))
        if detail.draining is not None:
            text.append("\nsessions  ", "bold")
            text.append(detail.draining.line())
        if detail.values:
            text.append("\nvalues    ", "bold")
            text.append(", ".join(f"{k}={v}" for k, v in sorted(detail.values.items())))
        if detail.reload:
            text.append("\nreload    ", "bold")
            text.append(" ".join(detail.reload))
    return text


def secrets_table(st: PairStatus, secrets: Sequence[SecretStatus]) -> Table:
    """A vault pair's module's own secrets: state, versions held, file and vault path; never a
    value (the screen has none to show)."""
    return small_table(
        f"own secrets of {st.consumer} (in {st.provider})",
        ("secret", "origin", "state", "want", "vault", "file", "file path", "vault path", "why"),
        (
            (
                s.name,
                s.origin,
                s.state,
                s.version or None,
                s.vault_version,
                s.file_version,
                s.file,
                s.path,
                s.reason,
            )
            for s in secrets
        ),
    )


class PairScreen(MeshScreen):
    """Everything about one pair."""

    SCOPE = "pair"
    BINDINGS: ClassVar[list[BindingType]] = actions.bindings("pair")

    def __init__(self, pair: str) -> None:
        super().__init__()
        self.pair = pair
        self.detail: PairDetail | None = None

    def compose(self) -> ComposeResult:
        yield Label(Text(self.pair, style="bold"), id="pair-title")
        with VerticalScroll(id="pair-body"):
            yield Static(id="pair-overview")
            yield Static(id="pair-holders")
            yield Static(id="pair-secrets")
            with Vertical(id="latency-box"):
                yield Label("probe latency (oldest → newest)", id="latency-label")
                yield Sparkline([], id="latency")
                yield Label("", id="latency-caption")
            yield LoadingIndicator(id="pair-loading")
            yield Label("drills (newest first)", id="drills-label")
            yield Vertical(id="pair-drills")
            yield Static(id="pair-generations")
            yield Static(id="pair-deliveries")
            yield Static(id="pair-probes")
            yield Static(id="pair-rotations")
        yield MeshFooter()

    @property
    def status(self) -> PairStatus | None:
        """The pair's latest status row."""
        row = self.mesh.model.rows.get(self.pair)
        return row.status if row else None

    def on_mount(self) -> None:
        self._show_status()
        self.load()

    def load(self) -> None:
        """Read the pair's detail in a thread."""
        self.read_in_background(
            lambda ctl: DetailLoaded(ctl.pair_detail(self.pair)),
            name="detail",
            context=f"reading {self.pair}",
        )

    def pairs_changed(self, changes: Changes, first: bool) -> None:
        if first or self.pair in changes.changed or self.pair in changes.removed:
            self._show_status()
            self.load()

    def _show_status(self) -> None:
        st = self.detail.status if self.detail else self.status
        if st is None:
            return
        row = self.mesh.model.rows.get(self.pair)
        self.query_one("#pair-overview", Static).update(
            overview_text(st, self.mesh.clock(), row.due if row else None)
        )
        self.query_one("#pair-holders", Static).update(holders_text(st, self.detail))

    @on(DetailLoaded)
    def _loaded(self, message: DetailLoaded) -> None:
        message.stop()
        d = self.detail = message.detail
        self.query_one("#pair-loading", LoadingIndicator).display = False
        self._show_status()
        secrets = self.query_one("#pair-secrets", Static)
        secrets.display = bool(d.secrets)
        if d.secrets:
            secrets.update(secrets_table(d.status, d.secrets))
        latencies = [p.latency_ms for p in reversed(d.probes) if p.latency_ms is not None]
        self.query_one(Sparkline).data = latencies or [0.0]
        caption = (
            f"{len(latencies)} probes · min {min(latencies):.1f} ms · max {max(latencies):.1f} ms"
            f" · last {latencies[-1]:.1f} ms"
            if latencies
            else "no probe with a latency yet"
        )
        self.query_one("#latency-caption", Label).update(Text(caption))
        self.query_one("#pair-generations", Static).update(
            small_table(
                "generations",
                ("gen", "digest", "created", "discarded"),
                (
                    (
                        g.generation,
                        _short_digest(g.digest),
                        short_time(g.created_at),
                        short_time(g.discarded_at) if g.discarded_at else None,
                    )
                    for g in d.generations
                ),
            )
        )
        self.query_one("#pair-deliveries", Static).update(
            small_table(
                "deliveries (what each end holds)",
                ("end", "gen", "since", "attempted", "error"),
                (
                    (
                        v.end,
                        v.generation,
                        short_time(v.since),
                        short_time(v.attempted_at),
                        v.error,
                    )
                    for v in d.deliveries
                ),
            )
        )
        self.query_one("#pair-probes", Static).update(
            small_table(
                "probes (newest first)",
                ("at", "gen", "verdict", "latency ms", "from", "reason"),
                (
                    (
                        short_time(p.at),
                        p.generation,
                        p.verdict + (" (loopback)" if p.loopback else ""),
                        p.latency_ms,
                        p.client_addr,
                        p.reason,
                    )
                    for p in d.probes[:15]
                ),
            )
        )
        drills = self.query_one("#pair-drills", Vertical)
        drills.remove_children()
        if d.drills:
            drills.mount_all(
                DrillChecklist(record.report, when=short_time(record.at)) for record in d.drills[:5]
            )
        else:
            drills.mount(Static(Text("no drill yet (d runs one)", style="dim")))
        self.query_one("#pair-rotations", Static).update(
            small_table(
                "rotations",
                ("id", "started", "state", "outcome", "reason"),
                (
                    (
                        r.id,
                        short_time(r.started_at),
                        r.state,
                        r.outcome,
                        r.reason,
                    )
                    for r in d.rotations[:10]
                ),
            )
        )

    # ---- actions ------------------------------------------------------------------------
    def _job(self, kind: JobKind) -> Job | None:
        if not self.mesh.live_ids([self.pair]):
            self.notify(
                "this pair is withdrawn: it cannot be rotated, drilled or probed",
                severity="warning",
            )
            return None
        return Job(kind, (self.pair,), f"pair {self.pair}")

    def action_rotate(self) -> None:
        """Rotate this pair (plan first)."""
        if job := self._job(JobKind.ROTATE):
            self.mesh.plan_job(job)

    def action_drill(self) -> None:
        """Drill this pair (plan first)."""
        if job := self._job(JobKind.DRILL):
            self.mesh.plan_job(job)

    def action_probe(self) -> None:
        """Probe this pair."""
        if job := self._job(JobKind.PROBE):
            self.mesh.start_job(job)

    def action_rotate_secrets(self) -> None:
        """Rotate this vault pair's module's minted own secrets (confirm first, Cancel focused)."""
        minted = [s for s in (self.detail.secrets if self.detail else []) if s.origin == "minted"]
        if not minted:
            self.notify("this pair's module has no minted secret to rotate", severity="warning")
            return
        job = self._job(JobKind.ROTATE_SECRETS)
        if job is None:
            return
        module = minted[0].module
        names = ", ".join(s.name for s in minted)
        self.mesh.confirm_job(
            Job(JobKind.ROTATE_SECRETS, job.ids, module),
            f"Mint a new version of {names} of {module}: stored in its vault, then written to "
            "its file (until both are done the file keeps the old value).",
        )

    def action_copy_login(self) -> None:
        """Copy the login."""
        st = self.status
        if st is not None:
            self.mesh.copy_value("login", st.login)

    def action_copy_pair(self) -> None:
        """Copy the pair id."""
        self.mesh.copy_value("pair id", self.pair)

    def action_refresh(self) -> None:
        """Read the pair again."""
        self.load()
