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
from meshtui.inventory.rows import ModuleRow, ModuleSpec, PairRow
from meshtui.model import is_builtin, node_of
from meshtui.protocol import messages
from meshtui.protocol.messages import Holding, InspectSpec, StateAnswer, StateRequest

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
    agents: Agents,
    nodes: list[str],
    *,
    listing: bool = True,
    admins: Mapping[str, list[InspectSpec]] | None = None,
) -> Callable[[], Resolved]:
    """:func:`ask_state`, asked now; the returned callable waits for the answers and reads
    them (a rotation mints and plans in memory meanwhile, keeping and sending nothing).
    ``admins``: per provider node, the manifests whose admin file its provisioner is asked to
    open (:func:`admin_checks`); one that cannot is a :class:`Resolution` not ok, named."""
    asks: dict[str, StateRequest] = {}
    for n in sorted(set(nodes)):
        asks[n] = StateRequest() if listing else StateRequest(holdings=False)
        if admins and admins.get(n):
            asks[n]["inspect"] = admins[n]
    pending = agents.begin_many(messages.STATE, asks, timeout=STATE_TIMEOUT_S)
    return lambda: _resolved(pending())


def inspection(p: PairRow, spec: ModuleSpec) -> InspectSpec:
    """What a provider node is asked to inspect for pair ``p`` (its provider's ``spec``)."""
    return {
        "provider": p["provider"],
        "provision": p["provision"],
        "receives": spec.receives[p["provision"]],
        "admin": spec.admin,
        "provisioner": spec.provisioner,
    }


def admin_checks(
    rows: list[PairRow], specs: Mapping[str, ModuleRow]
) -> dict[str, list[InspectSpec]]:
    """Per provider node, each rotated provision whose built-in provisioner is asked, before
    anything is minted, whether its admin file still opens a session (``admin_only``): an
    expired token refuses the rotation there, not halfway through it. A declared command
    cannot be asked."""
    out: dict[str, list[InspectSpec]] = {}
    for p in rows:
        spec = specs[p["provider"]]["spec"] if p["provider"] in specs else None
        if spec is None or not is_builtin(spec.provisioner):
            continue
        key = inspection(p, spec)
        key["admin_only"] = True
        kind = next((o.kind for o in spec.provides if o.name == p["provision"]), None)
        if kind is not None:
            key["kind"] = kind
        wanted = out.setdefault(node_of(p["provider"]), [])
        if key not in wanted:
            wanted.append(key)
    return out


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
        refused = [  # its providers' admin files, when it was asked (a rotation's first step)
            f"provider {i['provider']} ({i['provision']}): {i.get('error') or 'not inspected'}"
            for i in answer.get("inspected", [])
            if not i["ok"] and node_of(i["provider"]) == node
        ]
        if refused:
            resolutions.append(
                Resolution(node=node, ok=False, reason="; ".join(refused), admin_refused=True)
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
