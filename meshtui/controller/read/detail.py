"""One pair's detail report, read from the inventory and handed on as typed views.

The dashboard's pair screen reads these fields; it never sees an inventory row.
"""

from __future__ import annotations

from meshtui.controller.read import secret_states
from meshtui.controller.read import status as status_mod
from meshtui.controller.reports import (
    DeliveryView,
    DrillRecord,
    DrillReport,
    DrillStep,
    GenerationView,
    PairDetail,
    ProbeView,
    RotationView,
    SecretStatus,
)
from meshtui.inventory import Inventory
from meshtui.inventory.rows import DrillRow
from meshtui.model import SWAP, VAULT_PROVISION


def drill_report(row: DrillRow) -> DrillReport:
    """A stored drill (its evidence: the DrillReport's JSON, typed by the inventory) as a report."""
    evidence = row["evidence"]
    return DrillReport(
        pair=evidence["pair"],
        ok=bool(row["ok"]),
        steps=[DrillStep(**step) for step in evidence["steps"]],
        window_ms=row["window_ms"],
        rotation=row["rotation"],
        reason=evidence["reason"],
        sessions=evidence.get("sessions", ""),
        sessions_before=evidence.get("sessions_before"),
        sessions_after=evidence.get("sessions_after"),
        rotation_kind=evidence.get("rotation_kind", SWAP),
        both_accepted_ms=evidence.get("both_accepted_ms"),
        refused=evidence.get("refused"),
    )


def pair_detail(inv: Inventory, pid: str) -> PairDetail:
    """Generations, deliveries, probes, drills and rotations of one (resolved) pair."""
    (row,) = inv.pairs([pid])
    (st,) = status_mod.statuses(inv, [pid])
    generations = [
        GenerationView(
            generation=g["generation"],
            digest=g["digest"],
            created_at=g["created_at"],
            discarded_at=g["discarded_at"],
        )
        for g in inv.generations(pid)
    ]
    deliveries = [
        DeliveryView(
            end=end,
            generation=d["generation"],
            digest=d["digest"],
            since=d["since"],
            attempted_at=d["attempted_at"],
            error=d["error"],
        )
        for (_, end), d in sorted(inv.deliveries(pid).items())
    ]
    probes = [
        ProbeView(
            at=p["at"],
            generation=p["generation"],
            verdict=p["verdict"],
            reason=p["reason"],
            latency_ms=p["latency_ms"],
            client_addr=p["client_addr"],
            loopback=bool(p["loopback"]),
        )
        for p in inv.probes(pid)
    ]
    drills = [DrillRecord(d["at"], drill_report(d)) for d in inv.drills(pid)]
    rotations = [
        RotationView(
            id=r["id"],
            started_at=r["started_at"],
            state=r["state"],
            outcome=r["outcome"],
            reason=r["reason"],
        )
        for r in inv.rotations()
        if any(i["pair"] == pid for i in r["items"])
    ]
    return PairDetail(
        status=st,
        values=dict(row["values"]),
        reload=list(row["reload"]),
        generations=generations,
        deliveries=deliveries,
        probes=probes,
        drills=drills,
        rotations=rotations,
        secrets=_secrets(inv, pid) if row["provision"] == VAULT_PROVISION else [],
        rotation=inv.rotation_modes([pid])[pid],
        draining=status_mod.draining(inv, [pid]).get(pid),
    )


def _secrets(inv: Inventory, pid: str) -> list[SecretStatus]:
    """A vault pair's module's own secrets."""
    return [s for s in secret_states.status(inv) if s.pair == pid]
