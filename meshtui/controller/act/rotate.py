"""All-or-nothing rotation: resolve every affected node, mint and journal, deliver providers then
consumers, and end all-new or all-old.

The journal (``rotations`` + the new generations' sealed blobs) is written before anything is
sent, so a controller killed mid-way is finished or rolled back by the next command
(:func:`recover`). Old blobs are kept until the rotation is final, so a rollback can
re-deliver them. An agent refuses an older generation unless told: the rollback's items carry a
signed note naming the generation they roll back from and this rotation
(:meth:`Planner.rollback`), which the journal makes known before anything is sent.

Break-glass (``rotate --revoke-old``, journaled on each item): once every provider applied
the new credential, a consumer end that cannot take it no longer rolls the rotation back. The
old credential stays revoked, the pair moves to the new generation, and that consumer is
*locked out* (its status says so) until a later push delivers it (docs/rotation.md).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, TypedDict

from meshtui.controller.act import sending
from meshtui.controller.act.ahead import Ahead
from meshtui.controller.act.drain import begun
from meshtui.controller.act.recording import Delivered, SessionsSettled
from meshtui.controller.act.sending import (
    begin_providers,
    node_batches,
    send_consumers,
    send_providers,
    sign_providers,
)
from meshtui.controller.agents.client import Agents, SignedRequest
from meshtui.controller.lock import delivering
from meshtui.controller.plan.alternation import alternating, next_generation
from meshtui.controller.plan.declare import nodes_from_inventory, seal_generation
from meshtui.controller.plan.planner import Planner
from meshtui.controller.plan.resolve import admin_checks, ask_state, asking_state
from meshtui.controller.plan.sessions import drain_limits, journaled, session_choices
from meshtui.controller.read.status import LOCKED_OUT
from meshtui.controller.reports import (
    PairOutcome,
    Progress,
    RotationPlan,
    RotationReport,
    sessions_said,
)
from meshtui.errors import AgentError, InputError, NotResolvedError, ProviderRefusedError
from meshtui.inventory import Inventory, now
from meshtui.inventory.rows import GenerationRow, PairRow, RotationItem, RotationStart
from meshtui.model import OVERLAP, RotationMode, RotationState, Sessions, node_of, split_pair_id
from meshtui.protocol.messages import ConsumerItem, DeliverAnswer, ProviderSet

if TYPE_CHECKING:
    from meshtui.controller.reach import Reach


def fault(ctl: Reach, point: str) -> None:
    """The fault-injection seam: tests put callables in ``ctl.faults`` to crash or stop things."""
    hook = getattr(ctl, "faults", {}).get(point)
    if hook is not None:
        hook()


def affected_nodes(pairs: Iterable[PairRow]) -> dict[str, list[str]]:
    """Node -> the pairs it is an end of."""
    out: dict[str, list[str]] = {}
    for p in pairs:
        for node in (node_of(p["consumer"]), node_of(p["provider"])):
            out.setdefault(node, []).append(p["id"])
    return out


def plan(ctl: Reach, ids: list[str]) -> RotationPlan:
    """The pairs and each affected node, resolved or not (asks every agent)."""
    rows = ctl.inventory.pairs(ids)
    nodes = affected_nodes(rows)
    with ctl.agents(timeout=5.0) as agents:
        resolutions, _ = ask_state(agents, list(nodes), listing=False)
    return RotationPlan(
        pairs=sorted(ids),
        nodes=[
            type(r)(node=r.node, ok=r.ok, reason=r.reason, pairs=sorted(nodes[r.node]))
            for r in resolutions
        ],
    )


OverlapRun = Callable[
    ["Reach", Agents, RotationStart, Progress, Mapping[str, RotationMode]], RotationReport
]
"""How a journaled rotation of overlap pairs is delivered (controller/act/overlap.py)."""


def rotate(
    ctl: Reach,
    ids: list[str],
    progress: Progress,
    *,
    revoke_old: bool = False,
    sessions: Sessions | None = None,
    overlap: OverlapRun | None = None,
) -> RotationReport:
    """Rotate ``ids`` all-or-nothing; NotResolvedError (nothing kept or sent) when a node is down.

    While the affected nodes answer, the next generations are minted and, for up to
    :data:`~meshtui.controller.act.sending.BATCH` pairs, their deliveries built and signed, in
    memory; they are journaled only once every node has answered as itself, and nothing is sent
    before that journal is on disk. A larger rotation builds its deliveries after the journal,
    a batch at a time (:func:`_deliver_batches`).

    ``revoke_old``: break-glass (the module docstring): a consumer end that cannot take the new
    credential, or whose node does not answer, is locked out instead of stopping or rolling
    back the rotation; only the providers' nodes must answer.

    ``sessions``: what becomes of the sessions opened with the old credential (ended, or left
    to drain and counted), for every pair; None: each pair's declared choice, else ``end``.
    ``overlap``: when every pair is declared ``rotation = "overlap"`` (and not break-glass),
    the journaled rotation is delivered by it (no window) instead of swapped.
    """
    inv = ctl.inventory
    rows = inv.pairs(ids)
    gone = [p["id"] for p in rows if p["withdrawn_at"]]
    if gone:
        raise InputError(f"{gone[0]} is withdrawn; only declared pairs can be rotated")
    if not rows:
        raise InputError("nothing to rotate")
    with (
        delivering(ctl, "rotate"),
        ctl.agents() as agents,
    ):
        if recover(ctl, agents, progress):
            rows = inv.pairs(ids)  # a recovered rotation moved generations: start from those
        progress("resolving every affected node (minting meanwhile, in memory)", 0, 4)
        admins = admin_checks(rows, inv.module_specs({p["provider"] for p in rows}))
        answers = asking_state(agents, list(affected_nodes(rows)), listing=False, admins=admins)
        choices = session_choices(inv, rows, sessions)
        # in memory: dropped unless all resolve
        drains = drain_limits(inv, rows, choices)
        minted = mint(ctl, rows, revoke_old=revoke_old, sessions=choices, drains=drains)
        # break-glass needs the providers alone: a consumer's node that does not answer is
        # locked out like one that cannot take the credential
        needed = {node_of(p["provider"]) for p in rows} if revoke_old else None
        forward, ready = None, None  # a large rotation: built from the journal, in batches
        if len(rows) <= sending.BATCH:
            forward = payloads(inv, minted.items, "to", minted.generations, rows)
            ready = Ready.sign(agents, forward)  # signed, not sent: that waits for the journal
        del rows  # minted (and planned): every pair's row, 12 MiB at 10,000, is needed no more
        resolutions, _ = answers()
        failed = {
            r.node: r.reason
            for r in resolutions
            if not r.ok and (needed is None or r.node in needed)
        }
        if failed:
            inv.record("rotate", ids, {"refused": failed}, "not resolved")
            if all(r.admin_refused for r in resolutions if r.node in failed):
                raise ProviderRefusedError(failed)
            raise NotResolvedError(failed)
        progress("every node answered: journaling", 1, 4)
        rotation = store(ctl, minted, RotationState.DELIVERING)
        modes = inv.rotation_modes(ids)
        if (
            overlap is not None
            and not revoke_old
            and all(m.rotation == OVERLAP for m in modes.values())
        ):
            fault(ctl, "after-journal")
            return overlap(ctl, agents, rotation, progress, modes)
        handover = Handover(forward, ready)
        del minted, forward, ready  # the handover holds them alone from here
        fault(ctl, "after-journal")
        return execute(ctl, agents, rotation, progress, handover=handover)


@dataclass(frozen=True)
class Minted:
    """A rotation's next generations, sealed, and its items: in memory until :func:`store`."""

    generations: list[GenerationRow]
    items: list[RotationItem]


def mint(
    ctl: Reach,
    rows: list[PairRow],
    *,
    revoke_old: bool = False,
    held: Mapping[str, int] | None = None,
    sessions: Mapping[str, Sessions] | None = None,
    drains: Mapping[str, float] | None = None,
) -> Minted:
    """Mint and seal every pair's next generation; nothing is stored. ``revoke_old`` is
    journaled on each item, so a recovered rotation keeps it. ``held``: pair -> the highest
    generation one of its ends holds, when above the inventory's (an end ahead): the next is
    minted above it, since an agent never goes back. ``sessions``: each pair's choice for
    its old sessions, journaled on its item like ``revoke_old``; ``drains``: how long those left
    to drain may stay open (seconds), journaled the same way."""
    inv = ctl.inventory
    model_nodes = nodes_from_inventory(inv.nodes())
    taken = inv.minted(p["id"] for p in rows)
    above = held or {}
    alternates = alternating(inv, rows, inv.module_specs({p["provider"] for p in rows}))
    gens: list[GenerationRow] = []
    items: list[RotationItem] = []
    for p in rows:
        new = next_generation(  # a rolled-back attempt keeps its number
            p["generation"],
            above.get(p["id"], p["generation"]),
            taken.get(p["id"], ()),
            p["id"] in alternates,
        )
        gens.append(
            seal_generation(
                p["id"],
                new,
                model_nodes[node_of(p["consumer"])],
                model_nodes[node_of(p["provider"])],
            )
        )
        item: RotationItem = {"pair": p["id"], "from": p["generation"], "to": new}
        if revoke_old:
            item["revoke_old"] = True
        if sessions and p["id"] in sessions:
            item["sessions"] = sessions[p["id"]].value
        if drains and p["id"] in drains:
            item["drain_s"] = drains[p["id"]]
        items.append(item)
    return Minted(gens, items)


def store(
    ctl: Reach, minted: Minted, state: RotationState = RotationState.JOURNALED
) -> RotationStart:
    """Journal a minted rotation with its generations, in one transaction (one commit)."""
    items = minted.items
    with ctl.inventory.transaction("rotate") as tx:
        tx.add_generations(minted.generations)
        rid = tx.journal_rotation(items, os.getpid(), state)
        tx.audit(
            "rotate-begin",
            [i["pair"] for i in items],
            {"rotation": rid, "items": items},
            RotationState.JOURNALED,
        )
    return {"id": rid, "items": items}


def journal(ctl: Reach, rows: list[PairRow]) -> RotationStart:
    """Mint and seal every pair's next generation and journal the rotation, in one transaction."""
    return store(ctl, mint(ctl, rows))


@dataclass(frozen=True)
class Payloads:
    """One direction of a rotation's deliveries, built before anything is sent."""

    plan: Planner
    targets: dict[str, int]
    consumers: dict[str, list[ConsumerItem]]
    providers: dict[str, list[ProviderSet]]


def payloads(
    inv: Inventory,
    items: list[RotationItem],
    key: Literal["from", "to"],
    fresh: list[GenerationRow] | None = None,
    rows: list[PairRow] | None = None,
) -> Payloads:
    """What each end receives. Forward, each provider gets a delta (its manifest on disk is
    the base the inventory records); a rollback's base is not known (the forward delivery may
    or may not have landed), so it is sent whole. ``fresh``: generations not stored yet;
    ``rows``: the items' pairs as just read."""
    plan = Planner(inv, focus=[i["pair"] for i in items], fresh=fresh or (), rows=rows)
    if key == "to":  # forward, each provider ends or counts the old credential's sessions
        plan.sessions = journaled(items)
    targets = {i["pair"]: i[key] for i in items}
    providers = {(plan.pairs[pid]["provider"], plan.pairs[pid]["provision"]) for pid in targets}
    consumers = plan.consumer_items(targets, targets)
    if key == "to":
        return Payloads(plan, targets, consumers, plan.provider_deltas(providers, targets))
    return Payloads(plan, targets, consumers, plan.provider_sets(providers, targets))


@dataclass(frozen=True)
class Ready:
    """A forward delivery's requests, numbered and signed before they may be sent: the
    providers' deliveries and the consumers' prepares and deliveries (:class:`Ahead`)."""

    providers: dict[str, SignedRequest]
    ahead: Ahead

    @classmethod
    def sign(cls, agents: Agents, forward: Payloads) -> Ready:
        """Sign ``forward``'s requests now (while the nodes are being resolved)."""
        return cls(sign_providers(agents, forward.providers), Ahead(agents, forward.consumers))


@dataclass
class Handover:
    """A forward delivery built (and signed) before the journal, handed to :func:`execute`
    once: taken when sent, so its payloads are let go before the answers are recorded (rotate
    all at 10,000 pairs held them, ~35 MiB, through its final commit). None for a rotation
    too large to build ahead: :func:`execute` sends it in batches."""

    forward: Payloads | None
    ready: Ready | None = None

    def take(self) -> tuple[Payloads | None, Ready | None]:
        """The payloads and their signed requests; the handover holds neither after."""
        forward, ready = self.forward, self.ready
        self.forward = self.ready = None
        return forward, ready


def _deliver(
    ctl: Reach,
    agents: Agents,
    sent: Payloads | None,
    items: list[RotationItem],
    key: Literal["from", "to"],
    progress: Progress,
    step: int,
    ready: Ready | None = None,
    every_consumer: bool = False,
) -> Delivered:
    """Send one direction: providers, then consumers. The answers are gathered, not recorded:
    the caller records them (:meth:`Delivered.flush`, or in the rotation's final commit).
    ``sent``: the deliveries built whole; None: built and sent in batches.
    ``every_consumer``: a consumer that fails does not stop the others (break-glass)."""
    if sent is None:
        return _deliver_batches(ctl, agents, items, key, progress, step, every_consumer)
    inv = ctl.inventory
    plan, targets = sent.plan, sent.targets
    result = Delivered()
    progress("delivering to providers", step, 4)
    # forward, the consumers write theirs ahead while the providers apply (controller/ahead.py)
    ahead = None
    if key == "to":
        ahead = ready.ahead if ready is not None else Ahead(agents, sent.consumers)
        ahead.start()

    # answers are recorded after the consumers are sent, so nothing slow sits in the window
    send_providers(
        agents,
        inv,
        sent.providers,
        result,
        record=False,
        whole=plan.whole_set(targets),
        expected=plan.expected_bases,
        signed=ready.providers if ready is not None else None,
    )
    signed = ahead.signed() if ahead is not None else None
    if not _providers_applied(ctl, result, targets, key):
        return result
    progress("delivering to consumers", step + 1, 4)
    send_consumers(agents, inv, sent.consumers, result, record=False, signed=signed)
    return result


def _providers_applied(
    ctl: Reach, result: Delivered, targets: Iterable[str], key: Literal["from", "to"]
) -> bool:
    """Whether every pair's provider applied, so its consumer may be sent; the fault seam
    between the two ends (``after-providers:KEY``) records the answers before it raises."""
    if not all(result.provider_ok.get(pid, False) for pid in targets):
        return False
    try:
        fault(ctl, f"after-providers:{key}")
    except BaseException:
        result.flush(ctl.inventory)
        raise
    return True


@dataclass
class _Going:
    """One batch of provider deliveries on its way (:func:`_deliver_batches` builds the next
    meanwhile: two batches' payloads at most, and two provider nodes applying at once)."""

    plan: Planner
    sets: dict[str, list[ProviderSet]]
    batch: list[str]
    answering: Callable[[], Mapping[str, DeliverAnswer | AgentError]]

    def settle(
        self, agents: Agents, inv: Inventory, targets: dict[str, int], result: Delivered
    ) -> bool:
        """Wait for the batch's answers and gather them (a refused delta sent again whole);
        whether every pair of the batch applied."""
        plan = self.plan
        send_providers(
            agents,
            inv,
            self.sets,
            result,
            record=False,
            whole=plan.whole_set(targets),
            expected=plan.expected_bases,
            answering=self.answering,
        )
        return all(result.provider_ok.get(pid, False) for pid in self.batch)


def _deliver_batches(
    ctl: Reach,
    agents: Agents,
    items: list[RotationItem],
    key: Literal["from", "to"],
    progress: Progress,
    step: int,
    every_consumer: bool = False,
) -> Delivered:
    """:func:`_deliver` of a large rotation: the providers' deliveries, then (once every
    provider applied) the consumers', a batch of nodes at a time (:func:`node_batches`), each
    built from the journal when it is sent and let go after, so at most one batch's payloads
    are held at once. The order is the same act's: no consumer is sent anything before every
    provider applied. Forward, the first batch in which an end failed ends the sending (the
    caller rolls every pair back); a rollback tries every batch."""
    inv = ctl.inventory
    targets = {i["pair"]: i[key] for i in items}
    ends = {pid: split_pair_id(pid) for pid in targets}  # (provision, consumer, provider)
    result = Delivered()
    forward = key == "to"
    progress("delivering to providers", step, 4)
    going: _Going | None = None  # the batch on its way while the next one is built
    for batch in node_batches(targets, lambda pid: node_of(ends[pid][2])):
        plan = Planner(inv, focus=batch)
        if forward:
            plan.sessions = journaled(items)
        part = {pid: targets[pid] for pid in batch}
        keys = {(ends[pid][2], ends[pid][0]) for pid in batch}
        sets = plan.provider_deltas(keys, part) if forward else plan.provider_sets(keys, part)
        this = _Going(plan, sets, batch, begin_providers(agents, sets))
        del plan, sets
        if going is not None and not going.settle(agents, inv, targets, result) and forward:
            this.settle(agents, inv, targets, result)  # already sent: its answers recorded
            return result
        going = this
    if going is not None:
        going.settle(agents, inv, targets, result)
    if not _providers_applied(ctl, result, targets, key):
        return result
    progress("delivering to consumers", step + 1, 4)
    for batch in node_batches(targets, lambda pid: node_of(ends[pid][1])):
        plan = Planner(inv, focus=batch)
        sent = plan.consumer_items(batch, {pid: targets[pid] for pid in batch})
        del plan
        send_consumers(agents, inv, sent, result, record=False)
        del sent
        failed = not all(result.consumer_ok.get(pid, False) for pid in batch)
        if forward and failed and not every_consumer:
            return result
        fault(ctl, f"after-consumer-batch:{key}")
    return result


def execute(
    ctl: Reach,
    agents: Agents,
    rotation: RotationStart,
    progress: Progress,
    *,
    handover: Handover | None = None,
) -> RotationReport:
    """Deliver a journaled rotation; finish it all-new, or roll it back to all-old.

    ``handover``: its deliveries as :func:`rotate` built them (and signed), journaled as
    delivering by this process; without, the rotation (a recovered one) is marked delivering
    and built here."""
    inv = ctl.inventory
    items = rotation["items"]
    if handover is None:  # a recovered rotation: this process delivers it from here
        with inv.transaction("rotate") as tx:
            tx.update_rotation(
                rotation["id"], {"state": RotationState.DELIVERING, "owner_pid": os.getpid()}
            )
    forward, ready = handover.take() if handover is not None else (None, None)
    if forward is None and len(items) <= sending.BATCH:
        forward = payloads(inv, items, "to")
    revoke_old = any(i.get("revoke_old") for i in items)
    there = _deliver(ctl, agents, forward, items, "to", progress, 2, ready, revoke_old)
    del forward, ready  # sent: their payloads go before the answers are recorded
    applied = all(there.provider_ok.get(i["pair"]) for i in items)
    if applied and (revoke_old or all(there.consumer_ok.get(i["pair"]) for i in items)):
        return _finish(ctl, rotation, there, progress)  # the answers recorded in its commit
    there.flush(inv)
    return roll_back(ctl, agents, rotation, there.errors, progress)


def roll_back(
    ctl: Reach,
    agents: Agents,
    rotation: RotationStart,
    errors: Mapping[str, str],
    progress: Progress,
) -> RotationReport:
    """Deliver every pair's old generation to both ends again (its manifests whole) and end
    the rotation rolled back, or converging when an end could not be reached; ``errors``: why
    the forward delivery stopped, by pair."""
    inv = ctl.inventory
    items = rotation["items"]
    reason = "; ".join(sorted(set(errors.values()))) or "an end did not confirm"
    progress("rolling back", 3, 4)
    with inv.transaction("rotate") as tx:
        tx.update_rotation(rotation["id"], {"state": RotationState.ROLLING_BACK, "reason": reason})
    whole = payloads(inv, items, "from") if len(items) <= sending.BATCH else None
    back = _deliver(ctl, agents, whole, items, "from", progress, 3)
    del whole
    back.flush(inv)
    complete = all(
        back.provider_ok.get(i["pair"]) and back.consumer_ok.get(i["pair"]) for i in items
    )
    outcome = RotationState.ROLLED_BACK if complete else RotationState.CONVERGING
    stamp = now()
    with inv.transaction("rotate") as tx:
        for i in items:
            tx.discard_generation(i["pair"], i["to"], stamp)
        tx.update_rotation(
            rotation["id"],
            {"state": outcome, "finished_at": stamp, "outcome": outcome, "reason": reason},
        )
        tx.audit(
            "rotate",
            [i["pair"] for i in items],
            {
                "rotation": rotation["id"],
                "reason": reason,
                "rollback_unreached": sorted(back.errors),
            },
            outcome,
        )
    pairs = [
        PairOutcome(
            pair=i["pair"],
            ok=False,
            generation=i["from"],
            previous=i["from"],
            reason=errors.get(i["pair"], "rolled back with the others"),
        )
        for i in items
    ]
    for n, i in enumerate(items, 1):
        pid, why = i["pair"], errors.get(i["pair"])
        if back.provider_ok.get(pid) and back.consumer_ok.get(pid):
            line = f"{pid}: rolled back to generation {i['from']}"
            line += f" ({why})" if why else " with the others"
        else:
            left = back.errors.get(pid, "an end did not confirm")
            line = f"{pid}: NOT rolled back yet ({left}); push converges it"
        progress(line, n, len(items))
    note = "" if complete else " (some ends could not be rolled back yet; push converges them)"
    return RotationReport(
        rotation=rotation["id"], outcome=outcome, pairs=pairs, reason=reason + note
    )


RELOAD_AGAIN = "every end holds the new credential; push tries the rest again"
"""What a rotation done with a failed reload or pin adds to its reason."""


def _finish(
    ctl: Reach, rotation: RotationStart, result: Delivered, progress: Progress
) -> RotationReport:
    """Every provider holds the new generation: so does the pair. Every consumer took it, or
    (break-glass) the ones that did not are locked out: named in the report and the audit."""
    inv = ctl.inventory
    items = rotation["items"]
    stamp = now()
    windows = {i["pair"]: result.window_ms(i["pair"]) for i in items}
    locked = {
        i["pair"]: locked_out_reason(i, result.errors.get(i["pair"], "it did not confirm"))
        for i in items
        if not result.consumer_ok.get(i["pair"])
    }
    outcome = RotationState.LOCKED_OUT if locked else RotationState.DONE
    detail: dict[str, object] = {}
    if any(i.get("revoke_old") for i in items):
        detail["locked_out"] = locked
    if result.sessions:
        detail["sessions"] = {
            pid: {"count": s.count, "left": s.left, "ended": s.ended}
            for pid, s in sorted(result.sessions.items())
        }
    draining, drained = begun(inv, rotation["id"], items, result.sessions, stamp)
    answers = result.staged(inv)
    with inv.transaction("rotate") as tx:
        if answers is not None:
            answers(tx)
        tx.forget_drains(drained)
        tx.put_drains(draining)
        for i in items:
            tx.set_generation(i["pair"], i["to"], stamp)
            tx.discard_generation(i["pair"], i["from"], stamp)
        tx.update_rotation(
            rotation["id"], {"state": outcome, "finished_at": stamp, "outcome": outcome}
        )
        tx.audit(
            "rotate-revoke-old" if "locked_out" in detail else "rotate",
            [i["pair"] for i in items],
            {
                "rotation": rotation["id"],
                "windows_ms": windows,
                "generations": {i["pair"]: i["to"] for i in items},
                **detail,
            },
            outcome,
        )
    for n, i in enumerate(items, 1):
        window = windows[i["pair"]]
        took = f"window {window:.1f} ms" if window is not None else "window not measured"
        failed = locked.get(i["pair"]) or result.errors.get(i["pair"])  # or its reload failed
        took += f"; {failed}" if failed else ""
        took += _sessions_said(result.sessions.get(i["pair"]))
        progress(f"{i['pair']}: generation {i['from']}->{i['to']}, {took}", n, len(items))
    failures = sorted({why for pid, why in result.errors.items() if pid in windows})
    if locked:
        reason = (
            f"{LOCKED_OUT}: {len(locked)} of {len(items)} consumers could not take the new "
            "credential and the old one is revoked; fix each, then meshtui push"
        )
    else:
        reason = f"{'; '.join(failures)} ({RELOAD_AGAIN})" if failures else ""
    return RotationReport(
        rotation=rotation["id"],
        outcome=outcome,
        pairs=[
            PairOutcome(
                pair=i["pair"],
                ok=i["pair"] not in result.errors,
                generation=i["to"],
                previous=i["from"],
                window_ms=windows[i["pair"]],
                reason=locked.get(i["pair"]) or result.errors.get(i["pair"], ""),
                **_sessions_fields(result.sessions.get(i["pair"])),
            )
            for i in items
        ],
        reason=reason,
    )


def _sessions_said(done: SessionsSettled | None) -> str:
    """A rotation line's word on the old credential's sessions (nothing when none was asked,
    or when they could not be settled: the error says so)."""
    said = sessions_said(done.count, done.left, done.ended) if done is not None else ""
    return f"; {said}" if said else ""


class SessionsFields(TypedDict, total=False):
    """:class:`PairOutcome`'s fields for the old credential's sessions, as keywords."""

    sessions: int | None
    sessions_left: int | None
    sessions_ended: bool


def _sessions_fields(done: SessionsSettled | None) -> SessionsFields:
    """A pair's outcome fields for its old sessions (none when none were asked about)."""
    if done is None:
        return {}
    return {"sessions": done.count, "sessions_left": done.left, "sessions_ended": done.ended}


def locked_out_reason(item: RotationItem, why: str) -> str:
    """What a break-glass rotation says of a consumer end that could not take the new
    credential: locked out, why, and the way out."""
    _, consumer, provider = split_pair_id(item["pair"])
    return (
        f"{LOCKED_OUT}: {consumer} could not take generation {item['to']} ({why}); the old "
        f"credential is revoked at {provider}; fix it, then meshtui push"
    )


def recover(ctl: Reach, agents: Agents, progress: Progress) -> list[RotationReport]:
    """Finish (or roll back) rotations a dead controller left journaled; call under the lock.
    An overlap whose consumer had not proved the new credential is rolled back, never swapped
    (:data:`UNPROVED_OVERLAP`)."""
    reports = []
    for rotation in ctl.inventory.open_rotations():
        progress(f"recovering rotation {rotation['id']}", 0, 4)
        ctl.inventory.record(
            "rotate-recover",
            [i["pair"] for i in rotation["items"]],
            {
                "rotation": rotation["id"],
                "state": rotation["state"],
                "owner_pid": rotation["owner_pid"],
            },
            "resuming",
        )
        if rotation["state"] in UNPROVED_OVERLAP:  # the new not proved: the old alone again
            why = "an overlap was interrupted before the consumer proved the new credential"
            errors = {i["pair"]: why for i in rotation["items"]}
            reports.append(roll_back_overlap(ctl, agents, rotation, errors, progress))
        else:  # a swap, or an overlap whose consumer proved the new: the old goes
            reports.append(execute(ctl, agents, rotation, progress))
    return reports


def roll_back_overlap(
    ctl: Reach,
    agents: Agents,
    rotation: RotationStart,
    errors: Mapping[str, str],
    progress: Progress,
) -> RotationReport:
    """:func:`roll_back` of an overlap: its consumers are given the old credential first, while
    their providers still accept both, so a consumer that held the new is refused at no moment;
    then, once the settle is over (:attr:`~meshtui.model.RotationMode.settle`: an app that read
    the new a moment before still logs in with it), both ends as any rollback (the providers'
    new removed)."""
    back = payloads(ctl.inventory, rotation["items"], "from")
    send_consumers(agents, ctl.inventory, back.consumers, Delivered(), record=False)
    modes = ctl.inventory.rotation_modes([i["pair"] for i in rotation["items"]])
    time.sleep(max((m.settle for m in modes.values()), default=0.0))
    return roll_back(ctl, agents, rotation, errors, progress)


UNPROVED_OVERLAP = (RotationState.ADDING_NEW, RotationState.BOTH_ACCEPTED)
"""An overlap interrupted in these states is rolled back (its provider may accept both, its
consumer holds either): finishing it as a swap would refuse the old before the consumer had the
new. One interrupted at ``removing old`` is finished: its consumer logged in with the new."""
