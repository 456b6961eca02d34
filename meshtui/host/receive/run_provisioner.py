"""Making a provider accept its manifest: the built-in provisioner, or a declared command.

The built-in one runs in the agent's process with warm admin sessions; a declared command runs
without a shell, bounded in time, and only its login outcomes (short reasons) are kept, since
they are shown and stored. The read-only inspection behind ``state`` lives here too.
"""

from __future__ import annotations

import functools
import re
import subprocess
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import TYPE_CHECKING, NotRequired, TypedDict

import msgspec

from meshtui.errors import MeshtuiError
from meshtui.host.policy import commands
from meshtui.host.policy.node_policy import Command
from meshtui.host.policy.paths import node_path
from meshtui.kinds import registry
from meshtui.model import BUILTIN_ARGV, OutcomeName, Sessions, is_builtin
from meshtui.protocol.messages import Inspection, InspectSpec, LoginOutcome, ProviderSet
from meshtui.provisioner.harness import Finding, Outcome, check_admin, inspect, reconcile
from meshtui.runas import RunAsError

if TYPE_CHECKING:
    from meshtui.contracts.adapter import AdapterFactory

PROVISION_TIMEOUT_S = 300.0
INSPECT_TIMEOUT_S = 5.0  # within the controller's STATE_TIMEOUT_S
MAX_REASON = 300


class ProvisionReport(TypedDict):
    """What a provisioner reports to the agent: ok, each login's outcome, or why not."""

    ok: bool
    outcomes: list[LoginOutcome]
    error: NotRequired[str]


Provisioner = Callable[[Path, Path, frozenset[str] | None], ProvisionReport]
"""``provisioner(manifest, admin, only)``: apply the manifest (only the logins ``only`` names,
when it names any: a delta's), and report each login's outcome."""


def builtin_provisioner(
    manifest: Path,
    admin: Path,
    only: frozenset[str] | None = None,
    scoped: bytes | None = None,
    sessions: Mapping[str, Sessions] | None = None,
    marks: Mapping[str, str] | None = None,
) -> ProvisionReport:
    """Run the built-in provisioner in-process; its outcomes. ``scoped``: the manifest just
    written, cut to the logins ``only`` names (given, the file is not read back and cut again).
    ``sessions``: a rotation's logins and what becomes of their sessions on the old credential;
    ``marks``: those whose drain is checked, each with its mark (``ProviderSet.drained``).

    Admin sessions are kept warm between deliveries by a kind that keeps them (``Kind.kept``;
    PostgreSQL's :mod:`meshtui.kinds.postgres.warm` checks each and reads its settings again
    before it is used). ``only``: a delta's logins,
    applied and read back alone (the rest of the manifest is as the last delivery left it).
    """
    report = reconcile(
        manifest,
        admin,
        kept=_kept_sessions,
        only=only,
        scoped=scoped,
        sessions=sessions,
        marks=marks,
    )
    return {"ok": report.ok, "outcomes": [_login_outcome(o) for o in report.outcomes]}


def _login_outcome(o: Outcome) -> LoginOutcome:
    out: LoginOutcome = {
        "login": o.login,
        "outcome": o.outcome,
        "reason": o.reason,
        "node": o.node,
        "module": o.module,
    }
    if o.sessions is not None:
        out["sessions"], out["sessions_ended"] = o.sessions, o.sessions_ended
        out["sessions_left"] = o.sessions if o.sessions_left is None else o.sessions_left
        if o.sessions_mark is not None:
            out["sessions_mark"] = o.sessions_mark
    return out


@functools.cache
def _kept_sessions(kind: str) -> AdapterFactory | None:
    """The agent process's kept admin sessions of a kind (``Kind.kept``: one pool per kind for
    every manifest it provisions); None for a kind that keeps none."""
    kept = registry.kind_of(kind).kept
    if kept is None:
        return None
    factory: AdapterFactory = kept.load()().open
    return factory


def provision(
    spec: ProviderSet,
    manifest: Path,
    builtin: Provisioner,
    only: frozenset[str] | None = None,
    scoped: bytes | None = None,
    *,
    command: Command | None = None,
) -> ProvisionReport:
    """Apply the manifest just written: ``builtin`` unless the set declares a command (which is
    handed the whole manifest file, a delta's or not), run as the node's policy allows
    (``command``: the policy's entry for that exact argv; without one it does not run).
    ``scoped`` and the set's ``sessions`` go to this module's :func:`builtin_provisioner` only
    (another ``builtin``, a test's seam, reads the file; a declared command is not asked to
    end sessions, so its outcomes say nothing of them)."""
    argv = spec["provisioner"] or list(BUILTIN_ARGV)
    admin = spec["admin"] or ""
    if is_builtin(argv):
        if not admin:
            return {
                "ok": False,
                "outcomes": [],
                "error": "no admin conninfo file declared for the provisioner",
            }
        try:
            if builtin is builtin_provisioner:
                return builtin_provisioner(
                    manifest, Path(admin), only, scoped, spec.get("sessions"), spec.get("drained")
                )
            return builtin(manifest, Path(admin), only)
        except MeshtuiError as exc:
            return {"ok": False, "outcomes": [], "error": str(exc)}
    if command is None or list(command.argv) != list(argv):
        why = f"provisioner {argv[0]} is not allowed by this node's policy"
        return {"ok": False, "outcomes": [], "error": why}
    argv = [a.replace("{admin}", admin) for a in argv]
    try:
        done = commands.run(command, [str(manifest)], argv=argv, timeout=PROVISION_TIMEOUT_S)
    except RunAsError as exc:
        return {"ok": False, "outcomes": [], "error": f"provisioner {argv[0]}: {exc}"}
    except (OSError, subprocess.TimeoutExpired) as exc:
        why = f"provisioner {argv[0]} failed to run: {exc}"
        return {"ok": False, "outcomes": [], "error": why}
    logins = [c["as"] for c in spec["consumers"]]
    return command_report(argv[0], done.returncode, done.stdout, logins)


class CommandOutcome(msgspec.Struct):
    """One login's outcome as a provisioner command reports it (its other fields are dropped)."""

    login: str
    outcome: OutcomeName
    reason: str = ""


class CommandReport(msgspec.Struct):
    """A provisioner command's JSON report on stdout: each login's outcome, and ``ok``."""

    outcomes: list[CommandOutcome]
    ok: bool | None = None


_REPORT = msgspec.json.Decoder(CommandReport)
_QUOTED = re.compile(r"'[^']*'")


def command_report(name: str, returncode: int, stdout: bytes, logins: list[str]) -> ProvisionReport:
    """What a declared provisioner command reported, kept to login, outcome and a short reason.

    Without a JSON report (its output is not a JSON object) an exit 0 counts as applied
    ("updated, unverified"); the probes are what prove it. A report that is not a
    :class:`CommandReport` fails every login of the manifest, with a reason naming the field.
    Anything else in its output is dropped, since it is shown and stored.
    """
    outcome: OutcomeName
    if not stdout.lstrip().startswith(b"{"):
        outcome = OutcomeName.UPDATED if returncode == 0 else OutcomeName.FAILED
        reason = "no JSON report; exit 0 taken as applied (unverified)" if returncode == 0 else ""
        return _reported(name, returncode, returncode == 0, logins, outcome, reason)
    try:
        report = _REPORT.decode(stdout)
    except msgspec.ValidationError as exc:
        # msgspec quotes an enum value it refuses: the command's text is not repeated here
        why = _QUOTED.sub("", str(exc)).replace("  ", " ")
        reason = f"provisioner {name} report refused: {why}"[:MAX_REASON]
        return _reported(name, returncode, False, logins, OutcomeName.FAILED, reason)
    except msgspec.DecodeError:
        reason = f"provisioner {name} printed a report that is not JSON"
        return _reported(name, returncode, False, logins, OutcomeName.FAILED, reason)
    outcomes: list[LoginOutcome] = [
        {"login": o.login, "outcome": o.outcome, "reason": o.reason[:MAX_REASON]}
        for o in report.outcomes
    ]
    ok = report.ok if report.ok is not None else returncode == 0
    return _exited(name, returncode, {"ok": ok and returncode == 0, "outcomes": outcomes})


def _reported(
    name: str, returncode: int, ok: bool, logins: list[str], outcome: OutcomeName, reason: str
) -> ProvisionReport:
    """Every login of the manifest with the same outcome and reason."""
    outcomes: list[LoginOutcome] = [
        {"login": c, "outcome": outcome, "reason": reason} for c in logins
    ]
    return _exited(name, returncode, {"ok": ok and returncode == 0, "outcomes": outcomes})


def _exited(name: str, returncode: int, out: ProvisionReport) -> ProvisionReport:
    if returncode != 0:
        out["error"] = f"provisioner {name} exited {returncode}"
    return out


def inspect_provider(spec: InspectSpec) -> Inspection:
    """The built-in provisioner's read-only inspection of one manifest, within a time bound.

    Per login: ``matches``, ``changed`` (changed outside meshtui), ``missing``, ``unknown``,
    ``waiting`` or ``refused``. Nothing is written; a declared command provisioner cannot be
    asked, so it answers no logins.
    """
    out: Inspection = {
        "provider": spec["provider"],
        "provision": spec["provision"],
        "ok": False,
        "logins": [],
    }
    admin = spec["admin"]
    if not is_builtin(spec["provisioner"]):
        out["error"] = "a declared provisioner command cannot be inspected"
        return out
    if not admin:
        out["error"] = "no admin conninfo file declared for the provisioner"
        return out
    try:
        manifest = node_path(spec["receives"], "manifest")
        admin_path = node_path(admin, "admin file")
    except ValueError as exc:
        out["error"] = str(exc)
        return out
    pool = ThreadPoolExecutor(max_workers=1)
    if spec.get("admin_only"):  # a rotation asking first: does the admin file still work
        future: Future[tuple[Finding, ...] | None] = pool.submit(
            check_admin, spec.get("kind"), admin_path, spec["provider"], spec["provision"]
        )
    else:
        future = pool.submit(inspect, manifest, admin_path)
    pool.shutdown(wait=False)  # a hung server must not hold up the answer
    try:
        found = future.result(timeout=INSPECT_TIMEOUT_S)
    except FutureTimeout:
        out["error"] = f"the provider's server did not answer within {INSPECT_TIMEOUT_S:.0f} s"
        return out
    except Exception as exc:  # the inspection's failure is this answer, not the agent's
        text = str(exc).strip().splitlines()  # psycopg and our errors carry no secret
        out["error"] = text[0] if text else type(exc).__name__
        return out
    out["ok"] = True
    out["logins"] = [
        {"login": f.login, "verdict": f.verdict, "reason": f.reason} for f in found or ()
    ]
    return out
