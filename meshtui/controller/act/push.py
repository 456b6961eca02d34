"""``meshtui push``: bring every end to the generation the inventory says it must hold.

It first asks every node what it holds (so a lost reply or a deleted file is noticed), and every
provider node what its server holds (the provisioner's read-only inspection, so a password
changed outside meshtui is noticed and re-applied), finishes or rolls back a rotation a dead
controller left journaled, delivers only what is behind (providers first, then consumers), and
revokes withdrawn pairs. Run twice, it changes nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING

from meshtui import crypto
from meshtui.controller.act.catchup import settle
from meshtui.controller.act.recording import (
    KEPT_FAILURES,
    Delivered,
    EndRow,
    held_generations,
    probe_row,
    record_end,
)
from meshtui.controller.act.sending import batches, node_batches, send_consumers, send_providers
from meshtui.controller.agents.client import STATE_TIMEOUT_S, Agents, by_pair, missing_reason
from meshtui.controller.lock import delivering
from meshtui.controller.plan.claims import own_inspections
from meshtui.controller.plan.claims import record as record_claims
from meshtui.controller.plan.planner import Planner, target_of
from meshtui.controller.plan.resolve import ask_state
from meshtui.controller.read import status as status_mod
from meshtui.controller.reports import Claim, PairOutcome, Progress, PushReport
from meshtui.errors import AgentError
from meshtui.inventory import Inventory, now
from meshtui.inventory.rows import HeldEnd, PairRow, ProbeRecord, Provision
from meshtui.model import Drift, End, State, Verdict, node_of
from meshtui.protocol import messages
from meshtui.protocol.messages import InspectSpec, StateRequest, WithdrawItem, WithdrawRequest

if TYPE_CHECKING:
    from meshtui.controller.reach import Reach


UNVERIFIED_HINT = (
    "the consumer's node must reach the provider and be refused: start its agent, and let the "
    "server answer its address (a pg_hba.conf line for it), then push again"
)
"""What push says to do about a withdrawn pair whose revocation was not verified."""


def push(ctl: Reach, progress: Progress) -> PushReport:
    """Converge every end; the report names who is still behind."""
    from meshtui.controller.act.rotate import recover

    inv = ctl.inventory
    with (
        delivering(ctl.state_dir, "push"),
        ctl.agents() as agents,
    ):
        recover(ctl, agents, progress)
        progress("asking every node what it holds", 0, 4)
        nodes = sorted(inv.nodes())
        resolutions, holdings = ask_state(agents, nodes)
        settled = settle(ctl, agents, nodes, resolutions, holdings, progress)
        resolutions, holdings = settled.resolutions, settled.holdings  # (and why, if doubted)
        ahead, unknown = settled.ahead, settled.unknown
        del settled  # its holdings are let go with ``holdings`` below
        unreachable = {r.node: r.reason for r in resolutions if not r.ok}
        # a drift still unrepaired keeps the time it was found; every end as a plain tuple
        # (generation, digest, since, error): as row dicts, 12 MiB per copy at 10,000 pairs
        found_before = {
            key: end
            for key, end in inv.held_ends().items()
            if end[3] and str(end[3]).startswith(status_mod.DRIFT)
        }  # only the ends a drift was found on: every end's tuple is ~400 bytes
        held_generations(inv, holdings)
        answered = sorted(set(holdings))
        # what the nodes hold, kept as the few facts push goes on with: every holding is a dict
        # of some 800 bytes (16 MiB at 10,000 pairs held at both ends)
        held_by_provider = {
            h["pair"] for hs in holdings.values() for h in hs if h["end"] == End.PROVIDER
        }
        held_by_consumer = {
            h["pair"] for hs in holdings.values() for h in hs if h["end"] == End.CONSUMER
        }
        held_connection = {
            h["pair"]: (h.get("connection"), h.get("connection_digest"))
            for hs in holdings.values()
            for h in hs
            if h["end"] == End.CONSUMER
        }
        del holdings
        # the whole mesh, read once the answers are recorded (and any end ahead rotated past
        # by settle): the holdings and every pair's row are never held at once
        plan = Planner(inv)
        provider_ends = {k: e for k, e in inv.held_ends().items() if k[1] == End.PROVIDER.value}
        claimed = [c for r in resolutions for c in r.claims]  # a node's word on others' ends
        drift = _drift(agents, plan, answered, provider_ends, found_before, claimed)
        del provider_ends
        del found_before
        claims = record_claims(inv, claimed)
        _record_drift(inv, plan, drift)
        deliveries = inv.held_ends()
        # what each end held before this push: its generation and whether its last delivery
        # failed after all, not the rows (the next read replaces ``deliveries``)
        before = {
            key: (d[0], str(d[3] or "").startswith(KEPT_FAILURES)) for key, d in deliveries.items()
        }

        def was_behind(pid: str) -> bool:
            want = plan.pairs[pid]["generation"]
            ends = [before.get((pid, end.value)) for end in End]
            return (
                any((e[0] if e else None) != want for e in ends)
                or any(e[1] for e in ends if e)
                or connection_differs(pid)
            )

        def short(pid: str, end: End) -> bool:
            d = deliveries.get((pid, end.value))
            return d is None or d[0] != plan.pairs[pid]["generation"]

        def connection_differs(pid: str) -> bool:
            """The declared connection file is not what the consumer's agent last wrote."""
            want = plan.connection(pid)
            if want is None:
                return False
            held = held_connection.get(pid)
            digest = crypto.secret_digest(want["text"].encode("utf-8"))
            return held is None or held != (want["file"], digest)

        def behind(pid: str, end: End) -> bool:
            if short(pid, end):
                return True
            if end is End.CONSUMER and connection_differs(pid):
                return True
            # a reload or a pin that failed: the end holds the credential, not all it should
            d = deliveries.get((pid, end.value))
            return d is not None and str(d[3] or "").startswith(KEPT_FAILURES)

        live = [p for p in plan.pairs.values() if not p["withdrawn_at"]]
        withdrawn = [p for p in plan.pairs.values() if p["withdrawn_at"]]
        sets_needed = {
            (p["provider"], p["provision"]) for p in live if behind(p["id"], End.PROVIDER)
        }
        sets_needed |= {
            (p["provider"], p["provision"]) for p in withdrawn if p["id"] in held_by_provider
        }
        sets_needed |= {
            (plan.pairs[pid]["provider"], plan.pairs[pid]["provision"]) for pid in drift
        }
        result = Delivered()
        progress("delivering to providers", 1, 4)
        # a batch of provider nodes at a time, each batch's manifests let go once sent (every
        # provider's manifest at once, sealed secrets and all, was 14 MiB at 10,000 pairs)
        for keys in _provider_batches(sets_needed, live):
            sets = plan.provider_sets(keys, {})
            reached = {n: s for n, s in sets.items() if n not in unreachable}
            send_providers(agents, inv, reached, result)
            for node in set(sets) & set(unreachable):
                for spec in sets[node]:
                    for c in spec["consumers"]:
                        result.fail(c["pair"], f"provider {node}: {unreachable[node]}")
            del sets, reached
        _record_repairs(inv, plan, drift, result)
        deliveries = inv.held_ends()
        progress("delivering to consumers", 2, 4)
        # a consumer never moves ahead of its provider: it would hold a password nobody accepts
        todo = [
            p["id"]
            for p in live
            if behind(p["id"], End.CONSUMER)
            and not short(p["id"], End.PROVIDER)
            and node_of(p["consumer"]) not in unreachable
        ]
        for p in live:
            if behind(p["id"], End.CONSUMER) and short(p["id"], End.PROVIDER):
                result.fail(p["id"], "consumer waits until its provider holds the generation")
        for batch in node_batches(todo, lambda pid: node_of(plan.pairs[pid]["consumer"])):
            send_consumers(agents, inv, plan.consumer_items(batch, {}), result)
        progress("revoking withdrawn pairs", 3, 4)
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
                ok=result.provider_ok.get(pid, True)
                and result.consumer_ok.get(pid, True)
                and pid not in result.errors,
                generation=plan.pairs[pid]["generation"],
                reason=result.errors.get(pid, "")
                or (f"re-applied: {drift[pid]}" if pid in drift else ""),
            )
            for pid in sorted(set(result.provider_ok) | set(result.consumer_ok))
            # a manifest carries every consumer of its provider: list only the ends that moved
            if pid in result.errors or was_behind(pid) or pid in drift
        ]
        rows = status_mod.statuses(inv)
        by_probe = {  # every end holds its generation; only the last probe says otherwise
            r.pair: r.reason
            for r in rows
            if r.state is State.STALE
            and not r.withdrawn
            and not r.alarm
            and r.reason.startswith((status_mod.PROBE_REFUSED, status_mod.PROBE_UNDECIDED))
        }
        behind_now = {
            r.pair: r.reason
            for r in rows
            if ((r.state is State.STALE and not r.withdrawn) or r.alarm) and r.pair not in by_probe
        }
        # a withdrawal whose refusal was not seen is not done: the old login may still work
        behind_now |= {
            r.pair: f"{r.reason} ({UNVERIFIED_HINT})"
            for r in rows
            if r.withdrawn and r.state is State.STALE and not r.alarm
        }
        behind_now.update(unknown)  # held by nodes, unknown here: not in agreement
        cut_off: set[str] = set()  # not known behind: only a node of theirs did not answer
        for node, why in unreachable.items():
            for r in rows:
                if node in (r.consumer_node, r.provider_node) and not r.withdrawn:
                    said, down = behind_now.get(r.pair), f"{node} unreachable: {why}"
                    if said is None or r.pair in cut_off:
                        cut_off.add(r.pair)
                    behind_now[r.pair] = down if said is None else f"{said}; {down}"
        inv.record(
            "push",
            [o.pair for o in delivered] + [o.pair for o in revoked],
            {
                "delivered": len(delivered),
                "revoked": len(revoked),
                "behind": len(behind_now),
                "unreachable": sorted(unreachable),
                "changed_outside": sorted(drift),
                "ahead": sorted(ahead),
            },
            "ok" if not behind_now else "behind",
        )
        progress("done", 4, 4)
        return PushReport(
            delivered=delivered,
            withdrawn=revoked,
            behind=behind_now,
            ahead=ahead,
            unreachable=sorted(cut_off),
            stale_by_probe=by_probe,
            claims=claims,
        )


def _provider_batches(needed: set[Provision], live: list[PairRow]) -> list[list[Provision]]:
    """The provisions to deliver whole, in :func:`batches` of provider nodes (each node's
    size: the live consumers of its provisions, one line of a manifest each)."""
    counts = Counter((p["provider"], p["provision"]) for p in live)
    by_node: dict[str, list[Provision]] = {}
    for key in sorted(needed):
        by_node.setdefault(node_of(key[0]), []).append(key)
    sizes = {node: sum(counts[k] for k in keys) for node, keys in by_node.items()}
    return [[k for node in nodes for k in by_node[node]] for nodes in batches(sizes)]


def _held(end: HeldEnd | None) -> int | None:
    """The generation an end's row says it holds (None: no row, or never delivered)."""
    return end[0] if end else None


def _drift(
    agents: Agents,
    plan: Planner,
    answered: list[str],
    deliveries: Mapping[tuple[str, str], HeldEnd],
    found_before: Mapping[tuple[str, str], HeldEnd],
    claims: list[Claim],
) -> dict[str, str]:
    """pair id -> what a provider's server was found holding instead of what meshtui delivered.

    Asks each provider node that answered for its provisioner's read-only inspection of every
    live manifest it serves; a login its server no longer holds as delivered (password, login
    right, record or database changed, or the login gone) is drift, stamped with the time.
    Only ends recorded as holding their generation count: one still behind is delivered anyway.
    A node's inspection of a server that is not its own is added to ``claims``, not believed.
    """
    specs: dict[str, list[InspectSpec]] = {}
    by_login: dict[tuple[str, str, str], str] = {}
    for p in plan.pairs.values():
        if (
            p["withdrawn_at"]
            or node_of(p["provider"]) not in answered
            or _held(deliveries.get((p["id"], End.PROVIDER.value))) != p["generation"]
        ):
            continue
        by_login[(p["provider"], p["provision"], p["login"])] = p["id"]
        spec = plan.modules[p["provider"]]["spec"]
        key: InspectSpec = {
            "provider": p["provider"],
            "provision": p["provision"],
            "receives": spec["receives"][p["provision"]],
            "admin": spec.get("admin"),
            "provisioner": spec.get("provisioner"),
        }
        wanted = specs.setdefault(node_of(p["provider"]), [])
        if key not in wanted:
            wanted.append(key)
    if not specs:
        return {}
    answers = agents.call_many(
        messages.STATE,
        {n: StateRequest(inspect=s) for n, s in specs.items()},
        timeout=STATE_TIMEOUT_S,
    )
    stamp = now()
    out: dict[str, str] = {}
    for node, answer in answers.items():
        if isinstance(answer, AgentError):
            continue  # unreachable now: the delivery round reports it
        inspected, foreign = own_inspections(node, answer.get("inspected", []))
        claims.extend(foreign)
        for got in inspected:  # none: nothing was asked of that node
            for found in got["logins"]:
                pid = by_login.get((got["provider"], got["provision"], found["login"]))
                if pid is not None and found["verdict"] in (Drift.CHANGED, Drift.MISSING):
                    before = found_before.get((pid, End.PROVIDER.value))
                    earlier = before[3] if before else None
                    if earlier and str(earlier).startswith(status_mod.DRIFT):
                        out[pid] = str(earlier).split("; ", 1)[0]
                    else:
                        why = found["reason"] or "gone"
                        out[pid] = f"{status_mod.DRIFT}{stamp} ({why})"
    return out


def _record_drift(inv: Inventory, plan: Planner, drift: dict[str, str]) -> None:
    """The provider end of each drifted pair is behind until re-applied: record why."""
    record_end(inv, [(pid, End.PROVIDER, None, None, why) for pid, why in drift.items()])


def _record_repairs(
    inv: Inventory, plan: Planner, drift: dict[str, str], result: Delivered
) -> None:
    """Keep the drift's time in the provider end's row: repaired (a note) or still failing."""
    rows: list[EndRow] = []
    ends = inv.held_ends(list(drift)) if drift else {}
    for pid, why in drift.items():
        if result.provider_ok.get(pid):
            gen = plan.pairs[pid]["generation"]
            held = ends.get((pid, End.PROVIDER.value))
            digest = held[1] if held else None
            rows.append((pid, End.PROVIDER, gen, digest, f"{status_mod.REPAIRED}{why}"))
        else:
            failed = result.errors.get(pid, "not re-applied")
            rows.append((pid, End.PROVIDER, None, None, f"{why}; {failed}"))
    record_end(inv, rows)


def revoke(ctl: Reach, agents: Agents, plan: Planner, pids: list[str]) -> list[PairOutcome]:
    """Consumers of withdrawn pairs try their last credential once; only a refusal deletes it."""
    by_node: dict[str, list[WithdrawItem]] = {}
    for pid in pids:
        p = plan.pairs[pid]
        by_node.setdefault(node_of(p["consumer"]), []).append(
            WithdrawItem(pair=pid, file=p["file"], target=target_of(p, plan.nodes, plan.modules))
        )
    if not by_node:
        return []
    answers = agents.call_many(
        messages.WITHDRAW, {n: WithdrawRequest(consumer=i) for n, i in by_node.items()}
    )
    out: list[PairOutcome] = []
    probes: list[ProbeRecord] = []
    gone: list[str] = []
    stamp = now()
    for node, items in by_node.items():
        answer = answers[node]
        got = by_pair(answer, lambda a: a["consumer"])
        for item in items:
            pid = item["pair"]
            g = got.get(pid)
            if g is None:
                reason = missing_reason(answer, None, "no answer")
                out.append(
                    PairOutcome(
                        pair=pid, ok=False, generation=plan.pairs[pid]["generation"], reason=reason
                    )
                )
                continue
            probe = g["probe"]
            if g["removed"] or probe is None:
                gone.append(pid)  # refused and deleted, or nothing was held any more
            verdict = probe["verdict"] if probe else Verdict.UNKNOWN
            reason = probe["reason"] if probe else "no credential was held"
            if probe:
                probes.append(
                    probe_row(pid, plan.pairs[pid]["generation"], probe, stamp, withdrawn=True)
                )
            out.append(
                PairOutcome(
                    pair=pid,
                    ok=verdict == Verdict.REFUSED,
                    generation=plan.pairs[pid]["generation"],
                    reason=f"{verdict}: {reason}",
                )
            )
    with ctl.inventory.transaction("record revocation probes") as tx:
        tx.add_probes(probes)
        tx.forget_consumer_ends(gone)
    return out
