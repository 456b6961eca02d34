"""One pair's detail report, read from the inventory and handed on as typed views.

The dashboard's pair screen reads these fields; it never sees an inventory row.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from meshtui.controller import status as status_mod
from meshtui.controller.reports import (
    DeliveryView,
    DrillRecord,
    DrillReport,
    DrillStep,
    GenerationView,
    PairDetail,
    ProbeView,
    RotationView,
)
from meshtui.inventory import Inventory


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


def drill_report(row: Mapping[str, Any]) -> DrillReport:
    """A stored drill (its evidence decoded: the DrillReport's JSON) as a report again."""
    evidence = row.get("evidence") or {}
    steps = [
        DrillStep(
            name=str(s.get("name", "?")),
            expected=str(s.get("expected", "?")),
            verdict=str(s.get("verdict", "?")),
            latency_ms=_opt_float(s.get("latency_ms")),
            reason=str(s.get("reason", "") or ""),
        )
        for s in evidence.get("steps", [])
    ]
    return DrillReport(
        pair=str(evidence.get("pair", row.get("pair", "?"))),
        ok=bool(row.get("ok")),
        steps=steps,
        window_ms=_opt_float(row.get("window_ms")),
        rotation=_opt_int(row.get("rotation")),
        reason=str(evidence.get("reason", "") or ""),
    )


def pair_detail(inv: Inventory, pid: str) -> PairDetail:
    """Generations, deliveries, probes, drills and rotations of one (resolved) pair."""
    (row,) = inv.pairs([pid])
    (st,) = status_mod.statuses(inv, [pid])
    generations = [
        GenerationView(
            generation=int(g["generation"]),
            digest=str(g["digest"]),
            created_at=str(g["created_at"]),
            discarded_at=_opt_str(g["discarded_at"]),
        )
        for g in inv.generations(pid)
    ]
    deliveries = [
        DeliveryView(
            end=str(end),
            generation=_opt_int(d.get("generation")),
            digest=_opt_str(d.get("digest")),
            since=_opt_str(d.get("since")),
            attempted_at=_opt_str(d.get("attempted_at")),
            error=_opt_str(d.get("error")),
        )
        for (_, end), d in sorted(inv.deliveries(pid).items())
    ]
    probes = [
        ProbeView(
            at=str(p["at"]),
            generation=_opt_int(p.get("generation")),
            verdict=str(p["verdict"]),
            reason=str(p["reason"]),
            latency_ms=_opt_float(p.get("latency_ms")),
            client_addr=_opt_str(p.get("client_addr")),
            loopback=bool(p.get("loopback")),
        )
        for p in inv.probes(pid)
    ]
    drills = [DrillRecord(_opt_str(d.get("at")), drill_report(d)) for d in inv.drills(pid)]
    rotations = [
        RotationView(
            id=int(r["id"]),
            started_at=str(r["started_at"]),
            state=str(r["state"]),
            outcome=_opt_str(r.get("outcome")),
            reason=_opt_str(r.get("reason")),
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
    )
