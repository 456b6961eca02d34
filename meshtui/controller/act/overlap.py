"""An overlap rotation (``rotation = "overlap"``): no window.

The provider adds the new credential and keeps the old accepted (its manifest line's
``keep``) -> the consumer holds the new (file, connection file, reload) -> a probe from the
consumer's node with the new is accepted -> the provider removes the old (the plain manifest)
-> the old, held in the consumer agent's memory since before, is refused. Each step is
journaled on the rotation's row before it is taken; a controller killed between two is
finished by the journal recovery (:func:`~meshtui.controller.act.rotate.recover`, run by
push, watch and rotate), whose plain forward delivery leaves the new alone accepted, or rolls
back to the old: never both accepted with nobody saying so. A consumer that cannot take the
new (its delivery, its reload or the probe fails within the grace) rolls the pair back: the
provider holds the old alone again. docs/rotation-overlap.md says when to choose it.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TypeVar

from meshtui.controller.act.recording import Delivered
from meshtui.controller.act.rotate import _finish, fault, roll_back, roll_back_overlap, rotate
from meshtui.controller.act.sending import send_consumers, send_providers
from meshtui.controller.agents.client import Agents
from meshtui.controller.plan.planner import Planner
from meshtui.controller.plan.sessions import journaled
from meshtui.controller.reports import PairOutcome, Progress, RotationReport
from meshtui.errors import AgentError
from meshtui.model import (
    OVERLAP,
    OVERLAP_OPEN,
    RotationMode,
    RotationState,
    Sessions,
    Verdict,
    node_of,
)
from meshtui.protocol import messages
from meshtui.protocol.messages import (
    DrillCheckAnswer,
    DrillHoldAnswer,
    DrillRequest,
    Kind,
    ProbeItem,
    ProbeRequest,
    ProviderSet,
)

if TYPE_CHECKING:
    from meshtui.controller.reach import Reach
    from meshtui.inventory.rows import RotationStart

A = TypeVar("A", bound=Mapping[str, object])

PROBE_PAUSE_S = 0.2
"""Between two probes with the new credential while the grace lasts (a slow reload)."""


@dataclass(frozen=True)
class Overlap:
    """What an overlap did for its pairs: how long both credentials were accepted (the new
    added -> the old removed), and what the last login with the old one said."""

    both_accepted_ms: dict[str, float]
    old_after: dict[str, str]  # pair -> the verdict of a login with the old after, or why none


def _requests(plan: Planner, pids: list[str], drill: str) -> dict[str, DrillRequest]:
    out = {}
    for pid in pids:
        p = plan.pairs[pid]
        out[pid] = DrillRequest(
            drill=f"{drill}-{pid}",
            pair=pid,
            file=p["file"],
            target=plan.target(pid),
        )
    return out


def _each(
    agents: Agents,
    plan: Planner,
    asks: Mapping[str, DrillRequest],
    kind: Kind[DrillRequest, A],
    said: Callable[[A], str],
) -> dict[str, str]:
    """Ask each pair's consumer's agent; pair -> what ``said`` makes of its answer, or why its
    node did not answer."""
    out: dict[str, str] = {}
    for pid, ask in asks.items():
        try:
            out[pid] = said(agents.call(node_of(plan.pairs[pid]["consumer"]), kind, ask))
        except AgentError as exc:
            out[pid] = f"consumer's node unreachable: {exc.reason}"
    return out


def _held_why(held: DrillHoldAnswer) -> str:
    """Why a consumer's current credential did not log in ("" when it did)."""
    result = held["result"]
    if result is not None and result["verdict"] == Verdict.ACCEPTED:
        return ""
    why = held.get("error") or (result["reason"] if result else "no result")
    return f"the current credential did not log in before the overlap: {why}"


def _old_verdict(checked: DrillCheckAnswer) -> str:
    """What a login with the old credential said, or why there was none."""
    old = checked["old"]
    return old["verdict"] if old is not None else checked["error"] or "no result"


def _hold(agents: Agents, plan: Planner, asks: Mapping[str, DrillRequest]) -> dict[str, str]:
    """Have each consumer's agent log in with the credential it holds now and keep it in memory
    (the drill's first login); pair -> why not, for each that did not."""
    said = _each(agents, plan, asks, messages.DRILL_HOLD, _held_why)
    return {pid: why for pid, why in said.items() if why}


def _check_old(agents: Agents, plan: Planner, asks: Mapping[str, DrillRequest]) -> dict[str, str]:
    """The login with the old credential each consumer's agent held, now (the agent forgets it);
    pair -> its verdict, or why there is none."""
    return _each(agents, plan, asks, messages.DRILL_CHECK, _old_verdict)


def _probe_new(
    agents: Agents,
    plan: Planner,
    targets: Mapping[str, int],
    grace: float,
    refused: dict[str, int],
) -> dict[str, str]:
    """Probe each pair from its consumer's node with the credential it holds (the new one, as
    the login that holds it: an alternating pair's new alternate) until
    every one is accepted or ``grace`` is over; pair -> why not, for each never accepted.
    ``refused``: counts, by pair, the logins the server refused meanwhile."""
    pids = list(targets)
    by_node: dict[str, list[ProbeItem]] = {}
    for pid in pids:
        p = plan.pairs[pid]
        by_node.setdefault(node_of(p["consumer"]), []).append(
            ProbeItem(pair=pid, file=p["file"], **plan.target(pid, targets[pid]))
        )
    left = {pid: "not probed" for pid in pids}
    deadline = time.monotonic() + grace
    while True:
        asking = {
            n: ProbeRequest(targets=[i for i in items if i["pair"] in left])
            for n, items in by_node.items()
            if any(i["pair"] in left for i in items)
        }
        for node, answer in agents.call_many(messages.PROBE, asking).items():
            if isinstance(answer, AgentError):
                for item in asking[node]["targets"]:
                    left[item["pair"]] = f"consumer's node unreachable: {answer.reason}"
                continue
            for got in answer["results"]:
                pid, result = got["pair"], got["result"]
                if pid not in left:
                    continue
                if result is not None and result["verdict"] == Verdict.ACCEPTED:
                    del left[pid]
                else:
                    if result is not None and result["verdict"] == Verdict.REFUSED:
                        refused[pid] = refused.get(pid, 0) + 1
                    left[pid] = result["reason"] if result else got.get("error", "no result")
        if not left or time.monotonic() + PROBE_PAUSE_S > deadline:
            return {
                pid: f"the new credential was not accepted from the consumer's node: {why}"
                for pid, why in left.items()
            }
        time.sleep(PROBE_PAUSE_S)


def _sets(
    plan: Planner, pids: list[str], targets: Mapping[str, int], keep: bool
) -> dict[str, list[ProviderSet]]:
    """Each provision's manifest whole; with ``keep``, the rotated pairs' lines keep the old."""
    provisions = {(plan.pairs[pid]["provider"], plan.pairs[pid]["provision"]) for pid in pids}
    sets = plan.provider_sets(provisions, targets)
    if keep:
        for specs in sets.values():
            for spec in specs:
                for entry in spec["consumers"]:
                    if entry["pair"] in targets:
                        entry["keep"] = True
    return sets


def _step(ctl: Reach, rotation: RotationStart, state: RotationState) -> None:
    """Journal the step the overlap is about to take (or has reached)."""
    with ctl.inventory.transaction("rotate") as tx:
        tx.update_rotation(rotation["id"], {"state": state})


def execute_overlap(
    ctl: Reach,
    agents: Agents,
    rotation: RotationStart,
    progress: Progress,
    modes: Mapping[str, RotationMode],
) -> RotationReport:
    """Deliver a journaled rotation of overlap pairs step by step (the module docstring)."""
    inv = ctl.inventory
    items = rotation["items"]
    pids = [i["pair"] for i in items]
    targets = {i["pair"]: i["to"] for i in items}
    grace = max(modes[pid].grace for pid in pids)
    plan = Planner(inv, focus=pids)
    asks = _requests(plan, pids, secrets.token_hex(8))
    progress("overlap: the current credential from each consumer's node", 0, 6)
    failed = _hold(agents, plan, asks)
    if failed:
        return roll_back(ctl, agents, rotation, failed, progress)

    progress("overlap: the provider adds the new credential (the old still accepted)", 1, 6)
    _step(ctl, rotation, RotationState.ADDING_NEW)
    added = Delivered()
    send_providers(agents, inv, _sets(plan, pids, targets, keep=True), added, record=False)
    added_at = time.monotonic()
    if not all(added.provider_ok.get(pid) for pid in pids):
        added.flush(inv)
        return roll_back(ctl, agents, rotation, added.errors, progress)
    _step(ctl, rotation, RotationState.BOTH_ACCEPTED)
    fault(ctl, "overlap:both-accepted")

    progress("overlap: the consumer takes the new credential", 2, 6)
    send_consumers(agents, inv, plan.consumer_items(pids, targets), added, record=False)
    switched_at = time.monotonic()
    if not all(added.consumer_ok.get(pid) for pid in pids) or added.errors:
        added.flush(inv)  # a reload that failed is the consumer not taking it
        return roll_back_overlap(ctl, agents, rotation, added.errors, progress)
    fault(ctl, "overlap:consumer-holds-new")

    progress("overlap: a login with the new credential from the consumer's node", 3, 6)
    refused = {pid: 0 for pid in pids}
    failed = _probe_new(agents, plan, targets, grace, refused)
    if failed:
        added.flush(inv)
        return roll_back_overlap(ctl, agents, rotation, failed, progress)

    settle = max(modes[pid].settle for pid in pids)  # an app that read the old just before
    time.sleep(max(0.0, switched_at + settle - time.monotonic()))
    progress("overlap: the provider removes the old credential", 4, 6)
    _step(ctl, rotation, RotationState.REMOVING_OLD)
    fault(ctl, "overlap:removing-old")
    removed = Delivered()
    plan.sessions = journaled(items)  # the old credential's sessions: ended or counted now
    send_providers(agents, inv, _sets(plan, pids, targets, keep=False), removed, record=False)
    added.sessions.update(removed.sessions)
    span = {pid: (time.monotonic() - added_at) * 1000.0 for pid in pids}
    if not all(removed.provider_ok.get(pid) for pid in pids):
        added.flush(inv)
        removed.flush(inv)
        why = "; ".join(sorted(set(removed.errors.values()))) or "the provider did not confirm"
        return _left_open(ctl, rotation, why)
    removed.flush(inv)

    progress("overlap: a login with the old credential, to be refused", 5, 6)
    old_after = _check_old(agents, plan, asks)
    added.applied_at.clear()  # no window to report: the old was accepted until now
    report = _finish(ctl, rotation, added, progress)
    refused_old = {pid for pid, verdict in old_after.items() if verdict == Verdict.REFUSED}
    inv.record(
        "rotate-overlap",
        pids,
        {
            "rotation": rotation["id"],
            "both_accepted_ms": {pid: round(ms, 1) for pid, ms in span.items()},
            "old_after": old_after,
            "refused": refused,
        },
        "ok" if refused_old == set(pids) else "old not refused",
    )
    pairs = [
        replace(
            o,
            both_accepted_ms=span.get(o.pair),
            old_after=old_after.get(o.pair, ""),
            refused=refused.get(o.pair),
            ok=o.ok and o.pair in refused_old,
            reason=o.reason
            or ("" if o.pair in refused_old else f"the old credential: {old_after.get(o.pair)}"),
        )
        for o in report.pairs
    ]
    return replace(report, pairs=pairs)


def _left_open(ctl: Reach, rotation: RotationStart, why: str) -> RotationReport:
    """The old credential could not be removed: the rotation stays journaled (push and watch
    finish it) and is said as converging, both credentials still accepted."""
    reason = f"{OVERLAP_OPEN}: {why}; push removes the old credential once the provider answers"
    with ctl.inventory.transaction("rotate") as tx:
        tx.update_rotation(rotation["id"], {"state": RotationState.REMOVING_OLD, "reason": reason})
        tx.audit(
            "rotate-overlap",
            [i["pair"] for i in rotation["items"]],
            {"rotation": rotation["id"], "reason": reason},
            OVERLAP_OPEN,
        )
    return RotationReport(
        rotation=rotation["id"],
        outcome=RotationState.CONVERGING,
        pairs=[
            PairOutcome(
                pair=i["pair"], ok=False, generation=i["to"], previous=i["from"], reason=reason
            )
            for i in rotation["items"]
        ],
        reason=reason,
    )


def rotate_declared(
    ctl: Reach,
    ids: list[str],
    progress: Progress,
    *,
    revoke_old: bool = False,
    sessions: Sessions | None = None,
) -> RotationReport:
    """Rotate ``ids`` as each pair is declared: its overlap pairs by one overlap rotation, the
    others by one swap (each all-or-nothing on its own). Break-glass is always a swap: after a
    leak the old credential must not stay accepted a moment longer."""
    modes = ctl.inventory.rotation_modes(ids)
    over = [pid for pid in ids if modes[pid].rotation == OVERLAP]
    if revoke_old or not over or len(over) == len(ids):
        return rotate(
            ctl, ids, progress, revoke_old=revoke_old, sessions=sessions, overlap=execute_overlap
        )
    swapped = rotate(ctl, [pid for pid in ids if pid not in over], progress, sessions=sessions)
    overlapped = rotate(ctl, over, progress, sessions=sessions, overlap=execute_overlap)
    return RotationReport(
        rotation=overlapped.rotation,
        outcome=overlapped.outcome if swapped.done else swapped.outcome,
        pairs=swapped.pairs + overlapped.pairs,
        reason="; ".join(r for r in (swapped.reason, overlapped.reason) if r),
    )
