"""A node speaks only for its own ends: what its answer says of any other end is a claim.

A node's signature proves who answered, not that what it says is its to say. A pair's consumer
end is its consumer module's node and its provider end its provider module's node, as the pair's
id says (the inventory's key: ``database:app1/gitea->db1/postgres``); a holding, an inspection
or a probe result a node reports for an end that is not its own is never believed (no
generation recorded, no rotation past it, no delivery again), only named: push says which node
claimed what, and the audit log keeps it as a ``claim`` event.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TypeVar

from meshtui.controller.reports import Claim
from meshtui.inventory import Inventory
from meshtui.model import End, node_of, split_pair_id
from meshtui.protocol.messages import Holding, Inspection

CLAIM = "claim"
"""The audit event's kind."""

Item = TypeVar("Item", bound=Mapping[str, object])


def end_node(pair: str, end: str) -> str | None:
    """The node the pair's id assigns ``end`` to (None: not a pair id, or not an end)."""
    try:
        _, consumer, provider = split_pair_id(pair)
    except ValueError:
        return None
    if end == End.CONSUMER.value:
        return node_of(consumer)
    if end == End.PROVIDER.value:
        return node_of(provider)
    return None


def own_holdings(node: str, held: Iterable[Holding]) -> tuple[list[Holding], list[Claim]]:
    """The holdings ``node`` reported for its own ends; the rest as claims."""
    kept: list[Holding] = []
    claims: list[Claim] = []
    for h in held:
        if end_node(h["pair"], str(h["end"])) == node:
            kept.append(h)
        else:
            claims.append(Claim(node, h["pair"], str(h["end"])))
    return kept, claims


def own_inspections(
    node: str, inspected: Iterable[Inspection]
) -> tuple[list[Inspection], list[Claim]]:
    """The inspections ``node`` made of its own provider modules' servers; the rest as claims."""
    kept: list[Inspection] = []
    claims: list[Claim] = []
    for got in inspected:
        if "/" in got["provider"] and node_of(got["provider"]) == node:
            kept.append(got)
        else:
            what = f"{got['provision']} of {got['provider']}"
            claims.append(Claim(node, what, End.PROVIDER.value))
    return kept, claims


def asked_only(
    node: str, asked: Iterable[str], items: Iterable[Item], end: End
) -> tuple[dict[str, Item], list[Claim]]:
    """A node's per-pair answers (probes, deliveries, withdrawals) by pair, only for the pairs
    it was asked about (each one of its own ends); an answer for any other pair as a claim."""
    wanted = set(asked)
    kept: dict[str, Item] = {}
    claims: list[Claim] = []
    for item in items:
        pair = str(item["pair"])
        if pair in wanted:
            kept[pair] = item
        else:
            claims.append(Claim(node, pair, end.value))
    return kept, claims


SHOWN = 10
"""Claims named one by one per node in the audit and push's output; past these, a count."""


def record(inv: Inventory, claims: Iterable[Claim]) -> dict[str, str]:
    """Name every claim in the audit log (one ``claim`` event); node -> what it claimed."""
    said: dict[str, list[str]] = {}
    pairs: set[str] = set()
    for c in claims:
        said.setdefault(c.node, []).append(c.describe())
        if end_node(c.pair, End.CONSUMER.value) is not None:
            pairs.add(c.pair)
    if not said:
        return {}
    lines = {
        node: got[:SHOWN] + ([f"and {len(got) - SHOWN} more"] if len(got) > SHOWN else [])
        for node, got in sorted(said.items())
    }
    inv.record(CLAIM, sorted(pairs)[: SHOWN * len(lines)], lines, "refused")
    return {node: "; ".join(got) for node, got in lines.items()}
