"""What a delivery round achieved and how it is recorded: per pair and per end, which
generation each end holds (the deliveries table), what the nodes say they hold
(``held_generations``), and a probe's row.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from meshtui.controller.reports import NOT_AS_DECLARED
from meshtui.inventory import Inventory, Transaction, now
from meshtui.inventory.rows import (
    DeliveryRow,
    ProbeRecord,
    Provision,
)
from meshtui.model import End
from meshtui.protocol.messages import (
    Holding,
    ProbeReport,
)

RELOAD_FAILED = "reload failed"
"""How a consumer end whose file was written but whose reload command failed is recorded."""


PIN_FAILED = "pin failed"
"""How a provider end whose login was applied but not confined in pg_hba.conf is recorded."""


KEPT_FAILURES = (RELOAD_FAILED, PIN_FAILED, NOT_AS_DECLARED)
"""An end's failure that holding the right credential does not clear: push delivers again."""


FEW = 32
"""Up to this many pairs, recording answers reads those pairs' rows one by one."""


NOTHING = 0
"""The generation recorded for an end that holds nothing (its file is gone)."""


EndRow = tuple[str, End, int | None, str | None, str | None]
"""(pair, end, generation held or None to keep, digest, error) for the deliveries table."""


@dataclass(frozen=True)
class SessionsSettled:
    """What became of a rotated pair's sessions on the old credential at its provider: how
    many were open when it took the new one (None: not ended nor counted, ``note`` says why),
    how many of them are open still (0 once ended; all of them, left to drain)."""

    count: int | None
    ended: bool
    left: int | None = None
    note: str = ""
    mark: str | None = None  # left to drain: the provider's mark of the sessions open then


@dataclass
class Delivered:
    """What one delivery round achieved, per pair and end."""

    provider_ok: dict[str, bool] = field(default_factory=dict)
    consumer_ok: dict[str, bool] = field(default_factory=dict)
    applied_at: dict[str, float] = field(default_factory=dict)
    written_at: dict[str, float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)  # pair -> first error
    pending: list[EndRow] = field(default_factory=list)  # answers not yet recorded
    bases: dict[Provision, str | None] = field(default_factory=dict)
    """Per provision delivered: the consumer set its manifest now holds (None: not known)."""
    sessions: dict[str, SessionsSettled] = field(default_factory=dict)
    """Per rotated pair whose provider was asked: its sessions on the old credential."""

    def flush(self, inv: Inventory) -> None:
        """Record the answers gathered so far in the deliveries table (and the bases)."""
        rows, self.pending = self.pending, []
        bases, self.bases = self.bases, {}
        record_end(inv, rows, bases)

    def staged(self, inv: Inventory) -> Callable[[Transaction], None] | None:
        """:meth:`flush` as a write into a transaction the caller opens (a rotation's end
        records its answers in the same commit); None when there is nothing to write."""
        rows, self.pending = self.pending, []
        bases, self.bases = self.bases, {}
        return end_writes(inv, rows, bases)

    def window_ms(self, pair: str) -> float | None:
        """Provider applied -> consumer holds it, in milliseconds."""
        if pair in self.applied_at and pair in self.written_at:
            return max(0.0, (self.written_at[pair] - self.applied_at[pair]) * 1000.0)
        return None

    def fail(self, pair: str, reason: str) -> None:
        """Remember the first error of a pair."""
        self.errors.setdefault(pair, reason)


def record_end(
    inv: Inventory, rows: Iterable[EndRow], bases: Mapping[Provision, str | None] | None = None
) -> None:
    """Record (pair, end, generation held, digest, error); a None generation keeps the old one.
    ``bases``: what each delivered provision's manifest now holds (see :class:`Delivered`),
    kept in the same transaction (a provider end recorded without one drops its base)."""
    write = end_writes(inv, rows, bases)
    if write is not None:
        with inv.transaction("record deliveries") as tx:
            write(tx)


def end_writes(
    inv: Inventory, rows: Iterable[EndRow], bases: Mapping[Provision, str | None] | None = None
) -> Callable[[Transaction], None] | None:
    """:func:`record_end`'s reads done now, its writes left for a transaction; None when
    there is nothing to write."""
    stamp = now()
    rows = list(rows)
    pairs = sorted({r[0] for r in rows})
    # a rotation of a few pairs reads their rows, not the mesh's
    current = inv.held_ends(pairs if len(pairs) <= FEW else None)
    out: list[DeliveryRow] = []
    same: list[tuple[str, str]] = []  # (pair, end): only the attempt is new
    for pair, end, gen, digest, error in rows:
        old = current.get((pair, end.value))
        old_gen, old_digest, old_since, _ = old if old is not None else (None, None, None, None)
        changed = gen is not None and gen != old_gen
        row = DeliveryRow(
            pair=pair,
            end=end.value,
            generation=gen if gen is not None else old_gen,
            digest=digest if gen is not None else old_digest,
            since=stamp if changed or not old_since else old_since,
            attempted_at=stamp,
            error=error,
        )
        if old is not None and (row["generation"], row["digest"], row["since"], error) == old:
            same.append((pair, end.value))
        else:
            out.append(row)
    if not (out or same or bases):
        return None

    def write(tx: Transaction) -> None:
        tx.put_deliveries(out)
        tx.touch_deliveries(same, stamp)  # the other consumers of a re-sent manifest
        tx.put_bases(bases or {})

    return write


HELD_FILE: dict[str, Literal["file", "file_owner", "file_group", "file_mode"]] = {
    "file": "file",
    "owner": "file_owner",
    "group": "file_group",
    "mode": "file_mode",
}
"""A consumer holding's file keys (as the agent reports them) -> the pairs table's columns."""


def not_as_declared(moved: list[str], unlike: list[str]) -> str:
    """Why a consumer end holding its generation is still behind: what the declaration moved
    (file, owner, group, mode) and how its files on the node differ (the agent's words)."""
    said = [f"{', '.join(moved)} changed"] if moved else []
    return f"{NOT_AS_DECLARED} ({'; '.join(said + unlike)}); push writes it again"


def files_unlike(
    inv: Inventory, found: Mapping[str, tuple[int, str, list[str]]], end: End = End.CONSUMER
) -> None:
    """Record ends whose files a probe cycle found not as written (pair -> generation,
    digest, how): held, but behind until push writes them again."""
    if not found:
        return
    current = inv.held_ends(list(found) if len(found) <= FEW else None)
    rows: list[EndRow] = []
    for pid, (gen, digest, unlike) in found.items():
        why = not_as_declared([], unlike)
        old = current.get((pid, end.value))
        if old is None or old[0] != gen or old[3] != why:
            rows.append((pid, end, gen, digest, why))
    record_end(inv, rows)


def held_generations(inv: Inventory, holdings: Mapping[str, list[Holding]]) -> dict[str, str]:
    """Correct the deliveries table from agents' own ``state`` answers (by digest).

    A consumer file that is missing, unreadable (the agent names why), or no longer where or
    as the declaration wants it (file, owner, group, mode) counts as holding nothing, so the
    next push writes it again; one whose mode, owner or group on the node differ from what
    was written (the agent's ``unlike``) is held but behind, and push writes it again too.
    Returns what was found of a held end that is not as written (pair -> what), so that its
    repair is said, never silent.
    """
    digests = inv.generation_by_digest()
    declared = inv.consumer_files()
    rows: list[EndRow] = []
    found: dict[str, str] = {}
    current = inv.held_ends()  # (generation, digest, since, error): not 20,000 row dicts
    for _node, held in holdings.items():
        for h in held:
            gen = digests.get((h["pair"], h["digest"]))
            if gen is None:
                continue
            present = h.get("present", True)
            why = h.get("error") or "file missing or changed"
            want = declared.get(h["pair"])
            reported: Mapping[str, object] = h
            moved = [
                key
                for key, column in HELD_FILE.items()
                if h["end"] == End.CONSUMER.value
                and want is not None
                and key in reported
                and reported[key] != want[column]
            ]
            old = current.get((h["pair"], h["end"]))
            unlike = h.get("unlike", [])
            if present and (moved or unlike):  # still there and working: push writes it again
                why = not_as_declared(moved, unlike)
                found[h["pair"]] = f"{h['end']} end: {why}"
                if old is None or old[0] != gen or old[3] != why:
                    rows.append((h["pair"], End(h["end"]), gen, h["digest"], why))
                continue
            old_gen, old_error = (old[0], old[3]) if old else (None, None)
            if present and old_gen == gen and str(old_error or "").startswith(KEPT_FAILURES):
                continue  # holding it says nothing of the reload or the pin: push tries again
            if present and (old_gen != gen or old_error):
                rows.append((h["pair"], End(h["end"]), gen, h["digest"], None))
            elif not present and (old_gen or old_error != why):
                rows.append((h["pair"], End(h["end"]), NOTHING, None, why))
                if old_gen:  # it held this generation: the file was changed or taken away
                    found[h["pair"]] = f"{h['end']} end: {why}"
    record_end(inv, rows)
    return found


def as_json(data: Any) -> str:
    """Compact JSON for the journal and audit details."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def probe_row(
    pid: str, generation: int, probe: ProbeReport | str, at: str, *, withdrawn: bool
) -> ProbeRecord:
    """A probe result as the inventory stores it (verdict, reason, timing; never a secret).

    A probe that could not be made at all is given as the reason why (verdict ``unknown``).
    """
    if isinstance(probe, str):
        return ProbeRecord(
            pair=pid,
            at=at,
            generation=generation,
            verdict="unknown",
            reason=probe,
            latency_ms=None,
            used_password=None,
            loopback=0,
            client_addr=None,
            control=None,
            withdrawn=int(withdrawn),
        )
    login, control = probe["login"], probe["control"]
    return ProbeRecord(
        pair=pid,
        at=at,
        generation=generation,
        verdict=probe["verdict"],
        reason=probe["reason"],
        latency_ms=login["latency_ms"],
        used_password=login["used_password"],
        loopback=int(probe["loopback"]),
        client_addr=login["client_addr"],
        control=control["verdict"] if control else None,
        withdrawn=int(withdrawn),
    )
