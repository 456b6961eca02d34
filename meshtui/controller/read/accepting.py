"""Which nodes do not (yet) accept a controller this one knows: ``doctor``'s part of adding a
controller. Each node says which controllers it accepts (its anchor read, answered signed by
its own key and without a controller key: a node that refuses this controller still says it);
a known controller (this one, or one in ``controllers/NAME.pub``) it does not list is named."""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from meshtui import crypto
from meshtui.controller.agents.client import AnchorRead, read_anchor_answer
from meshtui.controller.keys import Keyring
from meshtui.errors import AgentError
from meshtui.inventory.rows import NodeRow

READ_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class NotAccepted:
    """Node ``node`` does not accept controller ``name`` (whose key is ``fingerprint``);
    ``accepts`` says what it accepts instead."""

    node: str
    name: str
    fingerprint: str
    accepts: str


def _accepts(read: AnchorRead, name: str, fingerprint: str) -> bool:
    listed = read.controllers
    if listed is None:  # an agent of before named controllers: its pin is the one
        return read.controller == fingerprint
    return any(c["fingerprint"] == fingerprint and c["name"] in (None, name) for c in listed)


def _says(read: AnchorRead) -> str:
    listed = read.controllers or []
    if not listed or all(c["name"] is None for c in listed):
        pinned = listed[0]["fingerprint"] if listed else read.controller
        return f"it pins only controller key {pinned} (its policy names no controller)"
    names = ", ".join(f"{c['name']} ({c['fingerprint']})" for c in listed)
    return f"its policy names {names}"


def not_accepting(keys: Keyring, nodes: Mapping[str, NodeRow]) -> list[NotAccepted]:
    """Every (node, known controller) the node does not accept; nodes that cannot be read are
    left to the rest of ``doctor`` (it names them)."""

    def read(name: str) -> AnchorRead | None:
        try:
            return read_anchor_answer(nodes[name], timeout=READ_TIMEOUT_S)
        except AgentError:
            return None

    names = sorted(nodes)
    if not names or not keys.keys:
        return []
    with ThreadPoolExecutor(max_workers=min(8, len(names))) as pool:
        reads = dict(zip(names, pool.map(read, names), strict=True))
    out: list[NotAccepted] = []
    for node, got in reads.items():
        if got is None:
            continue
        for name, key in sorted(keys.keys.items()):
            fingerprint = crypto.PublicKeys(key).fingerprint()
            if not _accepts(got, name, fingerprint):
                out.append(NotAccepted(node, name, fingerprint, _says(got)))
    return out
