"""How the command line shows reports: JSON for ``--json``, else a few plain lines each.

Every function here prints one typed report; none decides an exit code or calls anything.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from meshtui import terminal
from meshtui.controller.reports import SECRET_LABEL
from meshtui.kinds import registry
from meshtui.model import PairStatus, format_duration

if TYPE_CHECKING:
    from meshtui.controller.plan.declare import DeclareResult
    from meshtui.controller.read.doctor import DoctorReport
    from meshtui.controller.read.schedule import PairDue
    from meshtui.controller.records.anchors import AnchorCheck
    from meshtui.controller.reports import (
        AuditEvent,
        ChainReport,
        Draining,
        DrillReport,
        ProbeOutcome,
        PushReport,
        Rotating,
        RotationPlan,
        RotationReport,
        SecretDrillReport,
        SecretStatus,
    )
    from meshtui.lab.mesh import LabStatus


def print_json(data: Any) -> None:
    """``data`` as indented JSON on stdout (dates and paths as text).

    The text is json's own, indented by msgspec: ``json.dumps(indent=2)`` runs json's Python
    encoder (most of ``status --json`` at 10,000 pairs), the compact one runs its C encoder, and
    re-indenting keeps every byte of it (a test holds the two equal)."""
    compact = json.dumps(data, sort_keys=False, default=str)
    try:
        text = msgspec.json.format(compact.encode(), indent=2).decode()
    except msgspec.DecodeError:  # NaN or Infinity, which json writes and msgspec does not read
        text = json.dumps(data, indent=2, sort_keys=False, default=str)
    print(text)


def declared(file: str, result: DeclareResult) -> None:
    print(
        f"{file}: {len(result.new)} new, {len(result.reissued)} reissued, "
        f"{len(result.changed)} changed, {len(result.withdrawn)} withdrawn, "
        f"{len(result.unchanged)} unchanged"
    )
    for label, ids in (
        ("new", result.new),
        ("reissued", result.reissued),
        ("withdrawn", result.withdrawn),
    ):
        for pid in ids:
            print(f"  {label:9} {pid}")
    if result.new or result.reissued or result.withdrawn:
        print("run meshtui push to deliver")


def _by_pair(secrets: Sequence[SecretStatus]) -> dict[str, list[SecretStatus]]:
    """Each vault pair's own secrets (a module's secrets are shown under its vault pair)."""
    out: dict[str, list[SecretStatus]] = {}
    for s in secrets:
        if s.pair is not None:
            out.setdefault(s.pair, []).append(s)
    return out


def statuses(
    rows: Sequence[PairStatus],
    secrets: Sequence[SecretStatus] = (),
    draining: Mapping[str, Draining] | None = None,
    rotations: Mapping[str, Rotating] | None = None,
) -> None:
    """Every pair, who holds it, how an overlap pair rotates, its sessions left to drain, and
    under a vault pair its module's own secrets."""
    under = _by_pair(secrets)
    draining = draining or {}
    rotations = rotations or {}
    for r in rows:
        gens = f"g{r.generation} c{r.consumer_generation or '-'} p{r.provider_generation or '-'}"
        print(f"{r.state:8} {r.pair}  login={r.login} {gens}  {r.reason}")
        print(
            f"         holders: {r.consumer} file {r.consumer_file}; {r.provider} login {r.login}"
        )
        if r.pair in rotations:
            print(f"         {rotations[r.pair].line()}")
        if r.pair in draining:
            print(f"         {draining[r.pair].line()}")
        for s in under.get(r.pair, []):
            print(f"         secret {s.name} ({s.origin}) {s.state}: {s.reason}")
            print(f"           holders: {s.module} file {s.file}; {s.vault} at {s.path}")
    shown = sum(len(under.get(r.pair, [])) for r in rows)
    print(f"{len(rows)} pairs" + (f", {shown} own secrets" if shown else ""))


def status_json(
    rows: Sequence[PairStatus],
    secrets: Sequence[SecretStatus] = (),
    draining: Mapping[str, Draining] | None = None,
    rotations: Mapping[str, Rotating] | None = None,
) -> list[dict[str, object]]:
    """``status --json``: each pair's object with its sessions left to drain (``draining``,
    null when none), how it rotates (``rotation``: an overlap pair's grace and the login its
    consumer holds; null for a swap), a vault pair's with its module's own secrets."""
    under = _by_pair(secrets)
    draining = draining or {}
    rotations = rotations or {}
    out = []
    for r in rows:
        obj = r.to_json()
        obj["draining"] = draining[r.pair].to_json() if r.pair in draining else None
        obj["rotation"] = rotations[r.pair].to_json() if r.pair in rotations else None
        if r.pair in under:
            obj["secrets"] = [s.to_json() for s in under[r.pair]]
        out.append(obj)
    return out


def due(rows: Sequence[PairDue], now: float) -> None:
    for d in rows:
        age = format_duration(d.age(now))
        if d.due_at is None:
            when = "never (no rotation policy)"
        elif d.is_overdue(now):
            when = f"OVERDUE by {format_duration(now - d.due_at)}"
        elif d.is_due(now):
            when = "due now"
        else:
            when = f"due in {format_duration(d.due_at - now)}"
        print(f"{when:28} {d.pair}  age {age}  {d.policy.describe()}")
    late = sum(1 for d in rows if d.is_overdue(now))
    print(f"{len(rows)} pairs, {sum(1 for d in rows if d.is_due(now))} due, {late} overdue")


def events(rows: Sequence[AuditEvent]) -> None:
    for e in rows:
        pairs = ", ".join(e.pairs[:3]) + (" …" if len(e.pairs) > 3 else "")
        print(f"{e.seq:>5} {e.at} {e.operator:<10} {e.kind:<10} {e.outcome:<8} {pairs}")


def verdict(check: ChainReport, anchors: AnchorCheck, restores: Sequence[str]) -> None:
    """``audit --verify``: the verdict on the first line, then its evidence (the restores on
    record, each node's kept head). A chain that fails says so first, on stderr; "verified" is
    printed only when the chain and every node that answered agree."""
    disagrees = (
        "audit chain DISAGREES with what nodes saw: "
        + ", ".join(anchors.disagreeing)
        + " (events were deleted or rewritten, or an inventory was copied back by hand: "
        "find out who changed it, and put a backup back with meshtui restore into an empty "
        'folder, which the nodes take on record; README, "Backup and restore")'
    )
    if not check.ok:
        _err(f"audit chain BROKEN at event {check.bad_seq}: {check.problem}")
        if not anchors.ok:
            _err(disagrees)
    elif not anchors.ok:
        _err(disagrees)
        print(f"  the inventory's chain alone links {check.events} events (it cannot show an "
              "older copy or a wipe; the nodes can)", flush=True)  # fmt: skip
    elif not anchors.answered:
        print(
            f"audit chain verified: {check.events} events; no node answered: the chain is not "
            "checked against what the nodes saw",
            flush=True,
        )
    else:
        print(f"audit chain verified: {check.events} events", flush=True)
    for line in restores:
        print(f"  {line}", flush=True)
    for n in anchors.nodes:
        mark = "DISAGREES" if n.disagrees else n.verdict
        line = f"  node {n.node:<12} {mark:<11} {n.reason}"
        if n.disagrees:
            _err(line)
        else:
            print(line, flush=True)


def _err(line: str) -> None:
    """One line on stderr, after everything printed before it on stdout."""
    sys.stdout.flush()
    print(line, file=sys.stderr, flush=True)


def doctor(report: DoctorReport) -> None:
    """The problems as a table (node, check, subject, problem -> what to do), then a summary."""
    if report.problems:
        rows = [("node", "check", "subject", "problem", "what to do")]
        rows += [(p.node, p.check, p.subject, p.problem, p.fix) for p in report.problems]
        widths = [min(40, max(len(r[i]) for r in rows)) for i in range(3)]
        for r in rows:
            cells = "  ".join(c.ljust(w) for c, w in zip(r[:3], widths, strict=True))
            print(f"{cells}  {r[3]}  -> {r[4]}")
    answered = [n for n in report.nodes if n.answered]
    passed = sum(n.passed for n in answered)
    print(
        f"{len(report.problems)} problems; {len(answered)} of {len(report.nodes)} nodes answered, "
        f"{passed} checks passed ({report.elapsed_ms / 1000:.2f} s)"
    )


def pushed(report: PushReport) -> None:
    for pid, what in sorted(report.ahead.items()):
        print(f"AHEAD     {pid}: {what}")
    for o in report.delivered:
        print(f"{'delivered' if o.ok else 'FAILED':9} {o.pair} g{o.generation} {o.reason}")
    for o in report.withdrawn:
        print(f"{'revoked' if o.ok else 'NOT REVOKED':9} {o.pair} {o.reason}")
    secrets_again = {k: v for k, v in report.repaired.items() if k.startswith(SECRET_LABEL)}
    for key, why in sorted(secrets_again.items()):
        print(f"{'delivered':9} {key} {why}")
    if not (report.delivered or report.withdrawn or report.ahead or secrets_again):
        # only true when nobody is behind: a node that refused or did not answer holds nothing known
        print("every end already holds its generation" if report.ok else "nothing was delivered")
    cut_off = set(report.unreachable)
    for pid, why in sorted(report.behind.items()):
        print(f"{'unreachable' if pid in cut_off else 'behind':9} {pid}: {why}")
    for pid, why in sorted(report.stale_by_probe.items()):  # nothing to deliver: probe decides
        print(f"stale     {pid}: {why} (every end holds its generation; meshtui probe decides)")
    for node, what in sorted(report.claims.items()):  # a node's own words: shown, not obeyed
        print(f"CLAIM     {node}: {terminal.shown(what)}")
    late = len(report.behind) - len(cut_off)
    counts = [f"{late} pairs behind"] * bool(late) + [f"{len(cut_off)} unreachable"] * bool(cut_off)
    print("all ends agree" if report.ok else ", ".join(counts))


def rotation_plan(plan: RotationPlan) -> None:
    print(f"rotate {len(plan.pairs)} pairs:")
    for pid in plan.pairs:
        print(f"  {pid}")
    for r in plan.nodes:
        print(f"  node {r.node}: {'resolved' if r.ok else 'NOT RESOLVED'} ({r.reason})")


def rotated(report: RotationReport) -> None:
    for o in report.pairs:
        window = f" window {o.window_ms:.1f} ms" if o.window_ms is not None else ""
        if o.both_accepted_ms is not None:  # an overlap: no window
            window = f" overlap: both accepted {o.both_accepted_ms:.1f} ms, old {o.old_after}"
        said = o.sessions_said()
        window += f"; {said}" if said else ""
        print(f"{report.outcome:11} {o.pair} g{o.previous}->g{o.generation}{window} {o.reason}")
    if report.reason:
        print(f"reason: {report.reason}")


def probed(outcomes: Sequence[ProbeOutcome]) -> None:
    for o in outcomes:
        lat = f"{o.latency_ms:6.1f} ms" if o.latency_ms is not None else "       -"
        print(f"{o.verdict:9} {lat} {o.pair}  {o.reason}")


def drilled(reports: Sequence[DrillReport]) -> None:
    for r in reports:
        print(f"{'PASSED' if r.ok else 'FAILED'} {r.pair}")
        for s in r.steps:
            lat = f"{s.latency_ms:.1f} ms" if s.latency_ms is not None else "-"
            mark = "ok " if s.ok else "BAD"
            print(f"  [{mark}] {s.name:10} expected {s.expected:8} got {s.verdict:8} {lat}")
        if r.both_accepted_ms is not None:
            print(
                f"  overlap: both accepted {r.both_accepted_ms:.1f} ms, {r.refused or 0} logins "
                f"refused (rotation {r.rotation})"
            )
        elif r.window_ms is not None:
            print(f"  window {r.window_ms:.1f} ms (rotation {r.rotation})")
        if r.sessions:
            print(f"  {r.sessions_line()}")
        if r.reason:
            print(f"  {r.reason}")


def lab_status(info: LabStatus) -> None:
    if not info["up"]:
        print("no lab is up")
        return
    servers = ", ".join(  # a kind's key is None when this lab has none of it
        f"{kind.title} {'running' if info[name] else 'DOWN'}"
        for name, kind in registry.KINDS.items()
        if info.get(name) is not None
    )
    print(f"lab up ({info['mode']}), {servers}")
    for node, a in info["agents"].items():
        answers = "answers" if a["answers"] else "NOT ANSWERING"
        print(f"  {node:6} {a['address']:12} pid {a['pid']} {answers}")


def secret_drill(report: SecretDrillReport) -> None:
    """A secret's drill: each check, then the verdict."""
    new = report.new_version if report.new_version is not None else "-"
    print(f"{report.module} secret {report.name}: version {report.old_version} -> {new}")
    for c in report.checks:
        print(f"  {'ok  ' if c.ok else 'FAIL'} {c.name}: {c.seen}")
    print(f"{'passed' if report.ok else 'FAILED'}: {report.reason}")


def own_secrets(rows: Sequence[SecretStatus]) -> None:
    """Each module's own secrets: state, origin, versions held, where; never a value."""
    if not rows:
        print("no module declares its own secrets")
        return
    for r in rows:
        print(f"{r.state:8} {r.module} {r.name} ({r.origin}) -> {r.file}")
        print(f"         vault {r.vault or '-'} at {r.path or '-'}: {r.reason}")
        if r.supplied_by:
            print(f"         supplied by {r.supplied_by} at {r.supplied_at}")
