"""``meshtui push``: bring every end to the generation the inventory says it must hold.

It first asks every node what it holds (so a lost reply or a deleted file is noticed), and every
provider node what its server holds (the provisioner's read-only inspection, so a password
changed outside meshtui is noticed and re-applied), finishes or rolls back a rotation a dead
controller left journaled, delivers only what is behind (providers first, then consumers), and
revokes withdrawn pairs. Run twice, it changes nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from meshtui import crypto
from meshtui.controller.act import drain
from meshtui.controller.act.catchup import settle
from meshtui.controller.act.recording import (
    KEPT_FAILURES,
    Delivered,
    EndRow,
    held_generations,
    probe_row,
    record_end,
)
from meshtui.controller.act.rotate import recover
from meshtui.controller.act.sending import batches, node_batches, send_consumers, send_providers
from meshtui.controller.agents.client import STATE_TIMEOUT_S, Agents, by_pair, missing_reason
from meshtui.controller.lock import delivering
from meshtui.controller.plan.claims import own_inspections
from meshtui.controller.plan.claims import record as record_claims
from meshtui.controller.plan.planner import Planner
from meshtui.controller.plan.resolve import ask_state, inspection
from meshtui.controller.read import status as status_mod
from meshtui.controller.reports import Claim, PairOutcome, Progress, PushReport, Resolution
from meshtui.credential_unit import unit_digest
from meshtui.errors import AgentError
from meshtui.inventory import Inventory, now
from meshtui.inventory.rows import HeldEnd, PairRow, ProbeRecord, Provision
from meshtui.model import Drift, End, State, Verdict, node_of
from meshtui.protocol import messages
from meshtui.protocol.messages import (
    Holding,
    InspectSpec,
    StateRequest,
    WithdrawItem,
    WithdrawRequest,
)

if TYPE_CHECKING:
    from meshtui.controller.reach import Reach


UNVERIFIED_HINT = (
    "the consumer's node must reach the provider and be refused: start its agent, and let the "
    "server answer its address (a pg_hba.conf line for it), then push again"
)
"""What push says to do about a withdrawn pair whose revocation was not verified."""


def push(ctl: Reach, progress: Progress) -> PushReport:
    """Converge every end; the report names who is still behind."""
    with (
        delivering(ctl, "push"),
        ctl.agents() as agents,
    ):
        recover(ctl, agents, progress)
        run = Push(ctl, agents, progress)
        holdings = run.settle(run.ask())
        run.note_held(holdings)
        del holdings  # the holdings and every pair's row (read next) are never held at once
        run.find_drift()
        run.plan()
        run.deliver_providers()
        run.deliver_consumers()
        run.revoke_withdrawn()
        drain.check(ctl, agents)  # sessions left to drain: counted, or ended once overdue
        return run.record()


Connection = tuple[str | None, str | None]
"""A consumer's connection file as its agent last wrote it: (file, digest of its text)."""


@dataclass
class Push:
    """One push, in the order its steps run: :meth:`ask` what every node holds, :meth:`settle`
    what is ahead and catch it up, :meth:`note_held` and :meth:`find_drift` (what is behind,
    changed outside or claimed), :meth:`plan` what each provider must be sent, deliver to
    providers then consumers, revoke withdrawn pairs, and :meth:`record` the outcome.

    Each step fills the fields it names for the steps after it. Only the few facts push goes on
    with are kept: every holding is a dict of some 800 bytes (16 MiB at 10,000 pairs held at
    both ends), every end's row as a dict 12 MiB per copy.
    """

    ctl: Reach
    agents: Agents
    progress: Progress
    nodes: list[str] = field(default_factory=list)
    resolutions: list[Resolution] = field(default_factory=list)
    unreachable: dict[str, str] = field(default_factory=dict)
    """node -> why it did not answer."""
    ahead: dict[str, str] = field(default_factory=dict)
    """pair -> which ends were ahead of the inventory and what became of it (and the pairs
    the nodes hold that the inventory has no record of)."""
    unknown: dict[str, str] = field(default_factory=dict)
    """pair -> held by nodes but not in this inventory: not in agreement."""
    found_before: dict[tuple[str, str], HeldEnd] = field(default_factory=dict)
    """The ends a drift was found on and is still unrepaired: it keeps the time it was found."""
    answered: list[str] = field(default_factory=list)
    held_by_provider: set[str] = field(default_factory=set)
    held_by_consumer: set[str] = field(default_factory=set)
    held_connection: dict[str, Connection] = field(default_factory=dict)
    held_unit: dict[str, str | None] = field(default_factory=dict)
    """pair -> the unit its consumer's agent last wrote (format and lines but the password)."""
    planner: Planner = field(init=False)
    """The whole mesh, read once the answers are recorded (and any end ahead rotated past)."""
    drift: dict[str, str] = field(default_factory=dict)
    """pair -> what its provider's server was found holding instead of what was delivered."""
    found: dict[str, str] = field(default_factory=dict)
    """pair -> what an end's file was found to be instead of what was written (the agents'
    answers): delivered again, and said."""
    claims: dict[str, str] = field(default_factory=dict)
    """node -> what it claimed of ends not its own."""
    deliveries: dict[tuple[str, str], HeldEnd] = field(default_factory=dict)
    """What each end holds as recorded, read again once the providers are delivered to."""
    before: dict[tuple[str, str], tuple[int | None, bool]] = field(default_factory=dict)
    """What each end held before this push: its generation and whether its last delivery
    failed after all."""
    live: list[PairRow] = field(default_factory=list)
    withdrawn: list[PairRow] = field(default_factory=list)
    providers_due: set[Provision] = field(default_factory=set)
    """The provisions whose manifests are sent whole this push."""
    result: Delivered = field(default_factory=Delivered)
    revoked: list[PairOutcome] = field(default_factory=list)

    def ask(self) -> dict[str, list[Holding]]:
        """Ask every node what it holds (so a lost reply or a deleted file is noticed)."""
        self.progress("asking every node what it holds", 0, 4)
        self.nodes = sorted(self.ctl.inventory.nodes())
        self.resolutions, holdings = ask_state(self.agents, self.nodes)
        return holdings

    def settle(self, holdings: dict[str, list[Holding]]) -> dict[str, list[Holding]]:
        """Jump the sequence past nodes that refused it as older and rotate every pair with an
        end ahead of the inventory past it (:func:`catchup.settle`); the nodes' answers, asked
        again when that changed anything (and why a node's number was doubted)."""
        settled = settle(
            self.ctl, self.agents, self.nodes, self.resolutions, holdings, self.progress
        )
        self.resolutions = settled.resolutions
        self.ahead, self.unknown = settled.ahead, settled.unknown
        self.unreachable = {r.node: r.reason for r in self.resolutions if not r.ok}
        return settled.holdings

    def note_held(self, holdings: Mapping[str, list[Holding]]) -> None:
        """Correct the deliveries table from the nodes' answers, and keep of them only the
        few facts push goes on with: which pairs each end holds, and each consumer's
        connection file as last written."""
        inv = self.ctl.inventory
        # only the ends a drift was found on: every end's tuple is ~400 bytes
        self.found_before = {
            key: end
            for key, end in inv.held_ends().items()
            if end[3] and str(end[3]).startswith(status_mod.DRIFT)
        }
        self.found = held_generations(inv, holdings)
        self.answered = sorted(set(holdings))
        self.held_by_provider = {
            h["pair"] for hs in holdings.values() for h in hs if h["end"] == End.PROVIDER
        }
        self.held_by_consumer = {
            h["pair"] for hs in holdings.values() for h in hs if h["end"] == End.CONSUMER
        }
        self.held_connection = {
            h["pair"]: (h.get("connection"), h.get("connection_digest"))
            for hs in holdings.values()
            for h in hs
            if h["end"] == End.CONSUMER
        }
        self.held_unit = {
            h["pair"]: h.get("unit_digest")
            for hs in holdings.values()
            for h in hs
            if h["end"] == End.CONSUMER
        }

    def find_drift(self) -> None:
        """Read the whole mesh, ask each provider's server what it holds (a password changed
        outside meshtui is re-applied), record the drift found and every node's claims on
        ends not its own, and note what each end held before this push."""
        inv = self.ctl.inventory
        self.planner = Planner(inv)
        provider_ends = {k: e for k, e in inv.held_ends().items() if k[1] == End.PROVIDER.value}
        claimed = [c for r in self.resolutions for c in r.claims]  # a node's word on others' ends
        self.drift = _drift(
            self.agents, self.planner, self.answered, provider_ends, self.found_before, claimed
        )
        del provider_ends
        self.found_before = {}
        self.claims = record_claims(inv, claimed)
        _record_drift(inv, self.planner, self.drift)
        self.deliveries = inv.held_ends()
        self.before = {
            key: (d[0], str(d[3] or "").startswith(KEPT_FAILURES))
            for key, d in self.deliveries.items()
        }

    def plan(self) -> None:
        """Which provisions' manifests are sent: those with a live end behind, a withdrawn
        pair its provider still holds, or a login changed outside meshtui."""
        pairs = self.planner.pairs
        self.live = [p for p in pairs.values() if not p["withdrawn_at"]]
        self.withdrawn = [p for p in pairs.values() if p["withdrawn_at"]]
        due = {
            (p["provider"], p["provision"]) for p in self.live if self.behind(p["id"], End.PROVIDER)
        }
        due |= {
            (p["provider"], p["provision"])
            for p in self.withdrawn
            if p["id"] in self.held_by_provider
        }
        due |= {(pairs[pid]["provider"], pairs[pid]["provision"]) for pid in self.drift}
        self.providers_due = due

    def deliver_providers(self) -> None:
        """Send the due manifests a batch of provider nodes at a time (each batch's manifests
        let go once sent: every provider's at once, sealed secrets and all, was 14 MiB at
        10,000 pairs); an unreachable provider fails each of its consumers."""
        inv, plan, unreachable = self.ctl.inventory, self.planner, self.unreachable
        self.progress("delivering to providers", 1, 4)
        for keys in _provider_batches(self.providers_due, self.live):
            sets = plan.provider_sets(keys, {})
            reached = {n: s for n, s in sets.items() if n not in unreachable}
            send_providers(self.agents, inv, reached, self.result)
            for node in set(sets) & set(unreachable):
                for spec in sets[node]:
                    for c in spec["consumers"]:
                        self.result.fail(c["pair"], f"provider {node}: {unreachable[node]}")
            del sets, reached
        _record_repairs(inv, plan, self.drift, self.result)
        self.deliveries = inv.held_ends()

    def consumers_due(self) -> list[str]:
        """The live pairs whose consumer is behind and can be sent now; one whose provider
        does not hold the generation yet waits (it would hold a password nobody accepts)."""
        todo = [
            p["id"]
            for p in self.live
            if self.behind(p["id"], End.CONSUMER)
            and not self.short(p["id"], End.PROVIDER)
            and node_of(p["consumer"]) not in self.unreachable
        ]
        for p in self.live:
            if self.behind(p["id"], End.CONSUMER) and self.short(p["id"], End.PROVIDER):
                self.result.fail(p["id"], "consumer waits until its provider holds the generation")
        return todo

    def deliver_consumers(self) -> None:
        """Send each due consumer its credential, a batch of nodes at a time."""
        self.progress("delivering to consumers", 2, 4)
        plan = self.planner
        for batch in node_batches(
            self.consumers_due(), lambda pid: node_of(plan.pairs[pid]["consumer"])
        ):
            send_consumers(
                self.agents, self.ctl.inventory, plan.consumer_items(batch, {}), self.result
            )

    def revoke_withdrawn(self) -> None:
        """Revoke the withdrawn pairs a consumer still holds, once their provider no longer
        does: only then is the login gone, so its node is asked again first."""
        self.progress("revoking withdrawn pairs", 3, 4)
        providers_now = {node_of(p["provider"]) for p in self.withdrawn} - set(self.unreachable)
        _, after = ask_state(self.agents, sorted(providers_now))
        still_at_provider = {
            h["pair"] for hs in after.values() for h in hs if h["end"] == "provider"
        }
        self.revoked = revoke(
            self.ctl,
            self.agents,
            self.planner,
            [
                p["id"]
                for p in self.withdrawn
                if p["id"] in self.held_by_consumer
                and p["id"] not in still_at_provider
                and node_of(p["provider"]) in after
                and node_of(p["consumer"]) not in self.unreachable
            ],
        )

    def record(self) -> PushReport:
        """Audit the push (one ``push`` event) and report: the pairs that moved, those still
        behind and why, and those known only to be cut off by a node that did not answer."""
        inv, result, drift = self.ctl.inventory, self.result, self.drift
        delivered = [
            PairOutcome(
                pair=pid,
                ok=result.provider_ok.get(pid, True)
                and result.consumer_ok.get(pid, True)
                and pid not in result.errors,
                generation=self.planner.pairs[pid]["generation"],
                reason=result.errors.get(pid, "")
                or (f"re-applied: {drift[pid]}" if pid in drift else "")
                or (f"written again: {self.found[pid]}" if pid in self.found else ""),
            )
            for pid in sorted(set(result.provider_ok) | set(result.consumer_ok))
            # a manifest carries every consumer of its provider: list only the ends that moved
            if pid in result.errors or self.was_behind(pid) or pid in drift
        ]
        behind_now, cut_off, by_probe = self.still_behind()
        inv.record(
            "push",
            [o.pair for o in delivered] + [o.pair for o in self.revoked],
            {
                "delivered": len(delivered),
                "revoked": len(self.revoked),
                "behind": len(behind_now),
                "unreachable": sorted(self.unreachable),
                "changed_outside": sorted(drift),
                "written_again": sorted(p for p in self.found if p in {o.pair for o in delivered}),
                "ahead": sorted(self.ahead),
            },
            "ok" if not behind_now else "behind",
        )
        self.progress("done", 4, 4)
        return PushReport(
            delivered=delivered,
            withdrawn=self.revoked,
            behind=behind_now,
            ahead=self.ahead,
            unreachable=sorted(cut_off),
            stale_by_probe=by_probe,
            claims=self.claims,
            repaired={
                o.pair: o.reason
                for o in delivered
                if o.ok and o.reason.startswith(("re-applied: ", "written again: "))
            },
        )

    def still_behind(self) -> tuple[dict[str, str], set[str], dict[str, str]]:
        """pair -> why it is still behind, read from the statuses now; the pairs not known
        behind, only cut off because a node of theirs did not answer; and the pairs stale by
        their last probe alone (every end holds its generation: nothing to deliver)."""
        rows = status_mod.statuses(self.ctl.inventory)
        by_probe = {
            r.pair: r.reason
            for r in rows
            if r.state is State.STALE
            and not r.withdrawn
            and not r.alarm
            and r.reason.startswith((status_mod.PROBE_REFUSED, status_mod.PROBE_UNDECIDED))
        }
        behind_now = {
            r.pair: r.reason
            for r in rows
            if ((r.state is State.STALE and not r.withdrawn) or r.alarm) and r.pair not in by_probe
        }
        # a withdrawal whose refusal was not seen is not done: the old login may still work
        behind_now |= {
            r.pair: f"{r.reason} ({UNVERIFIED_HINT})"
            for r in rows
            if r.withdrawn and r.state is State.STALE and not r.alarm
        }
        behind_now.update(self.unknown)  # held by nodes, unknown here: not in agreement
        cut_off: set[str] = set()
        for node, why in self.unreachable.items():
            for r in rows:
                if node in (r.consumer_node, r.provider_node) and not r.withdrawn:
                    said, down = behind_now.get(r.pair), f"{node} unreachable: {why}"
                    if said is None or r.pair in cut_off:
                        cut_off.add(r.pair)
                    behind_now[r.pair] = down if said is None else f"{said}; {down}"
        return behind_now, cut_off, by_probe

    def was_behind(self, pid: str) -> bool:
        """Before this push, an end of the pair was short of its generation, its last delivery
        failed after all, or its connection file differed."""
        want = self.planner.pairs[pid]["generation"]
        ends = [self.before.get((pid, end.value)) for end in End]
        return (
            any((e[0] if e else None) != want for e in ends)
            or any(e[1] for e in ends if e)
            or self.connection_differs(pid)
        )

    def short(self, pid: str, end: End) -> bool:
        """The end is recorded holding no generation, or not the pair's."""
        d = self.deliveries.get((pid, end.value))
        return d is None or d[0] != self.planner.pairs[pid]["generation"]

    def connection_differs(self, pid: str) -> bool:
        """The declared connection file, or the credential file's lines but the password, are
        not what the consumer's agent last wrote."""
        unit = self.planner.unit(pid)
        if pid in self.held_unit and self.held_unit[pid] != (
            None if unit is None else unit_digest(unit["format"], unit["fields"])
        ):
            return True
        want = self.planner.connection(pid)
        if want is None:
            return False
        held = self.held_connection.get(pid)
        digest = crypto.secret_digest(want["text"].encode("utf-8"))
        return held is None or held != (want["file"], digest)

    def behind(self, pid: str, end: End) -> bool:
        """The end must be sent: short of its generation, its connection file differs (both
        ends of an alternating pair: the file names a login the provider makes), or a reload or
        a pin failed (it holds the credential, not all it should)."""
        if self.short(pid, end):
            return True
        if self.connection_differs(pid) and (
            end is End.CONSUMER
            or self.planner.alternate(pid, self.planner.pairs[pid]["generation"])
        ):  # an alternating pair's new login is the provider's to make before the consumer's
            return True
        d = self.deliveries.get((pid, end.value))
        return d is not None and str(d[3] or "").startswith(KEPT_FAILURES)


def _provider_batches(needed: set[Provision], live: list[PairRow]) -> list[list[Provision]]:
    """The provisions to deliver whole, in :func:`batches` of provider nodes (each node's
    size: the live consumers of its provisions, one line of a manifest each)."""
    counts = Counter((p["provider"], p["provision"]) for p in live)
    by_node: dict[str, list[Provision]] = {}
    for key in sorted(needed):
        by_node.setdefault(node_of(key[0]), []).append(key)
    sizes = {node: sum(counts[k] for k in keys) for node, keys in by_node.items()}
    return [[k for node in nodes for k in by_node[node]] for nodes in batches(sizes)]


def _held(end: HeldEnd | None) -> int | None:
    """The generation an end's row says it holds (None: no row, or never delivered)."""
    return end[0] if end else None


def _drift(
    agents: Agents,
    plan: Planner,
    answered: list[str],
    deliveries: Mapping[tuple[str, str], HeldEnd],
    found_before: Mapping[tuple[str, str], HeldEnd],
    claims: list[Claim],
) -> dict[str, str]:
    """pair id -> what a provider's server was found holding instead of what meshtui delivered.

    Asks each provider node that answered for its provisioner's read-only inspection of every
    live manifest it serves; a login its server no longer holds as delivered (password, login
    right, record or database changed, or the login gone) is drift, stamped with the time.
    Only ends recorded as holding their generation count: one still behind is delivered anyway.
    A node's inspection of a server that is not its own is added to ``claims``, not believed.
    """
    specs: dict[str, list[InspectSpec]] = {}
    by_login: dict[tuple[str, str, str], str] = {}
    for p in plan.pairs.values():
        if (
            p["withdrawn_at"]
            or node_of(p["provider"]) not in answered
            or _held(deliveries.get((p["id"], End.PROVIDER.value))) != p["generation"]
        ):
            continue
        by_login[(p["provider"], p["provision"], p["login"])] = p["id"]
        key = inspection(p, plan.modules[p["provider"]]["spec"])
        wanted = specs.setdefault(node_of(p["provider"]), [])
        if key not in wanted:
            wanted.append(key)
    if not specs:
        return {}
    answers = agents.call_many(
        messages.STATE,
        {n: StateRequest(inspect=s) for n, s in specs.items()},
        timeout=STATE_TIMEOUT_S,
    )
    stamp = now()
    out: dict[str, str] = {}
    for node, answer in answers.items():
        if isinstance(answer, AgentError):
            continue  # unreachable now: the delivery round reports it
        inspected, foreign = own_inspections(node, answer.get("inspected", []))
        claims.extend(foreign)
        for got in inspected:  # none: nothing was asked of that node
            for found in got["logins"]:
                pid = by_login.get((got["provider"], got["provision"], found["login"]))
                if pid is not None and found["verdict"] in (Drift.CHANGED, Drift.MISSING):
                    before = found_before.get((pid, End.PROVIDER.value))
                    earlier = before[3] if before else None
                    if earlier and str(earlier).startswith(status_mod.DRIFT):
                        out[pid] = str(earlier).split("; ", 1)[0]
                    else:
                        why = found["reason"] or "gone"
                        out[pid] = f"{status_mod.DRIFT}{stamp} ({why})"
    return out


def _record_drift(inv: Inventory, plan: Planner, drift: dict[str, str]) -> None:
    """The provider end of each drifted pair is behind until re-applied: record why."""
    record_end(inv, [(pid, End.PROVIDER, None, None, why) for pid, why in drift.items()])


def _record_repairs(
    inv: Inventory, plan: Planner, drift: dict[str, str], result: Delivered
) -> None:
    """Keep the drift's time in the provider end's row: repaired (a note) or still failing."""
    rows: list[EndRow] = []
    ends = inv.held_ends(list(drift)) if drift else {}
    for pid, why in drift.items():
        if result.provider_ok.get(pid):
            gen = plan.pairs[pid]["generation"]
            held = ends.get((pid, End.PROVIDER.value))
            digest = held[1] if held else None
            rows.append((pid, End.PROVIDER, gen, digest, f"{status_mod.REPAIRED}{why}"))
        else:
            failed = result.errors.get(pid, "not re-applied")
            rows.append((pid, End.PROVIDER, None, None, f"{why}; {failed}"))
    record_end(inv, rows)


def revoke(ctl: Reach, agents: Agents, plan: Planner, pids: list[str]) -> list[PairOutcome]:
    """Consumers of withdrawn pairs try their last credential once; only a refusal deletes it."""
    by_node: dict[str, list[WithdrawItem]] = {}
    for pid in pids:
        p = plan.pairs[pid]
        by_node.setdefault(node_of(p["consumer"]), []).append(
            WithdrawItem(pair=pid, file=p["file"], target=plan.target(pid))
        )
    if not by_node:
        return []
    answers = agents.call_many(
        messages.WITHDRAW, {n: WithdrawRequest(consumer=i) for n, i in by_node.items()}
    )
    out: list[PairOutcome] = []
    probes: list[ProbeRecord] = []
    gone: list[str] = []
    stamp = now()
    for node, items in by_node.items():
        answer = answers[node]
        got = by_pair(answer, lambda a: a["consumer"])
        for item in items:
            pid = item["pair"]
            g = got.get(pid)
            if g is None:
                reason = missing_reason(answer, None, "no answer")
                out.append(
                    PairOutcome(
                        pair=pid, ok=False, generation=plan.pairs[pid]["generation"], reason=reason
                    )
                )
                continue
            probe = g["probe"]
            if g["removed"] or probe is None:
                gone.append(pid)  # refused and deleted, or nothing was held any more
            verdict = probe["verdict"] if probe else Verdict.UNKNOWN
            reason = probe["reason"] if probe else "no credential was held"
            if probe:
                probes.append(
                    probe_row(pid, plan.pairs[pid]["generation"], probe, stamp, withdrawn=True)
                )
            out.append(
                PairOutcome(
                    pair=pid,
                    ok=verdict == Verdict.REFUSED,
                    generation=plan.pairs[pid]["generation"],
                    reason=f"{verdict}: {reason}",
                )
            )
    with ctl.inventory.transaction("record revocation probes") as tx:
        tx.add_probes(probes)
        tx.forget_consumer_ends(gone)
    return out
