"""``meshtui watch``: the unattended loop. Each cycle recovers an interrupted rotation, pushes
what is behind (a pair's end or a module's own secret), probes the pairs whose probe is due,
rotates the pairs whose policy says so (all-or-nothing per provider) and the minted secrets
whose vault pair's policy says so (each as ``secret rotate``), raises alerts and refreshes the
metrics.

Every act goes through the controller's own actions, so it takes the same delivery lock, keeps
rotations all-or-nothing and lands in the audit chain, with ``watch`` as the operator. On a
PostgreSQL inventory several watches run, one per machine, and only the one holding the
``watch`` turn of the leader lease acts; the others stand by, trying every ``retry_s``, and
the one that takes the turn after the leader is gone begins with the journal's recovery. A node
that does not answer is retried with backoff and never rotated around: its pairs keep their
old credential and become overdue. The clock and the sleep are parameters (a seam), so tests
run second-scale policies without sleeping for real.
"""

from __future__ import annotations

import json
import os
import random
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from meshtui.atomic import write_private
from meshtui.controller import lock
from meshtui.controller import turn as turn_mod
from meshtui.controller.act import drain, own_secrets
from meshtui.controller.plan.resolve import resolve_nodes
from meshtui.controller.reach import FrontDoor
from meshtui.controller.read import secret_states
from meshtui.controller.read.heartbeat import HEARTBEAT, Heartbeat
from meshtui.controller.read.schedule import SPREAD, PairDue, epoch, probe_slot, schedule
from meshtui.controller.read.status import (
    LOCKED_OUT,
    NOT_PROBED_SINCE,
    PROBE_UNDECIDED,
    statuses,
)
from meshtui.controller.reports import SECRET_LABEL, SecretStatus
from meshtui.controller.unattended.metrics import CycleView, Metrics
from meshtui.controller.unattended.notify import Alert
from meshtui.errors import InventoryError, MeshtuiError, NotResolvedError, RotationBusyError
from meshtui.inventory import now as stamp_now
from meshtui.model import (
    DEFAULT_PROBE_EVERY_S,
    PairStatus,
    RotationState,
    State,
    Verdict,
    format_duration,
    node_of,
    split_pair_id,
)

ACTOR = "watch"
TICK_S = 1.0
DRIFT_EVERY_S = 300.0
"""How often the watch pushes with every pair working, to find what changed outside meshtui (a
login's password or rights changed by hand): the provisioner's own ``--watch`` looks as often."""
"""The longest the loop sleeps between two looks at the clock."""
BACKOFF_MIN_S, BACKOFF_MAX_S = 2.0, 300.0
PROBE_BATCH = 2000
"""At most this many probes per cycle; the rest stay due for the next one."""
ROTATE_BATCH = 200
"""At most this many pairs in one all-or-nothing rotation."""
UNREACHABLE = "unreachable"


@dataclass
class Backoff:
    """Retry times of something that failed: doubling from BACKOFF_MIN_S to BACKOFF_MAX_S."""

    failures: int = 0
    retry_at: float = 0.0

    def failed(self, now: float) -> None:
        self.failures += 1
        self.retry_at = now + min(BACKOFF_MAX_S, BACKOFF_MIN_S * 2 ** (self.failures - 1))

    def ready(self, now: float) -> bool:
        return now >= self.retry_at


@dataclass(frozen=True)
class CycleReport:
    """What one cycle did."""

    pushed: bool = False
    probed: int = 0
    rotated: list[str] = field(default_factory=list)
    failed_rotations: list[str] = field(default_factory=list)
    rotated_secrets: list[str] = field(default_factory=list)  # "module name"
    failed_secrets: list[str] = field(default_factory=list)
    alerts: list[Alert] = field(default_factory=list)
    waited_for: str | None = None
    ok: bool = True


def log_line(line: str) -> None:
    print(f"{stamp_now()} meshtui watch: {line}", file=sys.stderr, flush=True)


class Watch:
    """The loop, on one controller. :meth:`run` until :attr:`stop` is set; :meth:`cycle` once."""

    def __init__(
        self,
        ctl: FrontDoor,
        *,
        notify: Callable[[Alert], None] | None = None,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], object] | None = None,
        log: Callable[[str], None] = log_line,
        tick: float = TICK_S,
        seed: int | None = None,
        revoke_old_overdue: bool = False,
        drift_every: float = DRIFT_EVERY_S,
        lead: turn_mod.Turn | None = None,
    ) -> None:
        self.ctl = ctl
        self.lead = lead  # the leader lease's watch turn (PostgreSQL); None: alone, it leads
        if lead is not None:  # said at once, even while the loop waits on a cut link
            lead.on_lost = self._lost_lead
        self.role = "standby" if lead is not None else "leader"
        self.leader_row: turn_mod.LeaseRow | None = None  # who leads, when it stands by
        self.lease_error: str | None = None
        self.drift_every = drift_every  # 0: never push only to look
        self.revoke_old_overdue = revoke_old_overdue  # break-glass for overdue pairs (opt-in)
        self.notify = notify
        self.metrics = metrics
        self.clock = clock
        self.stop = threading.Event()
        self.sleep = sleep if sleep is not None else self.stop.wait
        self.log = log
        self.tick = tick
        self.rng = random.Random(seed)
        self.started_at = stamp_now()
        self.cycles = 0
        self.last_ok_at: str | None = None
        self.next_probe: dict[str, float] = {}
        self.nodes: dict[str, Backoff] = {}  # nodes that did not answer, until they do
        self.nodes_up: dict[str, bool] = {}
        self.push_backoff = Backoff()
        self.looked_at = clock()  # the last push: it looked at every provider's logins
        self.states: dict[str, tuple[State, str]] | None = None
        self.overdue: set[str] = set()
        self.failing: set[str] = set()  # pairs whose rotation failed and has not worked since
        self.waiting: str | None = None
        self._cache: tuple[int, list[PairStatus], list[PairDue]] | None = None
        self.secrets_behind = False  # a module's own secret waits for a store or a delivery
        self.secrets: list[SecretStatus] = []  # every own secret, as the last fresh read saw it
        self.secret_states: dict[str, tuple[str, str]] | None = None
        self.secrets_overdue: set[str] = set()  # supplied secrets held past their max_age
        ctl.inventory.actor = ACTOR
        lock.WHO = ACTOR

    # ---- the loop -----------------------------------------------------------------------
    def run(self) -> int:
        """Cycle until stopped (SIGTERM/SIGINT set :attr:`stop`); the step in progress always
        finishes. Returns the exit status, 0."""
        self.ctl.inventory.record("watch-start", [], {"pid": os.getpid()}, "ok")
        self.log(f"started (pid {os.getpid()})")
        try:
            while not self.stop.is_set():
                began = self.clock()
                if not self.leads():
                    self.sleep(max(0.0, self._retry_s() - (self.clock() - began)))
                    continue
                try:
                    self.cycle()
                except MeshtuiError as exc:  # a failed step is retried next cycle, never fatal
                    self.log(f"cycle failed: {exc}")
                    if self.metrics is not None:
                        self.metrics.failures.labels(step="cycle").inc()
                if self.stop.is_set():
                    break
                self.sleep(max(0.0, self.tick - (self.clock() - began)))
        finally:
            if self.lead is not None:
                self.lead.release()  # a standby takes over now, not when the lease runs out
            self._beat(stopped=True)
            self.ctl.inventory.record("watch-stop", [], {"cycles": self.cycles}, "ok")
            self.log(f"stopped after {self.cycles} cycles")
        return 0

    def cycle(self) -> CycleReport:
        """One pass: recover and push, probe what is due, rotate what is due, alert, measure."""
        now = self.clock()
        rows, plan, fresh = self._read(force=False)
        if self.states is None:
            self.states = {r.pair: (r.state, r.reason) for r in rows if not r.withdrawn}
        ok, acted = True, False
        pushed = probed = 0
        rotated: list[str] = []
        failed: list[str] = []
        alerts: list[Alert] = []
        if not self._halted() and self._needs_push(rows, now) and self.push_backoff.ready(now):
            acted = True
            pushed, push_ok, repaired = self._push()
            alerts += repaired
            ok = ok and push_ok
            rows, plan, _ = self._read(force=True)  # a recovered rotation moved generations
        if not self._halted():
            count, probe_ok = self._probe(rows, plan)
            probed, acted, ok = count, acted or count > 0, ok and probe_ok
        if not self._halted():
            rotated, failed, more = self._rotate(plan)
            alerts += more
            acted = acted or bool(rotated or failed)
            ok = ok and not failed
        secrets_rotated: list[str] = []
        secrets_failed: list[str] = []
        if not self._halted():
            secrets_rotated, secrets_failed, more = self._rotate_secrets(plan)
            alerts += more
            acted = acted or bool(secrets_rotated or secrets_failed)
            ok = ok and not secrets_failed
        if acted:
            rows, plan, fresh = self._read(force=True)
        now = self.clock()
        told = {a.pair for a in alerts}  # one alert per event: a failed rotation says it all
        alerts += [
            a
            for a in self._changes(rows, plan, now, fresh)
            if a.event != "state" or a.pair not in told
        ]
        alerts += self._secret_changes(now, fresh)
        for alert in alerts:
            self.log(
                f"alert {alert.event}: {alert.pair} {alert.from_} -> {alert.to}: {alert.reason}"
            )
            if self.notify is not None:
                self.notify(alert)
        self.cycles += 1
        if ok and self.waiting is None:
            self.last_ok_at = stamp_now()
        if self.metrics is not None:
            self._ask_unheard(now)
            self.metrics.update(
                CycleView(
                    statuses=rows,
                    schedule=plan,
                    nodes_up=dict(self.nodes_up),
                    now=now,
                    ok=ok and self.waiting is None,
                    secrets=list(self.secrets),
                    secrets_overdue=len(self.secrets_overdue),
                )
            )
        self._beat()
        return CycleReport(
            pushed=bool(pushed),
            probed=probed,
            rotated=rotated,
            failed_rotations=failed,
            rotated_secrets=secrets_rotated,
            failed_secrets=secrets_failed,
            alerts=alerts,
            waited_for=self.waiting,
            ok=ok,
        )

    # ---- leading ----------------------------------------------------------------------
    def leads(self) -> bool:
        """True when this watch may act: it is alone (SQLite), or it holds the ``watch`` turn
        (taking it when it is free or ran out). A standby says once who leads."""
        lead = self.lead
        if lead is None or lead.holds():
            return True
        if self.role == "leader":
            self.log(f"no longer leading: {lead.lost_why or 'the turn ended'}; standing by")
            self._stand_by()
        try:
            took = lead.try_take()
        except InventoryError as exc:
            if self.lease_error != str(exc):
                self.log(f"cannot reach the leader lease: {exc}; standing by")
            self.lease_error = str(exc)
            self._stand_by()
            return False
        self.lease_error = None
        if took:
            self.role = "leader"
            self.leader_row = None
            self.log(f"leading (epoch {lead.epoch}, lease {lead.numbers.length_s:g} s)")
            if self.metrics is not None:
                self.metrics.leader.set(1)
            return True
        other = lead.other
        if other is not None and (
            self.leader_row is None
            or (self.leader_row.holder, self.leader_row.epoch) != (other.holder, other.epoch)
        ):
            self.log(f"standing by: {other.who()} leads")
        self.leader_row = other
        self._stand_by()
        return False

    def _lost_lead(self, why: str) -> None:
        """The lead ended (its renew deadline passed, or another took it): from the renewing
        thread, so ``watch.json`` and ``/metrics`` say standby even while a step still waits."""
        if self.role == "leader":
            self.log(f"no longer leading: {why}; standing by")
        self._stand_by()

    def _stand_by(self) -> None:
        self.role = "standby"
        if self.metrics is not None:
            self.metrics.leader.set(0)
        self._beat()

    def _retry_s(self) -> float:
        return self.lead.numbers.retry_s if self.lead is not None else self.tick

    def _halted(self) -> bool:
        """True when the cycle must stop where it is: asked to, or the lead was lost."""
        return self.stop.is_set() or (self.lead is not None and not self.lead.holds())

    def _read(self, *, force: bool) -> tuple[list[PairStatus], list[PairDue], bool]:
        """Every pair's status and schedule, read again only when the inventory changed (another
        process committed, or this watch acted): an idle cycle costs a pragma, not a scan."""
        inv = self.ctl.inventory
        version = inv.data_version()
        if force or self._cache is None or version != self._cache[0]:
            rows = statuses(inv, keep=True, image=self.ctl.state_dir)  # leaves the CLI's image
            self._cache = (version, rows, schedule(inv))
            self.secrets = secret_states.status(inv, self.clock())
            self.secrets_behind = any(s.version and s.state != "working" for s in self.secrets)
            return self._cache[1], self._cache[2], True
        return self._cache[1], self._cache[2], False

    # ---- the lock -----------------------------------------------------------------------
    def _lock_free(self, action: str) -> bool:
        """True when nobody delivers; otherwise say once who the watch waits for."""
        who = lock.holder(self.ctl.state_dir)
        if who is None:
            if self.waiting is not None:
                self.log(f"{self.waiting} finished; going on")
            self.waiting = None
            return True
        if self.waiting != who:
            self.log(f"waiting to {action}: {who} holds the delivery lock")
        self.waiting = who
        return False

    # ---- steps --------------------------------------------------------------------------
    def _needs_push(self, rows: list[PairStatus], now: float) -> bool:
        if self.drift_every and now - self.looked_at >= self.drift_every:
            return True  # every pair working: a push still looks at what the servers hold
        if self.ctl.inventory.open_rotations():
            return True
        if self.secrets_behind:
            return True
        if drain.due(self.ctl.inventory, self.clock()):
            return True  # sessions left to drain: counted again, or ended once overdue
        return any(
            r.state is State.STALE
            and not r.withdrawn
            and not r.alarm
            and not r.reason.startswith(PROBE_UNDECIDED)  # nothing to deliver: a probe decides
            for r in rows
        )

    def _push(self) -> tuple[int, bool, list[Alert]]:
        """Recover and converge; nodes that did not answer are retried with backoff. Each end
        it found not as meshtui left it and wrote again is an alert ("repaired"): a credential
        file that was open to others, or a login changed outside meshtui, is news even when
        the watch put it right before anyone looked."""
        if not self._lock_free("push"):
            return 0, True, []
        try:
            report = self.ctl.push()
        except RotationBusyError as exc:
            self.log(f"waiting to push: {exc}")
            return 0, True, []
        self.looked_at = self.clock()
        when = stamp_now()
        pairs = [k for k in report.repaired if not k.startswith(SECRET_LABEL)]
        after = (  # what each repaired pair reads now (unknown until its next probe, say)
            {r.pair: str(r.state) for r in statuses(self.ctl.inventory, pairs)} if pairs else {}
        )
        if len(pairs) < len(report.repaired):  # and each repaired own secret
            after.update(
                (s.label, s.state) for s in secret_states.status(self.ctl.inventory, self.clock())
            )
        repaired = [
            Alert("repaired", key, self._state(key), after.get(key, self._state(key)), why, when)
            for key, why in sorted(report.repaired.items())
        ]
        now = self.clock()  # after the push: backoff counts from when it gave up
        last = self.ctl.inventory.last_event("push")
        down = last["detail"].get("unreachable") if last else None
        for node in self.ctl.inventory.nodes():
            if isinstance(down, list) and node in down:
                self._node_down(node, now)
            else:
                self._node_up(node)
        if report.ok:
            self.push_backoff = Backoff()
        else:
            self.push_backoff.failed(now)
            self.log(
                f"push left {len(report.behind)} pairs behind; next try in "
                f"{self.push_backoff.retry_at - now:.0f} s"
            )
            if self.metrics is not None:
                self.metrics.failures.labels(step="push").inc()
        return len(report.delivered) + len(report.withdrawn), report.ok, repaired

    def _probe(self, rows: list[PairStatus], plan: list[PairDue]) -> tuple[int, bool]:
        """Probe the live pairs whose probe is due, at most PROBE_BATCH a cycle. Each pair has its
        own slot in the interval (:func:`probe_slot`), so the load on each provider is even."""
        now = self.clock()
        every = {d.pair: d.policy.probe_every for d in plan}
        live = [r for r in rows if not r.withdrawn]
        for r in live:
            if r.pair not in self.next_probe:
                interval = every.get(r.pair, DEFAULT_PROBE_EVERY_S)
                last = _epoch_or_none(r.probed_at)
                if last is None or last + interval <= now:
                    # never probed, or late: catch up, spread over a tenth of the interval
                    due = now + self.rng.uniform(0, interval * SPREAD)
                else:  # the pair's first slot at least half an interval after its last probe
                    due = probe_slot(r.pair, interval, last + interval / 2)
                self.next_probe[r.pair] = due
        due_ids = sorted(
            (p for p in (r.pair for r in live) if self.next_probe[p] <= now),
            key=lambda p: self.next_probe[p],
        )[:PROBE_BATCH]
        if not due_ids:
            return 0, True
        outcomes = self.ctl.probe(due_ids)
        after = self.clock()
        consumer_of = {r.pair: r.consumer_node for r in live}
        answered: dict[str, bool] = {}
        for o in outcomes:
            node = consumer_of[o.pair]
            lost = o.verdict == "unknown" and o.reason.startswith(
                f"consumer's node {node} {UNREACHABLE}"
            )
            answered[node] = answered.get(node, False) or not lost
            interval = every.get(o.pair, DEFAULT_PROBE_EVERY_S)
            self.next_probe[o.pair] = probe_slot(o.pair, interval, after + interval / 2)
        for node, up in answered.items():
            if up:
                self._node_up(node)
            else:
                self._node_down(node, after)
        if self.metrics is not None:
            self.metrics.probed(
                o.latency_ms
                for o in outcomes
                if o.verdict == Verdict.ACCEPTED and o.latency_ms is not None
            )
        return len(outcomes), all(answered.values())

    def _rotate(self, plan: list[PairDue]) -> tuple[list[str], list[str], list[Alert]]:
        """Rotate the due pairs, all-or-nothing per provider; a down node's pairs wait."""
        now = self.clock()
        interrupted = {i["pair"] for r in self.ctl.inventory.open_rotations() for i in r["items"]}
        by_provider: dict[tuple[str, bool], list[str]] = {}
        for d in plan:
            if not d.is_due(now) or d.pair in interrupted:
                continue
            revoke_old = self.revoke_old_overdue and d.is_overdue(now)
            ends = [node_of(d.provider)]  # break-glass waits for no consumer's node
            if not revoke_old:
                ends.append(node_of(d.consumer))
            if any(not self.nodes.get(n, Backoff()).ready(now) for n in ends):
                continue  # retried when the node's backoff ends; meanwhile it turns overdue
            by_provider.setdefault((d.provider, revoke_old), []).append(d.pair)
        rotated: list[str] = []
        failed: list[str] = []
        alerts: list[Alert] = []
        for (provider, revoke_old), ids in sorted(by_provider.items()):
            for i in range(0, len(ids), ROTATE_BATCH):
                if self._halted() or not self._lock_free("rotate"):
                    return rotated, failed, alerts
                batch = ids[i : i + ROTATE_BATCH]
                done, why, locked = self._rotate_batch(provider, batch, revoke_old)
                alerts += [
                    Alert(
                        "locked-out", pid, self._state(pid), str(State.STALE), reason, stamp_now()
                    )
                    for pid, reason in locked.items()
                ]
                if done:
                    rotated += batch
                    self.failing.difference_update(batch)
                    continue
                failed += batch
                when = stamp_now()
                alerts += [  # once per failing spell: the retries with backoff are not news
                    Alert("rotation-failed", pid, self._state(pid), self._state(pid), why, when)
                    for pid in batch
                    if pid not in self.failing
                ]
                self.failing.update(batch)
        return rotated, failed, alerts

    def _rotate_secrets(self, plan: list[PairDue]) -> tuple[list[str], list[str], list[Alert]]:
        """Rotate the minted secrets their vault pair's policy says are due, each as
        ``secret rotate`` does (the new version stored in the vault, then written to the
        module's file; until both are done the file keeps the old one); a secret whose module's
        node or vault's node does not answer waits for it, keeping its old value."""
        now = self.clock()
        rotated: list[str] = []
        failed: list[str] = []
        alerts: list[Alert] = []
        for s in own_secrets.due(self.ctl.inventory, plan, now):
            if any(
                not self.nodes.get(n, Backoff()).ready(now)
                for n in (node_of(s.module), node_of(s.vault))
            ):
                continue
            if self._halted() or not self._lock_free("rotate a secret"):
                break
            try:
                version = self.ctl.secret_rotate(s.module, s.name)
            except RotationBusyError as exc:
                self.log(f"waiting to rotate {s.label}: {exc}")
                break
            except MeshtuiError as exc:
                why = f"secret {s.name} of {s.module} not rotated: {exc}"
            else:
                (row,) = [r for r in self.ctl.secrets() if (r.module, r.name) == (s.module, s.name)]
                if row.state == "working":
                    rotated.append(s.label)
                    self.log(f"rotated secret {s.label} to version {version}")
                    if self.metrics is not None:
                        self.metrics.rotations.labels(provider=s.vault).inc()
                    continue
                why = (
                    f"secret {s.name} of {s.module}: version {version} not in place yet "
                    f"(push finishes it; the file keeps the old value): {row.reason}"
                )
            failed.append(s.label)
            self._count("rotate")
            self.log(why)
            state = self._state(s.pair)
            alerts.append(Alert("rotation-failed", s.pair, state, state, why, stamp_now()))
        return rotated, failed, alerts

    def _rotate_batch(
        self, provider: str, batch: list[str], revoke_old: bool = False
    ) -> tuple[bool, str, dict[str, str]]:
        """One all-or-nothing rotation (``revoke_old``: break-glass); (done, why not, the
        pairs it locked out and why)."""
        try:
            report = self.ctl.rotate(batch, revoke_old=revoke_old)
        except NotResolvedError as exc:
            now = self.clock()  # after the wait: a hung node's timeout is not its backoff
            for node in exc.reasons:
                self._node_down(node, now)
            self._count("rotate")
            why = "; ".join(f"{n}: {r}" for n, r in sorted(exc.reasons.items()))
            self.log(f"not rotated ({len(batch)} pairs of {provider}): {why}; old credentials kept")
            return False, f"not rotated, old credential kept: {why}", {}
        except RotationBusyError as exc:
            self.log(f"waiting to rotate: {exc}")
            return False, str(exc), {}
        nodes = {node_of(provider)} | {node_of(split_pair_id(p)[1]) for p in batch}
        if report.ok:
            for node in nodes:
                self._node_up(node)
            if self.metrics is not None:
                self.metrics.rotations.labels(provider=provider).inc(len(batch))
            self.log(f"rotated {len(batch)} pairs of {provider} (rotation {report.rotation})")
            return True, "", {}
        self._count("rotate")
        self.log(f"rotation {report.rotation} of {provider} {report.outcome}: {report.reason}")
        if report.outcome == RotationState.LOCKED_OUT:  # the old credential is gone all the same
            return (
                True,
                "",
                {p.pair: p.reason for p in report.pairs if p.reason.startswith(LOCKED_OUT)},
            )
        return False, f"rotation {report.outcome}: {report.reason}", {}

    # ---- alerts -------------------------------------------------------------------------
    def _changes(
        self, rows: list[PairStatus], plan: list[PairDue], now: float, fresh: bool
    ) -> list[Alert]:
        """State changes since the last cycle (only a fresh read can hold one), and pairs that
        just became overdue."""
        assert self.states is not None
        when = stamp_now()
        out = []
        if fresh:
            current = {r.pair: (r.state, r.reason) for r in rows if not r.withdrawn}
            for pid, (state, reason) in current.items():
                before = self.states.get(pid)
                if (
                    before is not None
                    and state is State.UNKNOWN
                    and reason.startswith(NOT_PROBED_SINCE)
                ):
                    current[pid] = before  # just rotated: its next probe says what changed
                    continue
                if before is not None and before[0] is not state:
                    out.append(Alert("state", pid, str(before[0]), str(state), reason, when))
            self.states = current
        current = self.states
        overdue = {d.pair for d in plan if d.overdue_at is not None and d.is_overdue(now)}
        for d in plan:
            if d.pair in overdue - self.overdue and d.overdue_at is not None:
                held = str(current.get(d.pair, (State.UNKNOWN, ""))[0])
                late = now - (d.due_at or now)
                out.append(
                    Alert(
                        "overdue",
                        d.pair,
                        held,
                        held,
                        f"rotation due {late:.0f} s ago; still on its old credential",
                        when,
                    )
                )
        self.overdue = overdue
        return out

    def _overdue_secrets(self, now: float) -> dict[str, SecretStatus]:
        """The supplied secrets held longer than their declared ``max_age`` at ``now``."""
        return {
            s.label: s
            for s in self.secrets
            if s.origin == "supplied"
            and s.max_age
            and (since := _epoch_or_none(s.since)) is not None
            and now - since > s.max_age
        }

    def _secret_changes(self, now: float, fresh: bool) -> list[Alert]:
        """A module's own secret whose state changed since the last fresh read, and a supplied
        one that just passed its ``max_age`` (the alert names the command that supplies a new
        one); each once, as a pair's."""
        when = stamp_now()
        out: list[Alert] = []
        if fresh or self.secret_states is None:
            current = {s.label: (s.state, s.reason) for s in self.secrets}
            for label, (state, reason) in current.items():
                before = (self.secret_states or {}).get(label)
                if before is not None and before[0] != state:
                    out.append(Alert("state", label, before[0], state, reason, when))
            self.secret_states = current
        overdue = self._overdue_secrets(now)
        for label in sorted(set(overdue) - self.secrets_overdue):
            s = overdue[label]
            age = format_duration(now - (_epoch_or_none(s.since) or now))
            out.append(
                Alert(
                    "overdue",
                    label,
                    s.state,
                    s.state,
                    f"supplied {age} ago, longer than its max_age {format_duration(s.max_age or 0)}"
                    f": supply a new one with meshtui secret put {s.module} {s.name}",
                    when,
                )
            )
        self.secrets_overdue = set(overdue)
        return out

    def _state(self, key: str) -> str:
        """A pair's state, or an own secret's (by its label), as the last fresh read saw it."""
        if key.startswith(SECRET_LABEL):
            return (self.secret_states or {}).get(key, (str(State.UNKNOWN), ""))[0]
        return str((self.states or {}).get(key, (State.UNKNOWN, ""))[0])

    def measure_first(self) -> None:
        """Fill the metrics before they are served: every pair's state read and every node
        asked once, so the first scrape is whole (a scrape before it finds no listener, which a
        monitor reads as down, never an empty page it reads as nothing wrong). No cycle has
        run, so no cycle is counted as succeeded."""
        if self.metrics is None:
            return
        now = self.clock()
        rows, plan, _ = self._read(force=False)
        self._ask_unheard(now)
        self.metrics.update(
            CycleView(
                statuses=rows,
                schedule=plan,
                nodes_up=dict(self.nodes_up),
                now=now,
                ok=False,
                secrets=list(self.secrets),
                secrets_overdue=len(self._overdue_secrets(now)),
            )
        )

    # ---- bookkeeping --------------------------------------------------------------------
    def _ask_unheard(self, now: float) -> None:
        """Ask each node no push or probe has heard from yet (a node holding only providers
        is not probed from), so ``meshtui_node_up`` names every node from the first scrape."""
        unheard = [n for n in self.ctl.inventory.nodes() if n not in self.nodes_up]
        if not unheard or self._halted():
            return
        for res in resolve_nodes(self.ctl, unheard):
            if res.ok:
                self._node_up(res.node)
            else:
                self._node_down(res.node, now)

    def _node_down(self, node: str, now: float) -> None:
        if self.nodes_up.get(node, True):
            self.log(f"node {node} does not answer; retrying with backoff")
        self.nodes.setdefault(node, Backoff()).failed(now)
        self.nodes_up[node] = False

    def _node_up(self, node: str) -> None:
        if not self.nodes_up.get(node, True):
            self.log(f"node {node} answers again")
        self.nodes.pop(node, None)
        self.nodes_up[node] = True

    def _count(self, step: str) -> None:
        if self.metrics is not None:
            self.metrics.failures.labels(step=step).inc()

    def _beat(self, *, stopped: bool = False) -> None:
        beat = Heartbeat(
            pid=os.getpid(),
            started_at=self.started_at,
            last_cycle_at=stamp_now() if self.cycles else None,
            last_ok_at=self.last_ok_at,
            cycles=self.cycles,
            stopped_at=stamp_now() if stopped else None,
            role=self.role,
            lease_s=self.lead.numbers.length_s if self.lead is not None else None,
            leader=self.leader_row.holder if self.leader_row is not None else None,
        )
        try:
            write_private(
                self.ctl.state_dir / HEARTBEAT,
                json.dumps(beat.__dict__).encode(),
                mode=0o644,
                durable=False,
            )
        except OSError as exc:
            self.log(f"cannot write the heartbeat: {exc.strerror}")


def _epoch_or_none(stamp: str | None) -> float | None:
    return None if stamp is None else epoch(stamp)
