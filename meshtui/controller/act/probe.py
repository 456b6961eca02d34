"""``meshtui probe``: live logins from each consumer's node with the credential it holds.

The controller only asks; the consumer's agent logs in over the private network, with a
negative control, and signs the result. Results are stored per pair with the generation the
node actually held (found by digest), which is what makes a pair working, stale or revoked.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from meshtui.controller.act import own_secrets
from meshtui.controller.act.recording import files_unlike, probe_row
from meshtui.controller.agents.client import AgentClient
from meshtui.controller.plan.claims import asked_only
from meshtui.controller.plan.claims import record as record_claims
from meshtui.controller.plan.planner import Planner
from meshtui.controller.plan.resolve import ask_state
from meshtui.controller.read.secret_states import declared
from meshtui.controller.reports import Claim, ProbeOutcome, Progress
from meshtui.errors import AgentError
from meshtui.inventory import now
from meshtui.model import End, node_of
from meshtui.protocol import messages
from meshtui.protocol.messages import ProbeAnswer, ProbedPair, ProbeItem, ProbeReport, ProbeRequest

if TYPE_CHECKING:
    from meshtui.controller.reach import Reach

CONCURRENCY = 8
PROBE_LOGIN_TIMEOUT_S = 5.0  # the agent's per-login timeout; a probe is at most two logins


def probe(ctl: Reach, ids: list[str], progress: Progress) -> list[ProbeOutcome]:
    """Probe the live pairs among ``ids``; store and return each outcome."""
    inv = ctl.inventory
    plan = Planner(inv)
    live = [pid for pid in ids if not plan.pairs[pid]["withdrawn_at"]]
    by_node: dict[str, list[ProbeItem]] = {}
    for pid in live:
        p = plan.pairs[pid]
        by_node.setdefault(node_of(p["consumer"]), []).append(
            ProbeItem(pair=pid, file=p["file"], **plan.target(pid))
        )
    gen_of = inv.generation_by_digest()
    unlike: dict[str, tuple[int, str, list[str]]] = {}  # files not as written: push repairs
    total, done = len(live), 0
    rows, out = [], []
    progress(f"probing {total} pairs", 0, total)
    keys = ctl.keys()

    def ask(node: str) -> tuple[str, str, ProbeAnswer | AgentError]:
        """One node's probes; nodes are asked in parallel, each bounds its own logins."""
        items = by_node[node]
        client = AgentClient(
            plan.nodes[node],
            keys,
            timeout=15.0 + 2 * PROBE_LOGIN_TIMEOUT_S * -(-len(items) // CONCURRENCY),
            sequence=ctl.sequence,
            head=ctl.inventory.signed_head,
            fence=lambda: ctl.fence,
        )
        try:
            return (
                node,
                now(),
                client.call(messages.PROBE, ProbeRequest(targets=items, concurrency=CONCURRENCY)),
            )
        except AgentError as exc:
            return node, now(), exc
        finally:
            client.close()

    with ThreadPoolExecutor(max_workers=max(1, min(8, len(by_node)))) as pool:
        answers = list(pool.map(ask, sorted(by_node)))
    claimed: list[Claim] = []
    for node, stamp, answer in answers:
        items = by_node[node]
        got: dict[str, ProbedPair] = {}
        if not isinstance(answer, AgentError):  # a verdict only for a pair it was asked about
            got, foreign = asked_only(
                node, (i["pair"] for i in items), answer["results"], End.CONSUMER
            )
            claimed.extend(foreign)
        for item in items:
            pid = item["pair"]
            r = got.get(pid)
            result: ProbeReport | None = r["result"] if r else None
            digest = r["digest"] if r else None
            generation = gen_of.get((pid, digest)) if digest is not None else None
            if r is not None and r.get("unlike") and generation and digest is not None:
                unlike[pid] = (generation, digest, r["unlike"])
            if result is None:
                reason = (
                    f"consumer's node {node} unreachable: {answer.reason}"
                    if isinstance(answer, AgentError)
                    else (r.get("error") if r else None) or "no result"
                )
                rows.append(probe_row(pid, generation or 0, reason, stamp, withdrawn=False))
                out.append(ProbeOutcome(pid, "unknown", reason, None, False))
                continue
            rows.append(probe_row(pid, generation or 0, result, stamp, withdrawn=False))
            out.append(
                ProbeOutcome(
                    pair=pid,
                    verdict=result["verdict"],
                    reason=result["reason"],
                    latency_ms=result["login"]["latency_ms"],
                    loopback=result["loopback"],
                )
            )
        done += len(items)
        progress(f"probed {done} of {total}", done, total)
    files_unlike(inv, unlike)
    _look_at_providers(ctl, plan, live, gen_of)

    probed = set(live)
    if mine := [d for d in declared(inv) if d.pair and d.pair["id"] in probed]:
        with ctl.agents() as agents:
            own_secrets.look_at_files(inv, agents, mine)
    if rows:
        with inv.transaction("probe") as tx:
            tx.add_probes(rows)
            counts: dict[str, int] = {}
            for o in out:
                counts[o.verdict] = counts.get(o.verdict, 0) + 1
            tx.audit("probe", live, {"verdicts": counts}, "ok")
    record_claims(inv, claimed)
    return out


def _look_at_providers(
    ctl: Reach, plan: Planner, live: list[str], gen_of: dict[tuple[str, str], int]
) -> None:
    """Ask the probed pairs' provider nodes what they hold: a provider's secret file found not
    as written (changed by hand, world-readable) makes its end behind, with why, as push would
    find it (push writes it again)."""

    nodes = sorted({node_of(plan.pairs[pid]["provider"]) for pid in live})
    if not nodes:
        return
    with ctl.agents(nodes={n: plan.nodes[n] for n in nodes}) as agents:
        _, holdings = ask_state(agents, nodes)
    wanted = set(live)
    found: dict[str, tuple[int, str, list[str]]] = {}
    for held in holdings.values():
        for h in held:
            gen = gen_of.get((h["pair"], h["digest"]))
            if h["end"] != End.PROVIDER or h["pair"] not in wanted or not gen:
                continue
            why = h.get("unlike") or ([h["error"]] if h.get("error") else [])
            if not why and not h.get("present", True):
                why = [f"{h.get('file')} does not hold the credential delivered"]
            if why:
                found[h["pair"]] = (gen, h["digest"], why)
    files_unlike(ctl.inventory, found, End.PROVIDER)
