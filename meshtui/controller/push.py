"""``meshtui push``: bring every end to the generation the inventory says it must hold.

It first asks every node what it holds (so a lost reply or a deleted file is noticed), finishes
or rolls back a rotation a dead controller left journaled, delivers only what is behind
(providers first, then consumers), and revokes withdrawn pairs. Run twice, it changes nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from meshtui import wire
from meshtui.controller import status as status_mod
from meshtui.controller.client import Agents
from meshtui.controller.deliver import (
    Delivered,
    Planner,
    held_generations,
    probe_row,
    send_consumers,
    send_providers,
    target_of,
)
from meshtui.controller.lock import delivering
from meshtui.controller.reports import PairOutcome, Progress, PushReport
from meshtui.controller.resolve import ask_state
from meshtui.errors import AgentError
from meshtui.inventory import now
from meshtui.model import End, State, node_of

if TYPE_CHECKING:
    from meshtui.controller.core import Controller


def push(ctl: Controller, progress: Progress) -> PushReport:
    """Converge every end; the report names who is still behind."""
    from meshtui.controller.rotate import recover

    inv = ctl.inventory
    with delivering(ctl.state_dir, "push"), Agents(inv.nodes(), ctl.keys()) as agents:
        recover(ctl, agents, progress)
        progress("asking every node what it holds", 0, 4)
        plan = Planner(inv)
        resolutions, holdings = ask_state(agents, sorted(plan.nodes))
        unreachable = {r.node: r.reason for r in resolutions if not r.ok}
        held_generations(inv, holdings)
        deliveries = inv.deliveries()
        before = dict(deliveries)

        def was_behind(pid: str) -> bool:
            want = plan.pairs[pid]["generation"]
            return any(
                (before.get((pid, end.value)) or {}).get("generation") != want for end in End
            )

        def behind(pid: str, end: End) -> bool:
            d = deliveries.get((pid, end.value))
            return d is None or d["generation"] != plan.pairs[pid]["generation"]

        live = [p for p in plan.pairs.values() if not p["withdrawn_at"]]
        withdrawn = [p for p in plan.pairs.values() if p["withdrawn_at"]]
        held_by_provider = {
            (h["pair"]) for hs in holdings.values() for h in hs if h["end"] == "provider"
        }
        sets_needed = {
            (p["provider"], p["provision"]) for p in live if behind(p["id"], End.PROVIDER)
        }
        sets_needed |= {
            (p["provider"], p["provision"]) for p in withdrawn if p["id"] in held_by_provider
        }
        result = Delivered()
        progress("delivering to providers", 1, 4)
        sets = plan.provider_sets(sets_needed, {})
        send_providers(agents, inv, {n: s for n, s in sets.items() if n not in unreachable}, result)
        for node in set(sets) & set(unreachable):
            for spec in sets[node]:
                for c in spec["consumers"]:
                    result.fail(c["pair"], f"provider {node}: {unreachable[node]}")
        deliveries = inv.deliveries()
        progress("delivering to consumers", 2, 4)
        # a consumer never moves ahead of its provider: it would hold a password nobody accepts
        todo = [
            p["id"]
            for p in live
            if behind(p["id"], End.CONSUMER)
            and not behind(p["id"], End.PROVIDER)
            and node_of(p["consumer"]) not in unreachable
        ]
        for p in live:
            if behind(p["id"], End.CONSUMER) and behind(p["id"], End.PROVIDER):
                result.fail(p["id"], "consumer waits until its provider holds the generation")
        send_consumers(agents, inv, plan.consumer_items(todo, {}), result)
        progress("revoking withdrawn pairs", 3, 4)
        held_by_consumer = {
            h["pair"] for hs in holdings.values() for h in hs if h["end"] == "consumer"
        }
        # only once the provider no longer holds a withdrawn pair is its login gone: ask again
        providers_now = {node_of(p["provider"]) for p in withdrawn} - set(unreachable)
        _, after = ask_state(agents, sorted(providers_now))
        still_at_provider = {
            h["pair"] for hs in after.values() for h in hs if h["end"] == "provider"
        }
        revoked = revoke(
            ctl,
            agents,
            plan,
            [
                p["id"]
                for p in withdrawn
                if p["id"] in held_by_consumer
                and p["id"] not in still_at_provider
                and node_of(p["provider"]) in after
                and node_of(p["consumer"]) not in unreachable
            ],
        )
        delivered = [
            PairOutcome(
                pair=pid,
                ok=result.provider_ok.get(pid, True) and result.consumer_ok.get(pid, True),
                generation=plan.pairs[pid]["generation"],
                reason=result.errors.get(pid, ""),
            )
            for pid in sorted(set(result.provider_ok) | set(result.consumer_ok))
            # a manifest carries every consumer of its provider: list only the ends that moved
            if pid in result.errors or was_behind(pid)
        ]
        rows = status_mod.statuses(inv)
        behind_now = {
            r.pair: r.reason
            for r in rows
            if (r.state is State.STALE and not r.withdrawn) or r.alarm
        }
        for node, why in unreachable.items():
            for r in rows:
                if node in (r.consumer_node, r.provider_node) and not r.withdrawn:
                    behind_now.setdefault(r.pair, f"{node} unreachable: {why}")
        inv.record(
            "push",
            [o.pair for o in delivered] + [o.pair for o in revoked],
            {
                "delivered": len(delivered),
                "revoked": len(revoked),
                "behind": len(behind_now),
                "unreachable": sorted(unreachable),
            },
            "ok" if not behind_now else "behind",
        )
        progress("done", 4, 4)
        return PushReport(delivered=delivered, withdrawn=revoked, behind=behind_now)


def revoke(ctl: Controller, agents: Agents, plan: Planner, pids: list[str]) -> list[PairOutcome]:
    """Consumers of withdrawn pairs try their last credential once; only a refusal deletes it."""
    by_node: dict[str, list[dict[str, Any]]] = {}
    for pid in pids:
        p = plan.pairs[pid]
        by_node.setdefault(node_of(p["consumer"]), []).append(
            {"pair": pid, "file": p["file"], "target": target_of(p, plan.nodes, plan.modules)}
        )
    if not by_node:
        return []
    answers = agents.call_many(wire.WITHDRAW, {n: {"consumer": i} for n, i in by_node.items()})
    out, probes, gone = [], [], []
    stamp = now()
    for node, items in by_node.items():
        answer = answers[node]
        got = (
            {}
            if isinstance(answer, AgentError)
            else {g["pair"]: g for g in answer.get("consumer", [])}
        )
        for item in items:
            pid = item["pair"]
            g = got.get(pid)
            if g is None:
                reason = answer.reason if isinstance(answer, AgentError) else "no answer"
                out.append(
                    PairOutcome(
                        pair=pid, ok=False, generation=plan.pairs[pid]["generation"], reason=reason
                    )
                )
                continue
            probe = g.get("probe")
            if g.get("removed") or probe is None:
                gone.append(pid)  # refused and deleted, or nothing was held any more
            verdict = probe["verdict"] if probe else "unknown"
            reason = probe["reason"] if probe else "no credential was held"
            if probe:
                probes.append(
                    probe_row(pid, plan.pairs[pid]["generation"], probe, stamp, withdrawn=True)
                )
            out.append(
                PairOutcome(
                    pair=pid,
                    ok=verdict == "refused",
                    generation=plan.pairs[pid]["generation"],
                    reason=f"{verdict}: {reason}",
                )
            )
    with ctl.inventory.transaction("record revocation probes") as db:
        if probes:
            db.table("probes").insert_all(probes)
        if gone:
            db.table("deliveries").delete_where(
                "pair IN ({}) AND \"end\" = 'consumer'".format(",".join("?" * len(gone))), gone
            )
    return out
