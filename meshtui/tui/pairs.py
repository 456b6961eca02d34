"""The pairs table's model: status rows kept by pair id, and the filtered, sorted, grouped view.

No widget lives here. :class:`PairModel` turns the controller's ``PairStatus`` rows into display
rows, diffs a fresh load against what it holds (so the table redraws only what changed), and
computes the view for a filter, a sort column and a grouping in a few milliseconds for 10,000
pairs: every row carries a lower-case search text and precomputed sort keys.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from meshtui.controller.read.schedule import PairDue
from meshtui.controller.reports import SecretStatus
from meshtui.kinds import registry
from meshtui.model import PairStatus, State, format_duration, parse_duration
from meshtui.tui.widgets.line_table import Column, Entry, GroupHeader

COLUMNS: tuple[Column, ...] = (
    Column("state", "state", min_width=7, max_width=8),
    Column("provision", "provision", max_width=16),
    Column("consumer", "consumer", max_width=28),
    Column("provider", "provider", max_width=28),
    Column("login", "login", max_width=40),
    Column("generation", "gen", align="right", max_width=5),
    Column("consumer_generation", "c.gen", align="right", max_width=5),
    Column("provider_generation", "p.gen", align="right", max_width=5),
    Column("age", "age", align="right", max_width=16),  # "3d of 90d", "OVERDUE 2d" with a policy
    Column("probed", "probed", align="right", max_width=8),
    Column("reason", "reason", max_width=60),
)
"""The main table's columns, in order; their keys are what ``s`` cycles through."""

SORT_KEYS = tuple(c.key for c in COLUMNS)
GROUPINGS = ("none", "provider", "node")
"""``g`` cycles these: no groups, one group per provider module, one per consumer node."""

STATE_ORDER = {State.STALE: 0, State.UNKNOWN: 1, State.WORKING: 2, State.REVOKED: 3}
"""Sorting by state puts what needs attention first."""

TONES = {State.WORKING: "good", State.STALE: "warn", State.REVOKED: "muted", State.UNKNOWN: "info"}
FILTER_FIELDS = (
    "state", "provision", "consumer", "provider", "login", "node", "reason", "gen", "due",
)  # fmt: skip
OWN = "own"
"""The provision cell of a module's own secret's row (``own (minted)``, ``own (supplied)``): what
tells it from a pair's row, and what ``provision:own`` filters."""
OVERDUE_WORD = "overdue"
"""A bare ``overdue`` in the filter keeps the pairs past their rotation policy."""


def parse_time(text: str | None) -> datetime | None:
    """An inventory timestamp, or None."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def short_time(text: str | None) -> str:
    """An inventory timestamp as ``2026-05-04 11:00:00`` (UTC, to the second)."""
    when = parse_time(text)
    return "-" if when is None else when.strftime("%Y-%m-%d %H:%M:%S")


def short_age(seconds: float | None) -> str:
    """``45s``, ``12m``, ``5h``, ``3d``, ``2y``: an age that fits in six cells."""
    if seconds is None:
        return "-"
    s = int(seconds) if seconds > 0 else 0
    if s >= 31536000:
        return f"{s // 31536000}y"
    if s >= 86400:
        return f"{s // 86400}d"
    if s >= 3600:
        return f"{s // 3600}h"
    if s >= 60:
        return f"{s // 60}m"
    return f"{s}s"


Ages = dict[str | None, tuple[float | None, str]]
"""Seconds since a timestamp and its short text, by timestamp: one load shares it, since many
pairs carry the same stamp (every pair of one declaration, of one rotation, of one probe run)."""


def _age(stamp: str | None, now: datetime, ages: Ages) -> tuple[float | None, str]:
    hit = ages.get(stamp)
    if hit is None:
        when = parse_time(stamp)
        seconds = (now - when).total_seconds() if when is not None else None
        hit = ages[stamp] = (seconds, short_age(seconds))
    return hit


def _gen(value: int | None) -> str:
    return "-" if value is None else str(value)


@dataclass(slots=True)
class PairRow:
    """One pair as the table shows it, with what filtering and sorting need precomputed.

    Read-only by convention, not ``frozen``: a load builds one per pair and a frozen
    dataclass costs four times as much to construct (10,000 of them: ~15 ms of first paint).
    """

    key: str
    cells: tuple[str, ...]
    tone: str
    status: PairStatus
    age_s: float | None
    probed_s: float | None
    hay: str
    due: PairDue | None = None
    due_in_s: float | None = None  # seconds until the policy's rotation (negative: late)
    overdue: bool = False
    secret: SecretStatus | None = None  # a module's own secret's row (None: a pair's)

    def sort_value(self, column: str) -> Any:
        """The value a column sorts by (numbers sort as numbers, unknown last)."""
        st = self.status
        if column == "state":
            return (0 if st.alarm else 1, STATE_ORDER[st.state], st.pair)
        if column in ("generation", "consumer_generation", "provider_generation"):
            value = getattr(st, column)
            return (value is None, value or 0, st.pair)
        if column == "age":
            return (self.age_s is None, self.age_s or 0.0, st.pair)
        if column == "probed":
            return (self.probed_s is None, self.probed_s or 0.0, st.pair)
        return (str(getattr(st, column)), st.pair)


def due_text(age: str, due: PairDue | None, now_s: float) -> tuple[str, float | None, bool]:
    """The age cell with the policy (``3d of 90d``, ``OVERDUE 2d``), seconds to due, overdue."""
    if due is None or due.due_at is None or due.withdrawn or due.policy.rotate_every is None:
        return age, None, False
    due_in = due.due_at - now_s
    if due.is_overdue(now_s):
        return f"OVERDUE {short_age(-due_in)}", due_in, True
    return f"{age} of {format_duration(due.policy.rotate_every)}", due_in, False


def make_row(
    st: PairStatus, now: datetime, ages: Ages | None = None, due: PairDue | None = None
) -> PairRow:
    """The display row of one status (``ages``: a memo shared by the rows of one load)."""
    if ages is None:
        ages = {}
    age_s, age = _age(st.rotated_at or st.created_at, now, ages)
    age, due_in, overdue = due_text(age, due, now.timestamp()) if due else (age, None, False)
    probed_s, probed = _age(st.probed_at, now, ages)
    state = str(st.state)
    shown = "ALARM" if st.alarm else state
    if st.withdrawn and st.state is not State.REVOKED:
        shown += "*"
    cells = (
        shown,
        st.provision,
        st.consumer,
        st.provider if registry.is_default(st.kind) else f"{st.provider} ({st.kind})",
        st.login,
        str(st.generation),
        _gen(st.consumer_generation),
        _gen(st.provider_generation),
        age,
        probed if probed_s is not None else "never",
        st.reason,
    )
    hay = "\n".join((st.pair, st.login, state, st.reason, st.consumer_file)).lower()
    tone = "alarm" if st.alarm else TONES[st.state]
    if due is None:
        return PairRow(st.pair, cells, tone, st, age_s, probed_s, hay)  # positional: fast path
    return PairRow(st.pair, cells, tone, st, age_s, probed_s, hay, due, due_in, overdue)


def secret_row(s: SecretStatus, vault: PairStatus | None, now: datetime, ages: Ages) -> PairRow:
    """The display row of a module's own secret, beside its module's pairs: keyed by its label
    (``secret app1/gitea session_key``), its provision cell ``own (minted)`` or ``own
    (supplied)``, its versions where a pair's generations are (wanted, the file's, the
    vault's), filtered, sorted and grouped as a pair's row is."""
    st = PairStatus(
        pair=s.label,
        provision=f"{OWN} ({s.origin})",
        consumer=s.module,
        provider=s.vault or "-",
        login=s.name,
        generation=s.version,
        consumer_generation=s.file_version,
        provider_generation=s.vault_version,
        withdrawn=False,
        state=State(s.state),
        reason=s.reason,
        probed_at=None,
        rotated_at=s.since,
        consumer_file=s.file,
        created_at=s.since or "",
        kind=vault.kind if vault is not None else registry.DEFAULT,
    )
    row = make_row(st, now, ages)
    row.secret = s
    cells = list(row.cells)
    cells[SORT_KEYS.index("probed")] = "-"  # a secret is not probed: push and doctor look
    if s.overdue:  # a supplied one held past its max_age
        cells[SORT_KEYS.index("age")] = f"OVERDUE {cells[SORT_KEYS.index('age')]}"
        row.overdue = True
    row.cells = tuple(cells)
    return row


@dataclass(frozen=True)
class Fresh:
    """A load turned into display rows (in id order) and the column widths they need."""

    rows: dict[str, PairRow]
    widths: list[int]


@dataclass(frozen=True)
class Changes:
    """What a load changed, by pair id."""

    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    @property
    def any(self) -> bool:
        """True when something must be redrawn."""
        return bool(self.added or self.changed or self.removed)

    @property
    def keys_changed(self) -> bool:
        """True when rows came or went (the view must be recomputed, not just redrawn)."""
        return bool(self.added or self.removed)


@dataclass(frozen=True)
class Query:
    """A parsed filter: ``field:value`` terms match one column, bare words match anywhere.

    Every term must match (AND). Fields: state, provision, consumer, provider, login, node
    (either end's node), reason, gen. Matching is case-insensitive substring matching, except
    ``state:`` and ``node:`` and ``gen:``, which must match exactly.
    """

    words: tuple[str, ...] = ()
    fields: tuple[tuple[str, str], ...] = ()
    overdue: bool = False

    @classmethod
    def parse(cls, text: str) -> Query:
        """Split the filter box's text into terms."""
        words: list[str] = []
        fields: list[tuple[str, str]] = []
        overdue = False
        for term in text.lower().split():
            name, colon, value = term.partition(":")
            if colon and name in FILTER_FIELDS and value:
                fields.append((name, value))
            elif term == OVERDUE_WORD:
                overdue = True
            else:
                words.append(term)
        return cls(tuple(words), tuple(fields), overdue)

    @property
    def empty(self) -> bool:
        """True when nothing is filtered out."""
        return not (self.words or self.fields or self.overdue)

    def narrows(self, wider: Query) -> bool:
        """True when every row this query keeps is also kept by ``wider``.

        Then this query can be run over ``wider``'s result instead of every row: typing on at
        the end of the filter (``ap`` -> ``app``) narrows it. A bare word is kept by a row whose
        text contains it, so each of ``wider``'s words must be inside one of these words; its
        field terms and ``overdue`` must be here too.
        """
        return (
            all(any(w in mine for mine in self.words) for w in wider.words)
            and set(wider.fields) <= set(self.fields)
            and (self.overdue or not wider.overdue)
        )

    def matcher(self) -> Callable[[PairRow], bool]:
        """A fast predicate for this query."""
        words, fields, overdue = self.words, self.fields, self.overdue

        def match(row: PairRow) -> bool:
            hay = row.hay
            for word in words:
                if word not in hay:
                    return False
            if overdue and not row.overdue:
                return False
            if fields:
                st = row.status
                for name, value in fields:
                    if name == "due":
                        if not _due_match(row, value):
                            return False
                    elif not _field_match(st, name, value):
                        return False
            return True

        return match


def _due_match(row: PairRow, value: str) -> bool:
    """``due:<7d`` (due within 7 days, late ones too), ``due:>7d``; no policy never matches."""
    if row.due_in_s is None:
        return False
    op, amount = (value[0], value[1:]) if value[0] in "<>" else ("<", value)
    try:
        limit = parse_duration(amount)
    except ValueError:
        return False
    return row.due_in_s < limit if op == "<" else row.due_in_s > limit


def _field_match(st: PairStatus, name: str, value: str) -> bool:
    if name == "state":
        return str(st.state) == value or (value == "alarm" and st.alarm)
    if name == "node":
        return value in (st.consumer_node.lower(), st.provider_node.lower())
    if name == "gen":
        return str(st.generation) == value
    return value in str(getattr(st, name)).lower()


FILTERS_KEPT = 64
"""How many recent filters' results a model keeps: backspace returns to one of them at once."""


class PairModel:
    """Every pair's display row by id, and the view the table shows.

    The results of recent filters are kept until the rows change: a filter typed on from one of
    them filters only its result, and one seen before (backspace) costs a lookup, so a keystroke
    in the filter box rarely looks at all 10,000 rows.
    """

    def __init__(self) -> None:
        self.rows: dict[str, PairRow] = {}
        self.widths: list[int] = [max(c.min_width, len(c.label)) for c in COLUMNS]
        self._filtered: dict[Query, list[PairRow]] = {}

    @staticmethod
    def build(
        statuses: Iterable[PairStatus],
        now: datetime,
        dues: Mapping[str, PairDue] | None = None,
        secrets: Sequence[SecretStatus] = (),
    ) -> Fresh:
        """Display rows and column widths for a load (a module's own secrets beside the
        pairs); pure, so a worker thread can do it."""
        ages: Ages = {}
        if dues:
            rows = {st.pair: make_row(st, now, ages, dues.get(st.pair)) for st in statuses}
        else:
            rows = {st.pair: make_row(st, now, ages) for st in statuses}
        for s in secrets:
            rows[s.label] = secret_row(
                s, rows[s.pair].status if s.pair in rows else None, now, ages
            )
        return Fresh(dict(sorted(rows.items())), PairModel._measure(rows.values()))

    def merge(self, fresh: Fresh) -> Changes:
        """Take a fresh load; keep unchanged rows as they are and report the differences."""
        old, new = self.rows, fresh.rows
        changes = Changes(
            added=[k for k in new if k not in old],
            changed=[k for k, r in new.items() if k in old and old[k].cells != r.cells],
            removed=[k for k in old if k not in new],
        )
        if changes.keys_changed:
            self.rows = new  # id order, which is the unsorted view's order
        else:
            for k in changes.changed:
                old[k] = new[k]
        if changes.any:
            self.widths = fresh.widths
            self._filtered.clear()  # kept results hold the rows as they were
        return changes

    def apply(self, statuses: Iterable[PairStatus], now: datetime) -> Changes:
        """:meth:`build` then :meth:`merge`, in one go."""
        return self.merge(self.build(statuses, now))

    @staticmethod
    def _measure(rows: Iterable[PairRow]) -> list[int]:
        """Column widths: each column's longest cell, within the column's limits."""
        widths = [max(c.min_width, len(c.label)) for c in COLUMNS]
        for i, column in enumerate(zip(*(row.cells for row in rows), strict=False)):
            longest = min(max(map(len, column)), COLUMNS[i].max_width)
            widths[i] = max(widths[i], longest)
        return widths

    def filtered(self, query: Query) -> list[PairRow]:
        """The rows the query keeps, in id order (a new list: the caller may sort it)."""
        if query.empty:
            return list(self.rows.values())
        kept = self._filtered.get(query)
        if kept is None:
            # the narrowest kept result this query narrows, else every row
            source: Collection[PairRow] = self.rows.values()
            for wider, rows in self._filtered.items():
                if len(rows) < len(source) and query.narrows(wider):
                    source = rows
            match = query.matcher()
            kept = [r for r in source if match(r)]
            if len(self._filtered) >= FILTERS_KEPT:
                del self._filtered[next(iter(self._filtered))]  # the oldest
            self._filtered[query] = kept
        return list(kept)

    def view(
        self,
        query: Query,
        *,
        sort: str | None = None,
        reverse: bool = False,
        group: str = "none",
        collapsed: frozenset[str] = frozenset(),
    ) -> list[Entry]:
        """What the table shows: filtered, sorted, optionally under group headers."""
        if query.empty and sort is None and not reverse and group == "none":
            return list(self.rows)  # every pair, in id order: the keys as they are
        rows = self.filtered(query)
        if sort is not None:
            rows.sort(key=lambda r: r.sort_value(sort), reverse=reverse)
        elif reverse:
            rows.reverse()
        if group == "none":
            return [r.key for r in rows]
        groups: dict[str, list[PairRow]] = {}
        for r in rows:
            name = r.status.provider if group == "provider" else r.status.consumer_node
            groups.setdefault(name, []).append(r)
        entries: list[Entry] = []
        for name in sorted(groups):
            members = groups[name]
            header = GroupHeader(
                name=name,
                label=group_label(group, name, members),
                keys=tuple(r.key for r in members),
                collapsed=name in collapsed,
            )
            entries.append(header)
            if not header.collapsed:
                entries.extend(header.keys)
        return entries

    def counts(self) -> Counter[str]:
        """How many rows (pairs and own secrets) are in each state (and how many alarm)."""
        c: Counter[str] = Counter(str(r.status.state) for r in self.rows.values())
        c["alarm"] = sum(1 for r in self.rows.values() if r.status.alarm)
        return c

    def live(self, keys: Iterable[str]) -> list[str]:
        """The keys that name pairs which are not withdrawn (only those can be acted on as
        pairs; a module's own secret's row is not a pair)."""
        rows = self.rows
        return [
            k for k in keys if k in rows and not rows[k].status.withdrawn and rows[k].secret is None
        ]

    def secrets(self, keys: Iterable[str]) -> list[SecretStatus]:
        """The module's own secrets among ``keys``."""
        return [s for k in keys if k in self.rows and (s := self.rows[k].secret) is not None]


def group_label(group: str, name: str, members: Sequence[PairRow]) -> str:
    """``provider db1/postgres · 12 pairs · 10 working · 2 stale``."""
    counts = Counter(str(r.status.state) for r in members)
    parts = [f"{n} {s}" for s in State if (n := counts[s])]
    word = "provider" if group == "provider" else "node"
    plural = "pair" if len(members) == 1 else "pairs"
    return " · ".join([f"{word} {name}", f"{len(members)} {plural}", *parts])
