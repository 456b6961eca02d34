"""``meshtui drill``: a rotation checked by three logins from the consumer's node.

The old credential logs in before; the pair is rotated; the new credential logs in after (as
the login now holding it: an alternating pair's other login) and the old one is refused. The old credential lives only in the consumer agent's memory for the
drill. The evidence (each login's verdict and timing, the window) is stored and shown.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING

from meshtui.controller.act.overlap import rotate_declared
from meshtui.controller.act.recording import as_json, probe_row
from meshtui.controller.agents.client import AgentClient
from meshtui.controller.plan.planner import Planner
from meshtui.controller.reports import (
    DrillReport,
    DrillStep,
    PairOutcome,
    Progress,
    RotationReport,
)
from meshtui.errors import AgentError, MeshtuiError
from meshtui.inventory import now
from meshtui.inventory.rows import DrillRecord
from meshtui.model import OVERLAP, SWAP, Sessions, Verdict, node_of
from meshtui.protocol import messages
from meshtui.protocol.messages import DrillRequest, ProbeItem, ProbeReport, ProbeRequest

if TYPE_CHECKING:
    from meshtui.controller.reach import Reach


def _new_login(ctl: Reach, client: AgentClient, pid: str) -> ProbeReport | None:
    """A login from the consumer's node with what its file holds now, as the login that holds
    the pair's generation now (an alternating pair's new login is not the old one's)."""
    plan = Planner(ctl.inventory, focus=[pid])
    item = ProbeItem(pair=pid, file=plan.pairs[pid]["file"], **plan.target(pid))
    answer = client.call(messages.PROBE, ProbeRequest(targets=[item]))
    return next((got["result"] for got in answer["results"] if got["pair"] == pid), None)


def _step(name: str, expected: str, login: ProbeReport | None, missing: str) -> DrillStep:
    if login is None:
        return DrillStep(
            name=name, expected=expected, verdict="unknown", latency_ms=None, reason=missing
        )
    return DrillStep(
        name=name,
        expected=expected,
        verdict=login["verdict"],
        latency_ms=login["login"]["latency_ms"],
        reason=login["reason"],
    )


def drill_one(
    ctl: Reach, pid: str, progress: Progress, sessions: Sessions | None = None
) -> DrillReport:
    """Drill one pair; always returns a report (failures are in it, not raised). ``sessions``:
    the rotation's choice for the old credential's sessions (None: the pair's declared one);
    the report says how many were open on it before and after, and a drill whose rotation was
    to end them fails while one is open still."""
    plan = Planner(ctl.inventory, focus=[pid])
    p = plan.pairs[pid]
    node = node_of(p["consumer"])
    drill_id = secrets.token_hex(8)
    request = DrillRequest(drill=drill_id, pair=pid, file=p["file"], target=plan.target(pid))
    client = AgentClient(
        plan.nodes[node],
        ctl.keys(),
        sequence=ctl.sequence,
        head=ctl.inventory.signed_head,
        fence=lambda: ctl.fence,
    )
    steps: list[DrillStep] = []
    report: RotationReport | None = None
    reason = ""
    new_login: ProbeReport | None = None
    try:
        progress(f"{pid}: old credential before", 0, 3)
        held = client.call(messages.DRILL_HOLD, request)
        steps.append(_step("old before", Verdict.ACCEPTED, held["result"], held.get("error", "")))
        if steps[0].ok:
            progress(f"{pid}: rotating", 1, 3)
            try:
                report = rotate_declared(ctl, [pid], lambda *_: None, sessions=sessions)
            except MeshtuiError as exc:
                reason = f"rotation not done: {exc}"
            progress(f"{pid}: new and old credential after", 2, 3)
        checked = client.call(messages.DRILL_CHECK, request)  # the agent forgets the old one
        if steps[0].ok:
            new_login = checked["new"]
            if plan.alternate(pid, p["generation"]):  # the new is another login's
                new_login = _new_login(ctl, client, pid)
            steps.append(_step("new after", Verdict.ACCEPTED, new_login, "no credential file"))
            steps.append(
                _step("old after", Verdict.REFUSED, checked["old"], checked["error"] or "")
            )
    except AgentError as exc:
        reason = f"consumer's node unreachable: {exc.reason}"
    finally:
        client.close()
    if report is not None and not report.ok:
        reason = f"rotation {report.outcome}: {report.reason}"
    if not reason and steps and not steps[0].ok:
        reason = "the current credential did not log in before the rotation; nothing was rotated"
    window = report.pairs[0].window_ms if report is not None and report.done else None
    moved = report.pairs[0] if report is not None and report.pairs else None
    choice, before, after = _sessions_seen(moved)
    lingering = choice == Sessions.END and after != 0
    done = report.pairs[0] if report is not None and report.done else None
    both = done.both_accepted_ms if done is not None else None
    refused = done.refused if done is not None else None
    ok = (
        len(steps) == 3
        and all(s.ok for s in steps)
        and report is not None
        and report.ok
        and not lingering
        and not refused
    )
    if ok:
        reason = "old worked before, new works after, old is refused after"
        if choice == Sessions.DRAIN:
            reason += " to new logins"
        if both is not None:
            reason += f"; both accepted for {both:.1f} ms, {refused or 0} logins refused"
        if choice == Sessions.END:
            reason += f"; {before} session{'' if before == 1 else 's'} on it ended"
        elif choice == Sessions.DRAIN:
            reason += f"; {after} session{'' if after == 1 else 's'} on it left to drain"
    elif lingering and not reason:
        reason = (
            f"{after} session{'' if after == 1 else 's'} on the old credential still open "
            "after the rotation ended them"
        )
    result = DrillReport(
        pair=pid,
        ok=ok,
        steps=steps,
        window_ms=window,
        rotation=report.rotation if report else None,
        reason=reason,
        sessions=choice,
        sessions_before=before,
        sessions_after=after,
        rotation_kind=OVERLAP if both is not None else SWAP,
        both_accepted_ms=both,
        refused=refused,
    )
    with ctl.inventory.transaction("drill") as tx:
        if new_login is not None and report is not None and report.done:
            # the "new after" login is a probe of the current generation from the consumer's node
            generation = report.pairs[0].generation
            tx.add_probes([probe_row(pid, generation, new_login, now(), withdrawn=False)])
        tx.add_drill(
            DrillRecord(
                pair=pid,
                at=now(),
                rotation=result.rotation,
                ok=int(ok),
                window_ms=window,
                evidence=as_json(result.to_json()),
            )
        )
        tx.audit(
            "drill",
            [pid],
            {
                "window_ms": window,
                "both_accepted_ms": both,
                "refused": refused,
                "rotation": result.rotation,
                "steps": {s.name: s.verdict for s in steps},
                "sessions": {"choice": choice, "before": before, "after": after},
            },
            "ok" if ok else "failed",
        )
    progress(f"{pid}: {'passed' if ok else 'FAILED'}", 3, 3)
    return result


def drill(
    ctl: Reach, ids: list[str], progress: Progress, sessions: Sessions | None = None
) -> list[DrillReport]:
    """Drill each pair in turn."""
    return [drill_one(ctl, pid, progress, sessions) for pid in ids]


def _sessions_seen(moved: PairOutcome | None) -> tuple[str, int | None, int | None]:
    """What the rotation did to the old credential's sessions: the choice ("" when its
    provider did not say), how many were open on it before, and how many after."""
    if moved is None or moved.sessions is None:
        return "", None, None
    choice = Sessions.END if moved.sessions_ended else Sessions.DRAIN
    return choice.value, moved.sessions, moved.sessions_left
