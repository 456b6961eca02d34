"""Checking the audit chain against the heads the nodes keep: a wiped or cut log is caught.

Every agent keeps the longest controller-signed audit head it was shown. Here each reachable
node is asked for it (an unsigned read: no key is needed, so a read-only controller can do it),
and the inventory's chain must hold that very event: an inventory shorter than what a node saw,
or holding another event at that number, fails, naming the node. A node that was offline keeps
an older head, which the chain still holds: that is fine.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field

from meshtui.controller.agents.client import AnchorRead, read_anchor_answer
from meshtui.errors import AgentError
from meshtui.freeform import JsonObject
from meshtui.inventory import Inventory
from meshtui.inventory.rows import NodeRow
from meshtui.protocol import wire

ANCHOR_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class NodeAnchor:
    """What one node's kept head says about the inventory's chain."""

    node: str
    verdict: str  # agrees, restored, ahead, diverges, forged, none, unreachable
    reason: str
    seq: int | None = None

    @property
    def disagrees(self) -> bool:
        """True when this node proves the inventory's chain was cut, wiped or rewritten."""
        return self.verdict in ("ahead", "diverges", "forged")


@dataclass(frozen=True)
class AnchorCheck:
    """Every node's verdict; ``ok`` unless one of them disagrees with the inventory."""

    nodes: list[NodeAnchor] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No node saw a head the inventory's chain does not hold."""
        return not self.disagreeing

    @property
    def disagreeing(self) -> list[str]:
        """The nodes whose kept head the inventory contradicts."""
        return [n.node for n in self.nodes if n.disagrees]

    @property
    def answered(self) -> list[str]:
        """The nodes that answered."""
        return [n.node for n in self.nodes if n.verdict != "unreachable"]

    def to_json(self) -> JsonObject:
        """The check as plain JSON."""
        return {
            "ok": self.ok,
            "disagreeing": self.disagreeing,
            "nodes": [asdict(n) for n in self.nodes],
        }


def judge(
    inv: Inventory,
    node: str,
    head: wire.SignedHead | None,
    key: bytes | None,
    history: list[wire.SignedHead] | None = None,
) -> NodeAnchor:
    """One node's kept head (and the heads it kept before a restore) against the chain."""
    verdict = _judge(inv, node, head, key)
    if verdict.verdict == "ahead" and head is not None:
        explained = _told_at_restore(inv, node, head)
        if explained is not None:
            return NodeAnchor(node, "restored", explained, head.seq)
    if verdict.verdict == "agrees" and head is not None and head.restore is not None:
        before = ", ".join(str(h.seq) for h in history or []) or "nothing past the backup"
        r = head.restore
        return NodeAnchor(
            node,
            "agrees",
            f"{verdict.reason}; it took the restore at event {r.seq} (a backup holding events "
            f"1..{r.base_seq}, taken {r.taken_at}); before it, it had seen up to event {before}",
            head.seq,
        )
    return verdict


def _told_at_restore(inv: Inventory, node: str, head: wire.SignedHead) -> str | None:
    """Why ``head`` (past the chain's end) is the gap a restore recorded for ``node``, or None."""
    for event in reversed(inv.events()):
        if event["kind"] != "restore":
            continue
        seen = event["detail"].get("nodes", {})
        mine = seen.get(node) if isinstance(seen, dict) else None
        if isinstance(mine, dict) and (mine.get("seen_seq"), mine.get("seen_hash")) == (
            head.seq,
            head.hash,
        ):
            return (
                f"keeps event {head.seq} of the chain before the restore at event "
                f"{event['seq']}, as that restore recorded (the gap); it takes the restored "
                "chain with the next request (meshtui push)"
            )
    return None


def _judge(
    inv: Inventory, node: str, head: wire.SignedHead | None, key: bytes | None
) -> NodeAnchor:
    """One node's kept head against the inventory's chain, as it stands."""
    if head is None:
        return NodeAnchor(node, "none", "keeps no audit head yet (never shown one)")
    if key is not None and not head.verifies(key):
        return NodeAnchor(
            node,
            "forged",
            f"keeps a head (event {head.seq}) not signed by the controller key: "
            "the node's state was tampered with, or it pins another controller",
            head.seq,
        )
    stored = inv.event_hash_at(head.seq)
    if stored is None:
        last = inv.last_seq()
        return NodeAnchor(
            node,
            "ahead",
            f"saw the chain at event {head.seq}, but the inventory's chain ends at event {last}: "
            "events were deleted (a wipe, or an older copy of the inventory)",
            head.seq,
        )
    if stored != head.hash:
        return NodeAnchor(
            node,
            "diverges",
            f"saw another event {head.seq} than the inventory holds: the chain was rewritten "
            "(or an older copy of the inventory was used and went on)",
            head.seq,
        )
    return NodeAnchor(node, "agrees", f"saw the chain at event {head.seq}; it is there", head.seq)


def check_anchors(inv: Inventory, nodes: Mapping[str, NodeRow], key: bytes | None) -> AnchorCheck:
    """Ask every node (in parallel) for its kept head and judge each against ``inv``."""

    def ask(name: str) -> NodeAnchor:
        try:
            got: AnchorRead = read_anchor_answer(nodes[name], timeout=ANCHOR_TIMEOUT_S)
        except AgentError as exc:
            return NodeAnchor(name, "unreachable", f"not asked: {exc.reason}")
        return judge(inv, name, got.head, key, got.history)

    names = sorted(nodes)
    if not names:
        return AnchorCheck()
    with ThreadPoolExecutor(max_workers=min(8, len(names))) as pool:
        return AnchorCheck(nodes=list(pool.map(ask, names)))
