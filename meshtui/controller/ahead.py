"""The consumers' half of a rotation, made ready while its providers apply.

Between a provider applying a new credential and its consumer holding it, the consumer cannot
log in: that window should hold only what must happen in it. So while the providers work, each
consumer node writes its new credentials ahead under no name (``prepare``: nothing is held yet),
and the deliveries that will name them are numbered and signed. Once the providers have
applied, the consumers' delivery is sent as signed and each credential is one rename away.

Nothing here decides anything: a consumer that could not prepare (an older agent, a full disk)
has its credential written in full by the same delivery, and one prepared but never delivered
(the rotation rolled back) is let go by its node.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import wait

from meshtui import messages
from meshtui.controller.client import Agents, SignedRequest
from meshtui.errors import AgentError
from meshtui.messages import ConsumerItem, DeliverRequest, PrepareRequest

PREPARE_TIMEOUT_S = 10.0
"""How long a consumer's prepare may take before its delivery is sent without waiting."""


class Ahead:
    """Prepare ``items`` (by consumer node) and sign their deliveries, on the agents' threads,
    starting now; :meth:`signed` waits for it and gives the signed deliveries."""

    def __init__(self, agents: Agents, items: Mapping[str, list[ConsumerItem]]) -> None:
        self._agents = agents
        self._items = items
        self._signed: dict[str, SignedRequest] = {}
        for node in items:
            agents.client(node)  # clients are made in the caller's thread
        self._done = agents.start(self._run)  # on the set's threads: none is made for it

    def _run(self) -> None:
        try:
            self._ready()
        except Exception:  # noqa: BLE001 - advisory: the delivery itself reports every failure
            self._signed.clear()

    def _ready(self) -> None:
        agents = self._agents
        prepare: dict[str, PrepareRequest] = {}
        for node, items in self._items.items():
            prepare[node] = PrepareRequest(consumer=items)
            try:  # signed first: its prepare records its acceptance ahead, on the node's disk
                signed = agents.client(node).sign(messages.DELIVER, DeliverRequest(consumer=items))
            except AgentError:
                continue  # signed again when sent, where the error is reported
            self._signed[node] = signed
            prepare[node]["delivery"] = signed.seq
        # each answer (or error) only says whether the delivery will be quick
        agents.call_many(messages.PREPARE, prepare, timeout=PREPARE_TIMEOUT_S)

    def signed(self) -> dict[str, SignedRequest]:
        """The consumers' deliveries as signed ahead (those ready within the prepare's bound)."""
        done, _ = wait([self._done], timeout=PREPARE_TIMEOUT_S)
        return dict(self._signed) if done else {}
