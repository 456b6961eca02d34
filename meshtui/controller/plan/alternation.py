"""Which pairs alternate: an overlap pair whose kind's login holds one credential (PostgreSQL)
rotates between two logins of one owner (:class:`meshtui.contracts.adapter.Alternating`).

The login a consumer holds follows from its generation alone: generation ``g`` of an
alternating pair is held by the alternate ``ALTERNATES[g % 2]`` (:func:`alternate`), and a
rotation mints such a pair's next generation of the other parity, so each rotation moves the
consumer to the other login and a journaled rotation (its ``from`` and ``to``) names both.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from meshtui.inventory import Inventory
from meshtui.inventory.rows import ModuleRow, PairRow
from meshtui.kinds import registry
from meshtui.model import OVERLAP
from meshtui.protocol.manifest import ALTERNATES


def alternating(
    inv: Inventory, pairs: Iterable[PairRow], modules: Mapping[str, ModuleRow]
) -> frozenset[str]:
    """The ids of ``pairs`` that alternate: declared overlap, on a kind whose adapter says
    ``alternating``. ``modules``: at least the pairs' providers."""
    candidates = []
    for p in pairs:
        module = modules.get(p["provider"])
        offer = next(
            (o for o in (module["spec"].provides if module else []) if o.name == p["provision"]),
            None,
        )
        if offer is not None and registry.can_alternate(registry.kind_of(offer.kind)):
            candidates.append(p["id"])
    if not candidates:
        return frozenset()
    modes = inv.rotation_modes(candidates)
    return frozenset(pid for pid in candidates if modes[pid].rotation == OVERLAP)


def alternate(generation: int) -> str:
    """The alternate login (``"a"`` or ``"b"``) that holds an alternating pair's
    ``generation``."""
    return ALTERNATES[generation % 2]


def next_generation(generation: int, above: int, taken: Iterable[int], alternates: bool) -> int:
    """The generation to mint after ``generation`` (held at most ``above`` by an end): one
    never minted, and for an alternating pair one whose alternate is the other login."""
    minted = set(taken)
    new = max(generation, above) + 1
    while new in minted or (alternates and new % 2 == generation % 2):
        new += 1
    return new
