"""Every pair's state, derived from the inventory: who holds which generation, the last probe.

States follow DESIGN "States of a pair". The reason is always filled in, because an operator
looking at a stale pair needs to know which end is behind and why.
"""

from __future__ import annotations

from collections.abc import Iterable

from meshtui.inventory import Inventory, Row
from meshtui.model import End, PairStatus, State

ACCEPTED, REFUSED, NO_PASSWORD = "accepted", "refused", "no password demanded"


def _end_reason(end: End, held: Row | None, want: int) -> str | None:
    """Why an end is behind, or None when it holds ``want``."""
    if held is None or held["generation"] is None:
        if held is not None and held["error"]:
            return f"{end} never received it: {held['error']}"
        return f"{end} end never delivered (run meshtui push)"
    if held["generation"] == 0:
        return f"{end} holds nothing: {held['error'] or 'credential gone'}"
    if held["generation"] != want:
        tail = f": {held['error']}" if held["error"] else ""
        return f"{end} holds generation {held['generation']}, expected {want}{tail}"
    return None


def pair_state(
    pair: Row, consumer: Row | None, provider: Row | None, probe: Row | None
) -> tuple[State, str, bool]:
    """(state, reason, alarm) for one pair."""
    if pair["withdrawn_at"]:
        if probe is not None and probe["withdrawn"]:
            if probe["verdict"] == REFUSED:
                return State.REVOKED, "withdrawn; login refused (28P01)", False
            if probe["verdict"] == ACCEPTED:
                return State.STALE, "ALARM: withdrawn but its login still works", True
            if probe["verdict"] == NO_PASSWORD:
                return (
                    State.STALE,
                    "ALARM: withdrawn but its login gets in without a password",
                    True,
                )
            return State.STALE, f"withdrawn; revocation not verified ({probe['reason']})", False
        return State.STALE, "withdrawn; revocation not verified", False
    want = pair["generation"]
    behind = [
        r
        for r in (
            _end_reason(End.PROVIDER, provider, want),
            _end_reason(End.CONSUMER, consumer, want),
        )
        if r
    ]
    if behind:
        return State.STALE, "; ".join(behind), False
    if probe is None or probe["withdrawn"]:
        return State.UNKNOWN, "never probed", False
    if probe["generation"] != want:
        return State.UNKNOWN, f"not probed since generation {want}", False
    loop = " over loopback" if probe["loopback"] else ""
    if probe["verdict"] == ACCEPTED and probe["used_password"] != 0:
        return State.WORKING, f"logged in from {probe['client_addr'] or 'consumer'}{loop}", False
    if probe["verdict"] in (ACCEPTED, NO_PASSWORD):
        return State.STALE, "ALARM: the server did not demand a password", True
    if probe["verdict"] == REFUSED:
        return State.STALE, f"probe refused: {probe['reason']}", False
    return State.STALE, f"probe could not decide: {probe['reason']}", False


def statuses(inv: Inventory, ids: Iterable[str] | None = None) -> list[PairStatus]:
    """The status row of every pair (or the named ones), sorted by pair id."""
    deliveries = inv.deliveries()
    probes = inv.latest_probes()
    rotating = {i["pair"]: r["id"] for r in inv.open_rotations() for i in r["items"]}
    out = []
    for p in inv.pairs(ids):
        pid = p["id"]
        consumer = deliveries.get((pid, End.CONSUMER.value))
        provider = deliveries.get((pid, End.PROVIDER.value))
        probe = probes.get(pid)
        state, reason, alarm = pair_state(p, consumer, provider, probe)
        if pid in rotating:
            state, reason = (
                State.STALE,
                (
                    f"rotation {rotating[pid]} was interrupted; the next push or rotate finishes "
                    "or rolls it back"
                ),
            )
        out.append(
            PairStatus(
                pair=pid,
                provision=p["provision"],
                consumer=p["consumer"],
                provider=p["provider"],
                login=p["login"],
                generation=p["generation"],
                consumer_generation=consumer["generation"] if consumer else None,
                provider_generation=provider["generation"] if provider else None,
                withdrawn=bool(p["withdrawn_at"]),
                state=state,
                reason=reason,
                probed_at=probe["at"] if probe else None,
                rotated_at=p["rotated_at"],
                consumer_file=p["file"],
                created_at=p["created_at"],
                alarm=alarm,
                latency_ms=probe["latency_ms"] if probe else None,
            )
        )
    return out
