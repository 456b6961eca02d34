"""Ends *ahead* of the inventory, found by ``push`` and brought back to one generation.

After a restore (or an older inventory put back) the nodes may hold generations the inventory
never knew: a digest it has no generation for, at a number at or above its own. Delivering the
inventory's generation would be refused by every such node (it never goes back), and calling
the pair in agreement would be a lie. So ``push`` names each end that is ahead, pair by pair, and
in the same command rotates those pairs to a fresh generation above everything any end holds:
minted, journaled and delivered all-or-nothing like any rotation (:mod:`controller.rotate`),
after which inventory and ends agree again and the next probe proves it.

A node that refuses the controller's requests as older than what it accepted (a controller whose
sequence fell behind, one restored on a machine whose clock is behind) is read without a key for
its highest accepted number, and the sequence jumps past it before it is asked again.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from meshtui.controller.act import sending
from meshtui.controller.act.rotate import Handover, execute, mint, payloads, store
from meshtui.controller.agents.client import DOUBTED, read_anchor_answer
from meshtui.controller.plan.resolve import ask_state
from meshtui.controller.reports import Progress, Resolution, RotationReport
from meshtui.errors import AgentError
from meshtui.inventory import Inventory
from meshtui.model import RotationState, node_of
from meshtui.protocol.messages import Holding

if TYPE_CHECKING:
    from meshtui.controller.agents.client import Agents
    from meshtui.controller.reach import Reach

REFUSED_AS_OLDER = ("older than the requests this agent already accepted", "replayed request")
"""What an agent says when it refuses a request number (:mod:`meshtui.host.state.guard`)."""


@dataclass(frozen=True)
class AheadEnd:
    """One end holding a generation the inventory does not know, at or above its own."""

    pair: str
    end: str
    node: str
    held: int
    known: int

    def describe(self) -> str:
        """One phrase: who holds what, against what the inventory knew."""
        return f"{self.node} ({self.end} end) holds generation {self.held}"


def find_ahead(inv: Inventory, holdings: Mapping[str, list[Holding]]) -> dict[str, list[AheadEnd]]:
    """pair -> its ends that are ahead: a digest the inventory has no generation for, at a
    number at or above the pair's current one (a lower unknown one is merely behind, and the
    ordinary delivery repairs it)."""
    pairs = {p["id"]: p for p in inv.pairs() if not p["withdrawn_at"]}
    digests = inv.generation_by_digest()
    out: dict[str, list[AheadEnd]] = {}
    for node, held in sorted(holdings.items()):
        for h in held:
            p = pairs.get(h["pair"])
            if p is None or (h["pair"], h["digest"]) in digests:
                continue
            if h["generation"] >= p["generation"]:
                end = AheadEnd(h["pair"], str(h["end"]), node, h["generation"], p["generation"])
                out.setdefault(h["pair"], []).append(end)
    return out


def unknown_pairs(inv: Inventory, holdings: Mapping[str, list[Holding]]) -> dict[str, str]:
    """pair -> what push says about a pair the nodes hold that this inventory has no record of
    at all (declared after the backup was taken): the ends that hold it, and what to do."""
    known = {p["id"] for p in inv.pairs()}
    held: dict[str, list[str]] = {}
    for node, ends in sorted(holdings.items()):
        for h in ends:
            if h["pair"] not in known:
                held.setdefault(h["pair"], []).append(f"{node} ({h['end']} end)")
    return {
        pid: f"held by {', '.join(where)} but not in this inventory (declared after the "
        "backup?): declare the current declaration, then push again"
        for pid, where in sorted(held.items())
    }


def summary(ahead: Mapping[str, list[AheadEnd]], report: RotationReport | None) -> dict[str, str]:
    """pair -> what push says about it: which ends were ahead, and where it is now."""
    done = {o.pair: o for o in report.pairs} if report is not None else {}
    out: dict[str, str] = {}
    for pid, ends in sorted(ahead.items()):
        line = "; ".join(e.describe() for e in ends)
        line += f"; the inventory knew generation {ends[0].known}"
        o = done.get(pid)
        if o is not None and o.ok:
            line += f": rotated to generation {o.generation} on both ends"
        elif o is not None:
            line += f": NOT brought back ({o.reason or 'rolled back'}); push again"
        out[pid] = line
    return out


def catch_up(
    ctl: Reach, agents: Agents, ahead: Mapping[str, list[AheadEnd]], progress: Progress
) -> RotationReport:
    """Rotate every pair with an end ahead to one fresh generation above all its ends hold,
    all-or-nothing (journaled first; a failure rolls back and leaves push reporting it)."""
    inv = ctl.inventory
    minted = mint(
        ctl,
        inv.pairs(sorted(ahead)),
        held={pid: max(e.held for e in ends) for pid, ends in ahead.items()},
    )
    items = minted.items
    inv.record(
        "ahead",
        sorted(ahead),
        {
            pid: {e.node: {"end": e.end, "held": e.held, "known": e.known} for e in ends}
            for pid, ends in ahead.items()
        },
        "found",
    )
    progress(
        f"{len(items)} pairs ahead of the inventory: rotating them to a fresh generation", 0, 4
    )
    # a large one is built from its journal and sent in batches, as a large rotation is
    forward = (
        payloads(inv, items, "to", minted.generations) if len(items) <= sending.BATCH else None
    )
    rotation = store(ctl, minted, RotationState.DELIVERING)
    handover = Handover(forward)
    return execute(ctl, agents, rotation, progress, handover=handover)


def refused_as_older(resolutions: list[Resolution]) -> list[str]:
    """The nodes that refused a request only because of its number."""
    return [
        r.node for r in resolutions if not r.ok and any(w in r.reason for w in REFUSED_AS_OLDER)
    ]


def jump_past(ctl: Reach, nodes: list[str], doubted: dict[str, str] | None = None) -> int:
    """Read each node's highest accepted request number (without a key) and make the
    controller's sequence jump past the highest; returns it (0: none read). ``doubted`` gets
    each node whose number is not believed (:func:`client.read_anchor_answer`) and why."""
    rows = ctl.inventory.nodes()

    def one(name: str) -> int:
        try:
            return read_anchor_answer(rows[name]).accepted or 0
        except AgentError as exc:
            if doubted is not None and exc.reason.startswith(DOUBTED):
                doubted[name] = exc.reason
            return 0

    if not nodes:
        return 0
    with ThreadPoolExecutor(max_workers=min(8, len(nodes))) as pool:
        highest = max(pool.map(one, nodes), default=0)
    if highest:
        ctl.sequence.jump_past(highest)
        ctl.inventory.record("sequence-jump", [], {"nodes": sorted(nodes), "past": highest}, "ok")
    return highest


@dataclass(frozen=True)
class Settled:
    """What push goes on with: the nodes' answers (asked again when anything changed), and
    pair -> what was ahead and what became of it."""

    resolutions: list[Resolution]
    holdings: dict[str, list[Holding]]
    ahead: dict[str, str]
    changed: bool
    unknown: dict[str, str] = field(default_factory=dict)  # pairs the inventory lacks


def settle(
    ctl: Reach,
    agents: Agents,
    nodes: list[str],
    resolutions: list[Resolution],
    holdings: dict[str, list[Holding]],
    progress: Progress,
) -> Settled:
    """Before push delivers anything: jump the sequence past nodes that refused it as older,
    then find the ends ahead of the inventory and rotate their pairs past them."""

    changed = False
    older = refused_as_older(resolutions)
    doubted: dict[str, str] = {}
    if older and jump_past(ctl, older, doubted):
        resolutions, holdings = ask_state(agents, nodes)
        changed = True
    if doubted:  # say why the number was not followed, not only that it was refused
        resolutions = [
            Resolution(r.node, r.ok, doubted[r.node], r.pairs) if r.node in doubted else r
            for r in resolutions
        ]
    unknown = unknown_pairs(ctl.inventory, holdings)
    ahead = find_ahead(ctl.inventory, holdings)
    if not ahead:
        return Settled(resolutions, holdings, dict(unknown), changed, unknown)
    down = {r.node: r.reason for r in resolutions if not r.ok}
    waiting = {pid: ends for pid, ends in ahead.items() if _ends_of(ctl, pid) & set(down)}
    ready = {pid: ends for pid, ends in ahead.items() if pid not in waiting}
    report = catch_up(ctl, agents, ready, progress) if ready else None
    said = summary(ready, report)
    for pid, line in summary(waiting, None).items():
        gone = sorted(_ends_of(ctl, pid) & set(down))
        said[pid] = f"{line}: not rotated yet, {', '.join(gone)} did not answer (push again)"
    said.update(unknown)
    if report is None:
        return Settled(resolutions, holdings, said, changed, unknown)
    resolutions, holdings = ask_state(agents, nodes)
    return Settled(resolutions, holdings, said, True, unknown)


def _ends_of(ctl: Reach, pid: str) -> set[str]:
    """The two nodes of a pair."""
    (p,) = ctl.inventory.pairs([pid])
    return {node_of(p["consumer"]), node_of(p["provider"])}
