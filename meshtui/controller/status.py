"""Every pair's state, derived from the inventory: who holds which generation, the last probe.

States follow docs/ARCHITECTURE.md "States of a pair". The reason is always filled in, because an operator
looking at a stale pair needs to know which end is behind and why.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from meshtui.inventory import Inventory, Row
from meshtui.model import End, PairStatus, State, Verdict

DRIFT = "changed outside meshtui at "
"""How push records a provider end whose server no longer holds what meshtui delivered."""
REPAIRED = "re-applied after it was "
"""The prefix of a provider end's note once push re-applied it (not an error)."""


def _note(held: Row | None) -> str:
    """A provider end's repaired-drift note, for the reason of a pair that is fine now."""
    error = held["error"] if held is not None else None
    return str(error) if error and str(error).startswith(REPAIRED) else ""


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
    if held["error"] and str(held["error"]).startswith(REPAIRED):
        return None  # drift found and re-applied: a note, not a failure
    if held["error"] and str(held["error"]).startswith(DRIFT):
        return f"{end}: {held['error']}"
    if held["error"]:  # holds the right generation, but the last attempt failed (or its reload)
        return f"{end}: last delivery failed: {held['error']}"
    return None


def pair_state(
    pair: Row, consumer: Row | None, provider: Row | None, probe: Row | None
) -> tuple[State, str, bool]:
    """(state, reason, alarm) for one pair; a provider's repaired drift is added to the reason."""
    note = _note(provider) if not pair["withdrawn_at"] else ""
    seen_before = (
        note
        and provider is not None
        and probe is not None
        and not probe["withdrawn"]
        and str(probe["at"] or "") < str(provider["attempted_at"] or "")
    )
    if seen_before:
        probe = None  # that probe saw the server before the re-apply
    state, reason, alarm = _pair_state(pair, consumer, provider, probe)
    if note and state is State.UNKNOWN and probe is None:
        reason = "not probed since the provider was re-applied"
    return state, (f"{reason}; provider {note}" if note else reason), alarm


def _pair_state(
    pair: Row, consumer: Row | None, provider: Row | None, probe: Row | None
) -> tuple[State, str, bool]:
    if pair["withdrawn_at"]:
        if probe is not None and probe["withdrawn"]:
            if probe["verdict"] == Verdict.REFUSED:
                code = "WRONGPASS" if "WRONGPASS" in (probe["reason"] or "") else "28P01"
                return State.REVOKED, f"withdrawn; login refused ({code})", False
            if probe["verdict"] == Verdict.ACCEPTED:
                return State.STALE, "ALARM: withdrawn but its login still works", True
            if probe["verdict"] == Verdict.NO_PASSWORD:
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
        if probe["verdict"] == "unknown" and not probe["generation"]:  # the probe never ran
            return State.UNKNOWN, f"cannot probe: {probe['reason']}", False
        return State.UNKNOWN, f"not probed since generation {want}", False
    loop = " over loopback" if probe["loopback"] else ""
    if probe["verdict"] == Verdict.ACCEPTED and probe["used_password"] != 0:
        return State.WORKING, f"logged in from {probe['client_addr'] or 'consumer'}{loop}", False
    if probe["verdict"] in (Verdict.ACCEPTED, Verdict.NO_PASSWORD):
        return State.STALE, "ALARM: the server did not demand a password", True
    if probe["verdict"] == Verdict.REFUSED:
        return State.STALE, f"probe refused: {probe['reason']}", False
    return State.STALE, f"probe could not decide: {probe['reason']}", False


STATUS_SQL = """
SELECT p.id, p.provision, p.consumer, p.provider, p.login, p.file, p.generation, p.created_at,
       p.rotated_at, p.withdrawn_at,
       c.generation, c.error, v.generation, v.error,
       pr.verdict, pr.reason, pr.at, pr.generation, pr.loopback, pr.client_addr, pr.withdrawn,
       pr.latency_ms, pr.used_password, v.attempted_at
FROM pairs p
LEFT JOIN deliveries c ON c.pair = p.id AND c."end" = 'consumer'
LEFT JOIN deliveries v ON v.pair = p.id AND v."end" = 'provider'
LEFT JOIN probes pr ON pr.id = (SELECT MAX(id) FROM probes WHERE pair = p.id)
"""


def statuses(inv: Inventory, ids: Iterable[str] | None = None) -> list[PairStatus]:
    """The status row of every pair (or the named ones), sorted by pair id: one query."""
    rotating = {i["pair"]: r["id"] for r in inv.open_rotations() for i in r["items"]}
    sql, params = STATUS_SQL, []
    if ids is not None:
        wanted = sorted(set(ids))
        if not wanted:
            return []
        sql += " WHERE p.id IN (" + ",".join("?" * len(wanted)) + ")"
        params = wanted
    sql += " ORDER BY p.id"
    with inv.lock:
        rows = inv.db.conn.execute(sql, params).fetchall()
    kinds = provider_kinds(inv)
    out = []
    for (
        pid,
        provision,
        consumer_id,
        provider_id,
        login,
        file,
        generation,
        created_at,
        rotated_at,
        withdrawn_at,
        c_gen,
        c_err,
        v_gen,
        v_err,
        verdict,
        why,
        probed_at,
        pr_gen,
        loopback,
        client_addr,
        pr_withdrawn,
        latency,
        used_password,
        v_attempted,
    ) in rows:
        pair = {"generation": generation, "withdrawn_at": withdrawn_at}
        consumer = (
            None if c_gen is None and c_err is None else {"generation": c_gen, "error": c_err}
        )
        provider = (
            None
            if v_gen is None and v_err is None
            else {"generation": v_gen, "error": v_err, "attempted_at": v_attempted}
        )
        probe = (
            None
            if verdict is None
            else {
                "verdict": verdict,
                "reason": why,
                "generation": pr_gen,
                "loopback": loopback,
                "client_addr": client_addr,
                "withdrawn": pr_withdrawn,
                "used_password": used_password,
                "at": probed_at,
            }
        )
        state, reason, alarm = pair_state(pair, consumer, provider, probe)
        if pid in rotating:
            state = State.STALE
            reason = (
                f"rotation {rotating[pid]} was interrupted; the next push or rotate "
                "finishes or rolls it back"
            )
        out.append(
            PairStatus(
                pair=pid,
                provision=provision,
                consumer=consumer_id,
                provider=provider_id,
                login=login,
                generation=generation,
                consumer_generation=c_gen,
                provider_generation=v_gen,
                withdrawn=bool(withdrawn_at),
                state=state,
                reason=reason,
                probed_at=probed_at,
                rotated_at=rotated_at,
                consumer_file=file,
                created_at=created_at,
                alarm=alarm,
                latency_ms=latency,
                kind=kinds.get((provider_id, provision), "postgres"),
            )
        )
    return out


def provider_kinds(inv: Inventory) -> dict[tuple[str, str], str]:
    """(provider module, provision) -> kind, for the providers that are not PostgreSQL."""
    out: dict[tuple[str, str], str] = {}
    for r in inv.query("SELECT id, spec FROM modules WHERE spec LIKE '%\"kind\"%'"):
        for offer in json.loads(r["spec"]).get("provides", []):
            if offer.get("kind"):
                out[(r["id"], offer["name"])] = str(offer["kind"])
    return out
