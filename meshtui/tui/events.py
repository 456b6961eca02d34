"""The messages background workers post to the app; ``@on`` handlers there own the UI.

Workers run in threads and only compute: they call the controller and post one of these
(``post_message`` is thread-safe). Each is an :class:`~meshtui.tui.outside.Outside`: what it
carries is made safe to show as it is set, before any widget sees it. Tests capture them with ``run_test(message_hook=...)`` and
assert on them rather than on pixels.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from meshtui.controller.reports import (
    AuditEvent,
    ChainReport,
    HostView,
    JobResult,
    PairDetail,
    RotationPlan,
    Summary,
)
from meshtui.tui.outside import Outside
from meshtui.tui.pairs import Fresh


class Looked(Outside):
    """The inventory's stamp now (a poll's look, off the UI thread: on PostgreSQL it is a
    query), or None when it could not be read."""

    def __init__(self, stamp: object | None) -> None:
        super().__init__()
        self.stamp = stamp


class Notified(Outside):
    """A controller committed a write to the shared inventory (the feed woke): read again."""


class LeadRead(Outside):
    """Who leads the controllers of a shared inventory, as one line ("" when there is nothing
    to say): the leader lease read off the UI thread (the database may be slow or gone)."""

    def __init__(self, line: str) -> None:
        super().__init__()
        self.line = line


class Loaded(Outside):
    """A fresh read of every pair's status (already turned into display rows) and the summary.

    ``partial``: only the first screenful of pairs by id, with no summary, sent ahead of the
    whole read on start so the first frame shows pairs; the whole read follows.
    """

    def __init__(
        self,
        fresh: Fresh,
        summary: Summary | None,
        seconds: float,
        note: str = "",
        seq: int = 0,
        *,
        partial: bool = False,
    ) -> None:
        super().__init__()
        self.fresh, self.summary, self.seconds, self.note = fresh, summary, seconds, note
        self.seq, self.partial = seq, partial


class DetailLoaded(Outside):
    """One pair's detail, for the pair screen."""

    def __init__(self, detail: PairDetail) -> None:
        super().__init__()
        self.detail = detail


class HostsLoaded(Outside):
    """Every node as the hosts screen shows it (``checked`` when agents were asked)."""

    def __init__(self, hosts: list[HostView], checked: bool) -> None:
        super().__init__()
        self.hosts, self.checked = hosts, checked


class AuditLoaded(Outside):
    """The audit events and whether the chain verifies."""

    def __init__(self, events: list[AuditEvent], check: ChainReport) -> None:
        super().__init__()
        self.events, self.check = events, check


class Exported(Outside):
    """The audit log was written to ``path``."""

    def __init__(self, path: str, fmt: str, count: int) -> None:
        super().__init__()
        self.path, self.fmt, self.count = path, fmt, count


class PlanReady(Outside):
    """A rotation plan came back (the pairs, every affected node resolved or not), or failed."""

    def __init__(self, plan: RotationPlan | None, error: BaseException | None = None) -> None:
        super().__init__()
        self.plan, self.error = plan, error


class JobKind(StrEnum):
    """What a job runs (the app's table JOB_RUNS says how); also the name of its action."""

    ROTATE = "rotate"
    DRILL = "drill"
    PROBE = "probe"
    PUSH = "push"
    ROTATE_SECRETS = "rotate_secrets"  # a vault pair's module's minted own secrets, or one
    DRILL_SECRET = "drill_secret"  # one minted own secret (its label)

    @property
    def needs_pairs(self) -> bool:
        """Whether the job is refused with nothing selected (push and probe run on all)."""
        return self not in (JobKind.PUSH, JobKind.PROBE)


@dataclass(frozen=True)
class Job:
    """One action the operator started: what it is, on which pairs, and why those pairs."""

    kind: JobKind
    ids: tuple[str, ...]
    basis: str  # "the selected pair", "3 marked pairs", ...

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", JobKind(self.kind))  # ValueError for an unknown kind

    @property
    def title(self) -> str:
        """``Rotate 3 marked pairs``."""
        if self.kind is JobKind.PUSH:
            return "Push every end"
        if self.kind is JobKind.ROTATE_SECRETS:
            if self.basis.startswith("secret "):
                return f"Rotate {self.basis}"
            return f"Rotate the minted secrets of {self.basis}"
        if self.kind is JobKind.DRILL_SECRET:
            return f"Drill {self.basis}"
        return f"{self.kind.value.capitalize()} {self.basis}"


class JobProgress(Outside):
    """The controller's ``progress(message, done, total)`` callback, carried to the UI thread."""

    def __init__(self, job: Job, text: str, done: int, total: int) -> None:
        super().__init__()
        self.job, self.text, self.done, self.total = job, text, done, total


class JobFinished(Outside):
    """An action ended with a report (``result`` is the controller's return value)."""

    def __init__(self, job: Job, result: JobResult, seconds: float) -> None:
        super().__init__()
        self.job, self.result, self.seconds = job, result, seconds


class JobFailed(Outside):
    """An action raised; ``error`` is what the one error boundary turns into a message."""

    def __init__(self, job: Job, error: BaseException) -> None:
        super().__init__()
        self.job, self.error = job, error
