"""What a rotation does to each pair's sessions on the old credential: the command's choice,
else the pair's requirement's ``sessions``, else its provider's offer's, else the default
(:data:`~meshtui.model.DEFAULT_SESSIONS`, ``end``; docs/sessions.md); and for those left to
drain, how long they may stay open (``drain``, the same order, else
:data:`~meshtui.model.DEFAULT_DRAIN_S`).

The default asks only a built-in provisioner: a provider whose provisioner is a declared
command cannot be asked to end a login's sessions (the manifest has no word for it), so a pair
there is asked only when the command or the declaration chose, and its rotation then fails
truthfully rather than every rotation of such a provider failing for a choice nobody made."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from meshtui.inventory import Inventory
from meshtui.inventory.rows import ModuleRow, NeedSpec, OfferSpec, PairRow, RotationItem
from meshtui.model import DEFAULT_DRAIN_S, DEFAULT_SESSIONS, Sessions, is_builtin


def session_choices(
    inv: Inventory, rows: Iterable[PairRow], asked: Sessions | None = None
) -> dict[str, Sessions]:
    """Each pair's choice (pair id -> Sessions), ``asked`` (``rotate --sessions``) first."""
    rows = list(rows)
    if asked is not None:
        return {p["id"]: asked for p in rows}
    specs = inv.module_specs({p["provider"] for p in rows} | {p["consumer"] for p in rows})
    out: dict[str, Sessions] = {}
    for p in rows:
        need, offer = _declared(specs, p)
        chosen = (need.sessions if need else None) or (offer.sessions if offer else None)
        if chosen:
            out[p["id"]] = Sessions(chosen)
        elif p["provider"] in specs and is_builtin(specs[p["provider"]]["spec"].provisioner):
            out[p["id"]] = DEFAULT_SESSIONS
    return out


def drain_limits(
    inv: Inventory, rows: Iterable[PairRow], choices: Mapping[str, Sessions]
) -> dict[str, float]:
    """How long, in seconds, each pair whose sessions are left to drain (``choices``) lets
    them stay open at most: its requirement's ``drain``, else its offer's, else the default."""
    rows = [p for p in rows if choices.get(p["id"]) == Sessions.DRAIN]
    specs = inv.module_specs({p["provider"] for p in rows} | {p["consumer"] for p in rows})
    out: dict[str, float] = {}
    for p in rows:
        need, offer = _declared(specs, p)
        said = (need.drain if need else None) or (offer.drain if offer else None)
        out[p["id"]] = said or DEFAULT_DRAIN_S
    return out


def _declared(
    specs: Mapping[str, ModuleRow], p: PairRow
) -> tuple[NeedSpec | None, OfferSpec | None]:
    """The pair's requires entry at its consumer and its offer at its provider, as stored."""
    needs = specs[p["consumer"]]["spec"].requires if p["consumer"] in specs else []
    offers = specs[p["provider"]]["spec"].provides if p["provider"] in specs else []
    need = next((n for n in needs if (n.name, n.file) == (p["provision"], p["file"])), None)
    offer = next((o for o in offers if o.name == p["provision"]), None)
    return need, offer


def journaled(items: Iterable[RotationItem]) -> Mapping[str, Sessions]:
    """The choices a rotation's journal holds (pair id -> Sessions), for its deliveries."""
    return {i["pair"]: Sessions(i["sessions"]) for i in items if "sessions" in i}
