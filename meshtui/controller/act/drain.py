"""Sessions left to drain: a rotation with ``sessions = "drain"`` leaves the sessions opened
with the old credential open for the pair's ``drain`` (docs/sessions.md). Its end journals
them (:func:`begun`: the provider's mark, the time they end at the latest); every push counts
them again and ends those whose time is over (:func:`check`), so a controller restarted
meanwhile still ends them, and ``status`` shows how many remain."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from meshtui.controller.act.recording import Delivered, SessionsSettled
from meshtui.controller.act.sending import send_providers
from meshtui.controller.agents.client import Agents
from meshtui.controller.plan.planner import Planner
from meshtui.inventory import Inventory, now
from meshtui.inventory.rows import DrainRecord, RotationItem
from meshtui.model import Sessions

if TYPE_CHECKING:
    from meshtui.controller.reach import Reach

DRAIN_COUNT_EVERY_S = 60.0
"""How often watch counts sessions left to drain again (a push), so status stays near."""


def begun(
    inv: Inventory,
    rotation: int,
    items: Iterable[RotationItem],
    settled: Mapping[str, SessionsSettled],
    stamp: str,
) -> tuple[list[DrainRecord], list[str]]:
    """What a finished rotation's end writes: the pairs whose old sessions now drain, and the
    pairs whose earlier drain is over (their sessions were ended, or none was left). A pair
    rotated again while it drains keeps the earlier end time: a drain never outlives the first
    one's bound."""
    held = inv.drains()
    put: list[DrainRecord] = []
    gone: list[str] = []
    for item in items:
        pid, done = item["pair"], settled.get(item["pair"])
        if done is None or done.count is None:
            continue
        if done.ended or not done.left or done.mark is None:
            if pid in held:
                gone.append(pid)
            continue
        until = _after(stamp, item.get("drain_s", 0.0))
        if pid in held:
            until = min(until, held[pid]["until"])
        put.append(
            DrainRecord(
                pair=pid,
                rotation=rotation,
                mark=done.mark,
                until=until,
                sessions=done.left,
                counted_at=stamp,
            )
        )
    return put, gone


def _after(stamp: str, seconds: float) -> str:
    """The inventory time ``seconds`` after ``stamp``, in the inventory's one format."""
    later = datetime.fromisoformat(stamp) + timedelta(seconds=seconds)
    return later.isoformat(timespec="microseconds")


@dataclass
class Checked:
    """What a check of the drains did: pairs whose sessions were ended (and how many), pairs
    still draining (how many remain), and pairs whose provider could not say (why: their
    count stays as it was, ``counted_at`` says when they were last asked)."""

    ended: dict[str, int] = field(default_factory=dict)
    draining: dict[str, int] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)


def due(inv: Inventory, at: float) -> bool:
    """Whether a drain is over and not asked since, or was asked longer ago than
    :data:`DRAIN_COUNT_EVERY_S` (a provider that could not answer is asked again then)."""
    for d in inv.drains().values():
        asked = datetime.fromisoformat(d["counted_at"]).timestamp()
        until = datetime.fromisoformat(d["until"]).timestamp()
        if (until <= at and asked < until) or asked + DRAIN_COUNT_EVERY_S <= at:
            return True
    return False


def check(ctl: Reach, agents: Agents) -> Checked:
    """Count each pair's sessions left to drain at its provider, and end them where the
    drain's time is over; forget a pair withdrawn or with none left. The provider is sent its
    manifest as it is (its logins unchanged) with the pairs' marks: only sessions opened
    before a mark are counted or ended, never those the consumer opened with the new
    credential since."""
    inv = ctl.inventory
    held = inv.drains()
    out = Checked()
    if not held:
        return out
    live = {p["id"]: p for p in inv.pairs(list(held)) if not p["withdrawn_at"]}
    stamp = now()
    over = {pid for pid in live if held[pid]["until"] <= stamp}
    plan = Planner(inv, focus=list(live))
    plan.sessions = {pid: Sessions.END if pid in over else Sessions.DRAIN for pid in live}
    plan.drained = {pid: held[pid]["mark"] for pid in live}
    provisions = {(p["provider"], p["provision"]) for p in live.values()}
    got = Delivered()
    send_providers(agents, inv, plan.provider_sets(provisions, {}), got)
    gone = [pid for pid in held if pid not in live]
    counted: list[DrainRecord] = []
    for pid in live:
        done = got.sessions.get(pid)
        if done is None or done.count is None:  # asked again in a minute; the count stays
            why = done.note if done is not None else got.errors.get(pid, "no answer")
            out.failed[pid] = why
            counted.append({**held[pid], "counted_at": stamp})
            continue
        if pid in over:
            out.ended[pid] = done.count - (done.left or 0)
        if done.left:
            out.draining[pid] = done.left
            counted.append({**held[pid], "sessions": done.left, "counted_at": stamp})
        else:
            gone.append(pid)
    with inv.transaction("drain") as tx:
        tx.forget_drains(gone)
        tx.put_drains(counted)
        if out.ended or out.failed:
            tx.audit(
                "drain",
                sorted(out.ended) + sorted(set(out.failed) & over),
                {"ended": out.ended, "failed": out.failed, "draining": out.draining},
                "ok" if not out.failed else "failed",
            )
    return out
