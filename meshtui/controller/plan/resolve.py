"""Resolving nodes: ask each agent who it is and what it holds, and trust only a signed answer.

A rotation resolves every affected node first; a node that does not answer, or answers with a
signature that is not the key the inventory holds for it, is not resolved and nothing is sent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from meshtui.controller.agents.client import STATE_TIMEOUT_S, Agents
from meshtui.controller.plan.claims import own_holdings
from meshtui.controller.reports import Resolution
from meshtui.errors import AgentError
from meshtui.protocol import messages
from meshtui.protocol.messages import Holding, StateAnswer, StateRequest

if TYPE_CHECKING:
    from meshtui.controller.reach import Reach


def ask_state(
    agents: Agents, nodes: list[str], *, listing: bool = True
) -> tuple[list[Resolution], dict[str, list[Holding]]]:
    """Resolutions of ``nodes`` and, for those that answered, what they hold (nothing when
    ``listing`` is False: a rotation only needs to know each node answers as itself)."""
    return asking_state(agents, nodes, listing=listing)()


Resolved = tuple[list[Resolution], dict[str, list[Holding]]]


def asking_state(
    agents: Agents, nodes: list[str], *, listing: bool = True
) -> Callable[[], Resolved]:
    """:func:`ask_state`, asked now; the returned callable waits for the answers and reads
    them (a rotation mints and plans in memory meanwhile, keeping and sending nothing)."""
    ask = StateRequest() if listing else StateRequest(holdings=False)
    pending = agents.begin_many(
        messages.STATE, {n: ask for n in sorted(set(nodes))}, timeout=STATE_TIMEOUT_S
    )
    return lambda: _resolved(pending())


def _resolved(answers: Mapping[str, StateAnswer | AgentError]) -> Resolved:
    resolutions: list[Resolution] = []
    holdings: dict[str, list[Holding]] = {}
    for node, answer in sorted(answers.items()):
        if isinstance(answer, AgentError):
            resolutions.append(Resolution(node=node, ok=False, reason=answer.reason))
            continue
        if answer["node"] != node:
            resolutions.append(
                Resolution(node=node, ok=False, reason=f"agent says it is {answer['node']!r}")
            )
            continue
        # a node speaks only for its own ends: the rest is a claim, named, never believed
        holdings[node], claims = own_holdings(node, answer.get("holdings", []))
        resolutions.append(
            Resolution(
                node=node,
                ok=True,
                reason=f"answered, key {answer['fingerprint']}",
                claims=tuple(claims),
            )
        )
    return resolutions, holdings


def resolve_nodes(ctl: Reach, nodes: list[str]) -> list[Resolution]:
    """Resolve ``nodes`` with a fresh set of clients (used by the hosts view)."""
    with ctl.agents(timeout=5.0) as agents:
        return ask_state(agents, nodes)[0]
