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
from concurrent.futures import Future, wait

from meshtui.controller.agents.client import Agents, SignedRequest
from meshtui.errors import AgentError
from meshtui.protocol import messages
from meshtui.protocol.messages import ConsumerItem, DeliverRequest, PrepareRequest

PREPARE_TIMEOUT_S = 10.0
"""How long a consumer's prepare may take before its delivery is sent without waiting."""


class Ahead:
    """The consumers' prepares and deliveries of ``items`` (by consumer node), numbered and
    signed now, in the caller's thread; :meth:`start` sends the prepares on the agents'
    threads and :meth:`signed` waits for them and gives the signed deliveries."""

    def __init__(self, agents: Agents, items: Mapping[str, list[ConsumerItem]]) -> None:
        self._agents = agents
        self._deliveries: dict[str, SignedRequest] = {}
        self._prepares: dict[str, tuple[PrepareRequest, SignedRequest]] = {}
        self._done: Future[object] | None = None
        for node, its in items.items():
            client = agents.client(node)
            try:  # the delivery first: its prepare records its acceptance ahead, on the node
                # built too: once the providers have applied, sending it is all that is left
                delivery = client.sign(messages.DELIVER, DeliverRequest(consumer=its), built=True)
                prepare = PrepareRequest(consumer=its, delivery=delivery.seq)
                self._prepares[node] = (prepare, client.sign(messages.PREPARE, prepare))
            except AgentError:
                continue  # signed again when sent, where the error is reported
            self._deliveries[node] = delivery

    def start(self) -> None:
        """Send the prepares (each answer, or error, only says whether the delivery will be
        quick); once, and only after the rotation is journaled."""
        payloads = {node: p for node, (p, _) in self._prepares.items()}
        signed = {node: s for node, (_, s) in self._prepares.items()}
        agents = self._agents
        self._done = agents.start(
            lambda: agents.call_many(
                messages.PREPARE, payloads, timeout=PREPARE_TIMEOUT_S, signed=signed
            )
        )

    def signed(self) -> dict[str, SignedRequest]:
        """The consumers' deliveries as signed ahead (those whose prepares were answered within
        the prepare's bound; none when the prepares were not started or failed)."""
        if self._done is None:
            return {}
        done, _ = wait([self._done], timeout=PREPARE_TIMEOUT_S)
        if not done or self._done.exception() is not None:
            return {}
        return dict(self._deliveries)
