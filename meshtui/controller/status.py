"""Every pair's state, derived from the inventory: who holds which generation, the last probe.

States follow DESIGN "States of a pair". The reason is always filled in, because an operator
looking at a stale pair needs to know which end is behind and why.
"""

from __future__ import annotations

from collections.abc import Iterable

from meshtui.inventory import Inventory
from meshtui.inventory.rows import StatusRow
from meshtui.model import End, PairStatus, State

ACCEPTED, REFUSED, NO_PASSWORD = "accepted", "refused", "no password demanded"
DRIFT = "changed outside meshtui at "
"""How push records a provider end whose server no longer holds what meshtui delivered."""
REPAIRED = "re-applied after it was "
"""The prefix of a provider end's note once push re-applied it (not an error)."""


def _note(error: str | None) -> str:
    """A provider end's repaired-drift note, for the reason of a pair that is fine now."""
    return str(error) if error and str(error).startswith(REPAIRED) else ""


def _end_reason(end: End, generation: int | None, error: str | None, want: int) -> str | None:
    """Why an end is behind, or None when it holds ``want``."""
    if generation is None:
        if error:
            return f"{end} never received it: {error}"
        return f"{end} end never delivered (run meshtui push)"
    if generation == 0:
        return f"{end} holds nothing: {error or 'credential gone'}"
    if generation != want:
        tail = f": {error}" if error else ""
        return f"{end} holds generation {generation}, expected {want}{tail}"
    if error and str(error).startswith(REPAIRED):
        return None  # drift found and re-applied: a note, not a failure
    if error and str(error).startswith(DRIFT):
        return f"{end}: {error}"
    if error:  # holds the right generation, but the last attempt failed (or its reload)
        return f"{end}: last delivery failed: {error}"
    return None


def pair_state(row: StatusRow) -> tuple[State, str, bool]:
    """(state, reason, alarm) for one pair; a provider's repaired drift is added to the reason."""
    note = _note(row.provider_error) if not row.withdrawn_at else ""
    probed = row.verdict is not None
    seen_before = (
        note
        and probed
        and not row.probe_withdrawn
        and str(row.probed_at or "") < str(row.provider_attempted_at or "")
    )
    if seen_before:
        probed = False  # that probe saw the server before the re-apply
    state, reason, alarm = _pair_state(row, probed)
    if note and state is State.UNKNOWN and not probed:
        reason = "not probed since the provider was re-applied"
    return state, (f"{reason}; provider {note}" if note else reason), alarm


def _pair_state(row: StatusRow, probed: bool) -> tuple[State, str, bool]:
    verdict = row.verdict
    if row.withdrawn_at:
        if probed and row.probe_withdrawn:
            if verdict == REFUSED:
                return State.REVOKED, "withdrawn; login refused (28P01)", False
            if verdict == ACCEPTED:
                return State.STALE, "ALARM: withdrawn but its login still works", True
            if verdict == NO_PASSWORD:
                return (
                    State.STALE,
                    "ALARM: withdrawn but its login gets in without a password",
                    True,
                )
            return State.STALE, f"withdrawn; revocation not verified ({row.reason})", False
        return State.STALE, "withdrawn; revocation not verified", False
    want = row.generation
    behind = [
        r
        for r in (
            _end_reason(End.PROVIDER, row.provider_generation, row.provider_error, want),
            _end_reason(End.CONSUMER, row.consumer_generation, row.consumer_error, want),
        )
        if r
    ]
    if behind:
        return State.STALE, "; ".join(behind), False
    if not probed or row.probe_withdrawn:
        return State.UNKNOWN, "never probed", False
    if row.probe_generation != want:
        if verdict == "unknown" and not row.probe_generation:  # the probe never ran
            return State.UNKNOWN, f"cannot probe: {row.reason}", False
        return State.UNKNOWN, f"not probed since generation {want}", False
    loop = " over loopback" if row.loopback else ""
    if verdict == ACCEPTED and row.used_password != 0:
        return State.WORKING, f"logged in from {row.client_addr or 'consumer'}{loop}", False
    if verdict in (ACCEPTED, NO_PASSWORD):
        return State.STALE, "ALARM: the server did not demand a password", True
    if verdict == REFUSED:
        return State.STALE, f"probe refused: {row.reason}", False
    return State.STALE, f"probe could not decide: {row.reason}", False


def statuses(inv: Inventory, ids: Iterable[str] | None = None) -> list[PairStatus]:
    """The status row of every pair (or the named ones), sorted by pair id: one query."""
    rotating = {i["pair"]: r["id"] for r in inv.open_rotations() for i in r["items"]}
    rows = inv.status_rows(ids)
    out = []
    for row in rows:
        pid = row.id
        state, reason, alarm = pair_state(row)
        if pid in rotating:
            state = State.STALE
            reason = (
                f"rotation {rotating[pid]} was interrupted; the next push or rotate "
                "finishes or rolls it back"
            )
        out.append(
            PairStatus(
                pair=pid,
                provision=row.provision,
                consumer=row.consumer,
                provider=row.provider,
                login=row.login,
                generation=row.generation,
                consumer_generation=row.consumer_generation,
                provider_generation=row.provider_generation,
                withdrawn=bool(row.withdrawn_at),
                state=state,
                reason=reason,
                probed_at=row.probed_at,
                rotated_at=row.rotated_at,
                consumer_file=row.file,
                created_at=row.created_at,
                alarm=alarm,
                latency_ms=row.latency_ms,
            )
        )
    return out
