"""What a rotation does to each pair's sessions on the old credential: the command's choice,
else the pair's requirement's ``sessions``, else its provider's offer's, else the default
(:data:`~meshtui.model.DEFAULT_SESSIONS`, ``end``; docs/sessions.md).

The default asks only a built-in provisioner: a provider whose provisioner is a declared
command cannot be asked to end a login's sessions (the manifest has no word for it), so a pair
there is asked only when the command or the declaration chose, and its rotation then fails
truthfully rather than every rotation of such a provider failing for a choice nobody made."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from meshtui.inventory import Inventory
from meshtui.inventory.rows import PairRow, RotationItem
from meshtui.model import DEFAULT_SESSIONS, Sessions, is_builtin


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
        needs = specs[p["consumer"]]["spec"].requires if p["consumer"] in specs else []
        offers = specs[p["provider"]]["spec"].provides if p["provider"] in specs else []
        need = next(
            (n.sessions for n in needs if (n.name, n.file) == (p["provision"], p["file"])), None
        )
        offer = next((o.sessions for o in offers if o.name == p["provision"] and o.sessions), None)
        chosen = need or offer
        if chosen:
            out[p["id"]] = Sessions(chosen)
        elif p["provider"] in specs and is_builtin(specs[p["provider"]]["spec"].provisioner):
            out[p["id"]] = DEFAULT_SESSIONS
    return out


def journaled(items: Iterable[RotationItem]) -> Mapping[str, Sessions]:
    """The choices a rotation's journal holds (pair id -> Sessions), for its deliveries."""
    return {i["pair"]: Sessions(i["sessions"]) for i in items if "sessions" in i}
