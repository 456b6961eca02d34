"""The main screen: every pair under the summary, filtered as you type, sorted, grouped, marked.

The table is a :class:`LineTable` over the app's :class:`PairModel`; a load redraws only the rows
that changed unless the view itself must change (rows came or went, or a filter, sort or group
is active and a row's values moved). Selections for actions are worked out here and handed to
the app as :class:`Job` objects, with a sentence saying which pairs and why.
"""

from __future__ import annotations

import time
from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Horizontal
from textual.widgets import Label

from meshtui.tui import actions
from meshtui.tui.events import Job, JobKind
from meshtui.tui.pairs import COLUMNS, GROUPINGS, SORT_KEYS, Changes, PairRow, Query
from meshtui.tui.screens.base import MeshScreen
from meshtui.tui.widgets.age_histogram import AgeHistogram
from meshtui.tui.widgets.filter_box import FilterBox
from meshtui.tui.widgets.footer import MeshFooter
from meshtui.tui.widgets.line_table import GroupHeader, LineTable
from meshtui.tui.widgets.summary import SummaryBar


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


class MainScreen(MeshScreen):
    """Every pair, and the keys that act on them."""

    SCOPE = "pairs"
    BINDINGS: ClassVar[list[BindingType]] = actions.bindings("pairs")
    AUTO_FOCUS = "#pairs"

    def __init__(self) -> None:
        super().__init__()
        self.query_text = ""
        self.parsed = Query()
        self.sort: str | None = None
        self.reverse = False
        self.group = "none"
        self.collapsed: set[str] = set()
        self.view_seconds = 0.0
        self._status_text = ""
        self._summary_state: tuple[object, ...] | None = None

    def compose(self) -> ComposeResult:
        with Horizontal(id="top"):
            yield SummaryBar(id="summary")
            yield AgeHistogram(id="ages")
        with Horizontal(id="filter-bar"):
            yield Label("/", id="filter-prompt")
            yield FilterBox(
                placeholder="filter: words, state:stale, node:app1, provider:db1/postgres",
                on_change=self._filter_changed,
                id="filter",
            )
            yield Label("", id="view-status")
        yield LineTable(COLUMNS, markable=True, empty_text="no pairs", id="pairs")
        yield MeshFooter()

    @property
    def table(self) -> LineTable:
        """The pairs table."""
        return self.query_one("#pairs", LineTable)

    def on_mount(self) -> None:
        summary = self.query_one(SummaryBar)
        summary.state_name = self.mesh.state_dir.name
        summary.read_only = self.mesh.read_only
        if self.mesh.loaded_once:
            self.pairs_changed(Changes(), True)
        else:
            self._update_summary()  # what the app learned before this screen was built

    # ---- data ---------------------------------------------------------------------------
    def pairs_changed(self, changes: Changes, first: bool) -> None:
        """A load arrived: recompute the view when it must change, else redraw changed rows."""
        model = self.mesh.model
        table = self.table
        if first or changes.keys_changed or (changes.changed and self._view_is_derived):
            table.set_rows(model.rows, model.widths)
            self.refresh_view()
        elif changes.changed:
            table.set_rows(model.rows, model.widths)
            table.refresh_keys(changes.changed)
        if first or changes.any:
            self.query_one(AgeHistogram).set_ages(
                r.age_s for r in model.rows.values() if not r.status.withdrawn
            )
        self._update_summary()

    @property
    def _view_is_derived(self) -> bool:
        return not self.parsed.empty or self.sort is not None or self.group != "none"

    def refresh_view(self) -> None:
        """Recompute what the table shows from the filter, sort and grouping."""
        start = time.perf_counter()
        entries = self.mesh.model.view(
            self.parsed,
            sort=self.sort,
            reverse=self.reverse,
            group=self.group,
            collapsed=frozenset(self.collapsed),
        )
        table = self.table
        table.sort_column, table.sort_reverse = self.sort, self.reverse
        table.set_view(entries)
        self.view_seconds = time.perf_counter() - start
        self._update_status()

    def _shown(self) -> int:
        if self.group == "none":
            return len(self.table.entries)
        return sum(len(e.keys) for e in self.table.entries if isinstance(e, GroupHeader))

    def _update_status(self) -> None:
        parts = []
        if self.sort:
            parts.append(f"sort {self.sort}{' ▼' if self.reverse else ''}")
        if self.group != "none":
            parts.append(f"by {self.group}")
        status = " · ".join(parts)
        label = self.query_one("#view-status", Label)
        if status != self._status_text:  # a Label update re-lays out the screen: only on change
            self._status_text = status
            label.update(status)
        self._update_summary()

    def _update_summary(self) -> None:
        summary = self.query_one(SummaryBar)
        job, progress = self.mesh.job, self.mesh.job_progress
        state = (
            self.mesh.summary,
            self.mesh.note,
            self._shown() if not self.parsed.empty else None,
            len(self.table.marked),
            (job.title, *progress) if job and progress else None,
            self.mesh.watch_line,
        )
        if state == self._summary_state:
            return  # nothing it shows changed: no redraw
        self._summary_state = state
        summary.summary, summary.note, summary.shown, summary.marked, summary.job = state[:5]
        summary.watch_text = self.mesh.watch_line
        summary.now = self.mesh.clock()
        summary.refresh()

    def job_changed(self) -> None:
        # the app reads the watch's heartbeat when it mounts, before this screen has composed
        # its summary bar: on_mount shows what it read then
        if self.is_mounted:
            self._update_summary()

    # ---- filter, sort, group ------------------------------------------------------------
    def _filter_changed(self, text: str) -> None:
        # called by the box itself, so the table and the box repaint in the same frame
        self.query_text = text
        self.parsed = Query.parse(text)
        self.refresh_view()

    @on(FilterBox.Submitted, "#filter")
    def _filter_done(self, event: FilterBox.Submitted) -> None:
        self.table.focus()

    def set_filter(self, text: str) -> None:
        """Replace the filter (the palette's "Filter node …" commands use this)."""
        self.query_one("#filter", FilterBox).value = text
        self.table.focus()

    def action_filter(self) -> None:
        """Type in the filter box."""
        self.query_one("#filter", FilterBox).focus()

    def action_clear(self) -> None:
        """Escape: leave the filter box, else clear the filter, else clear the marks."""
        box = self.query_one("#filter", FilterBox)
        if box.has_focus:
            self.table.focus()
        elif box.value:
            box.value = ""
        elif self.table.marked:
            self.table.marked.clear()
            self.table.refresh()
            self._update_summary()

    def set_sort(self, column: str | None) -> None:
        """Sort by ``column`` (again: reverse it)."""
        if column == self.sort and column is not None:
            self.reverse = not self.reverse
        else:
            self.sort, self.reverse = column, False
        self.refresh_view()

    def action_sort(self) -> None:
        """Sort by the next column (after the last: id order again)."""
        keys = (None, *SORT_KEYS)
        self.sort = keys[(keys.index(self.sort) + 1) % len(keys)]
        self.reverse = False
        self.refresh_view()

    def action_sort_reverse(self) -> None:
        """Flip the sort order."""
        self.reverse = not self.reverse
        self.refresh_view()

    @on(LineTable.HeaderClicked, "#pairs")
    def _header_clicked(self, event: LineTable.HeaderClicked) -> None:
        self.set_sort(event.column)

    def set_group(self, group: str) -> None:
        """Group by ``group`` (one of GROUPINGS)."""
        self.group = group if group in GROUPINGS else "none"
        self.collapsed.clear()
        self.refresh_view()

    def action_group(self) -> None:
        """Cycle: no groups, by provider, by consumer node."""
        self.set_group(GROUPINGS[(GROUPINGS.index(self.group) + 1) % len(GROUPINGS)])

    # ---- cursor and marks ---------------------------------------------------------------
    def current_row(self) -> PairRow | None:
        """The pair under the cursor (None on a group header or an empty table)."""
        key = self.table.current_key
        return self.mesh.model.rows.get(key) if key else None

    def _on_secret(self, action: str) -> bool:
        """True when the cursor is on a module's own secret's row, which this handles: the
        action runs when the registry lets it act on a secret of that origin, else it is
        refused with why (a supplied secret is the operator's to put, never rotated)."""
        row = self.current_row()
        if row is None or row.secret is None:
            return False
        s = row.secret
        if not actions.acts_on_secret(action, s.origin):
            how = (
                f"is supplied by an operator: put a new value with meshtui secret put "
                f"{s.module} {s.name}"
                if s.origin == "supplied" and action in ("rotate", "drill")
                else "is a module's own secret, not a pair: push and doctor look at its file"
            )
            self.notify(f"{s.label} {how}", severity="warning", markup=False)
        elif action == "open":
            if s.pair is None:
                self.notify(
                    f"{s.label}: its module has no live vault pair",
                    severity="warning",
                    markup=False,
                )
            else:
                from meshtui.tui.screens.pair import PairScreen

                self.app.push_screen(PairScreen(s.pair))
        elif action == "rotate":
            self.mesh.confirm_job(
                Job(JobKind.ROTATE_SECRETS, (s.label,), s.label),
                f"Mint a new version of {s.label}: its vault stores it, then its file on "
                f"{s.node} gets it and the module's reload runs.",
            )
        elif action == "drill":
            self.mesh.confirm_job(
                Job(JobKind.DRILL_SECRET, (s.label,), s.label),
                f"Rotate {s.label} and prove from {s.node} that the new version is in its "
                "file and the vault, and the old one in neither.",
            )
        return True

    def action_open(self) -> None:
        """Enter: open the pair, or fold/unfold the group under the cursor."""
        entry = self.table.current_entry
        if self._on_secret("open"):
            return
        if isinstance(entry, GroupHeader):
            self.collapsed.symmetric_difference_update({entry.name})
            self.refresh_view()
        elif entry is not None:
            from meshtui.tui.screens.pair import PairScreen

            self.app.push_screen(PairScreen(entry))

    @on(LineTable.Activated, "#pairs")
    def _activated(self, event: LineTable.Activated) -> None:
        self.action_open()

    def action_mark(self) -> None:
        """Space: mark or unmark the pair (or every pair of the group) and move down."""
        entry = self.table.current_entry
        if entry is None:
            return
        keys = list(entry.keys) if isinstance(entry, GroupHeader) else [entry]
        marked = self.table.marked
        if all(k in marked for k in keys):
            marked.difference_update(keys)
        else:
            marked.update(keys)
        self.table.refresh()
        self.table.cursor += 1
        self._update_summary()

    def action_mark_shown(self) -> None:
        """Mark every pair shown; when they all are already, unmark them."""
        shown = self._shown_keys()
        marked = self.table.marked
        if shown and all(k in marked for k in shown):
            marked.difference_update(shown)
        else:
            marked.update(shown)
        self.table.refresh()
        self._update_summary()

    def _shown_keys(self) -> list[str]:
        out: list[str] = []
        for e in self.table.entries:
            if isinstance(e, GroupHeader):
                if e.collapsed:
                    out.extend(e.keys)
            else:
                out.append(e)
        return out

    # ---- what an action acts on ---------------------------------------------------------
    def selection(self) -> tuple[list[str], str]:
        """Marked pairs, else the group under the cursor, else the pair under it; and why."""
        marked = sorted(self.table.marked)
        if marked:
            return marked, _plural(len(marked), "marked pair")
        entry = self.table.current_entry
        if isinstance(entry, GroupHeader):
            return list(entry.keys), f"every shown pair of {self.group} {entry.name}"
        if entry is None:
            return [], "nothing"
        return [entry], f"pair {entry}"

    def set_selection(self) -> tuple[list[str], str]:
        """``R``: marked, else the group under the cursor, else the filtered set, else the
        provider of the pair under the cursor."""
        ids, basis = self.selection()
        if ids and not basis.startswith("pair "):
            return ids, basis
        if not self.parsed.empty:
            shown = self._shown_keys()
            return shown, f"{_plural(len(shown), 'filtered pair')} ({self.query_text.strip()})"
        row = self.current_row()
        if row is None:
            return [], "nothing"
        return self._provider_pairs(row.status.provider)

    def _provider_pairs(self, provider: str) -> tuple[list[str], str]:
        ids = [k for k, r in self.mesh.model.rows.items() if r.status.provider == provider]
        return ids, f"every pair of provider {provider}"

    def _job(self, kind: JobKind, ids: list[str], basis: str) -> Job | None:
        live = self.mesh.live_ids(ids)
        own = len(self.mesh.model.secrets(ids))
        if not live:
            self.notify(
                "nothing to act on: withdrawn pairs cannot be rotated, drilled or probed"
                + (" (a module's own secret is acted on alone, under the cursor)" if own else ""),
                severity="warning",
            )
            return None
        left = len(ids) - len(live) - own
        if left:
            basis += f", {left} withdrawn left out"
        if own:
            basis += f", {own} own secrets left out"
        return Job(kind, tuple(live), f"{basis}")

    def action_rotate(self) -> None:
        """``r``: rotate the pair under the cursor (or the group), after the plan."""
        entry = self.table.current_entry
        if self._on_secret("rotate"):
            return
        if isinstance(entry, GroupHeader):
            ids, basis = list(entry.keys), f"every shown pair of {self.group} {entry.name}"
        elif entry is None:
            return
        else:
            ids, basis = [entry], f"pair {entry}"
        job = self._job(JobKind.ROTATE, ids, basis)
        if job:
            self.mesh.plan_job(job)

    def action_rotate_set(self) -> None:
        """``R``: rotate a set (see :meth:`set_selection`), after the plan."""
        job = self._job(JobKind.ROTATE, *self.set_selection())
        if job:
            self.mesh.plan_job(job)

    def rotate_provider(self, provider: str) -> None:
        """The palette's "Rotate provider …"."""
        if self.mesh.allows("rotate_set"):
            job = self._job(JobKind.ROTATE, *self._provider_pairs(provider))
            if job:
                self.mesh.plan_job(job)

    def action_drill(self) -> None:
        """``d``: drill the selection, after the plan."""
        if not self.table.marked and self._on_secret("drill"):
            return
        job = self._job(JobKind.DRILL, *self.selection())
        if job:
            self.mesh.plan_job(job)

    def action_probe(self) -> None:
        """``p``: probe the selection."""
        if not self.table.marked and self._on_secret("probe"):
            return
        job = self._job(JobKind.PROBE, *self.selection())
        if job:
            self.mesh.start_job(job)

    def action_probe_all(self) -> None:
        """``P``: probe every live pair."""
        job = self._job(JobKind.PROBE, list(self.mesh.model.rows), "every live pair")
        if job:
            self.mesh.start_job(job)

    def action_push(self) -> None:
        """``u``: deliver to every end what it must hold (asks first)."""
        self.mesh.confirm_job(
            Job(JobKind.PUSH, (), "every end"),
            "Deliver to every node the generation each end must hold, and revoke withdrawn "
            "pairs. Nodes that cannot be reached are left behind and retried next time.",
        )

    def action_copy_login(self) -> None:
        """``c``: copy the login (never the password)."""
        row = self.current_row()
        if row is not None:
            self.mesh.copy_value("login", row.status.login)

    def action_copy_pair(self) -> None:
        """``y``: copy the pair id."""
        row = self.current_row()
        if row is not None:
            self.mesh.copy_value("pair id", row.key)

    def action_refresh(self) -> None:
        """Read the inventory again."""
        self.mesh.reload()
