"""What controller actions return: plain dataclasses the CLI prints and the dashboard shows."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import NamedTuple, TypeGuard

from meshtui.freeform import JsonObject
from meshtui.model import (
    SWAP,
    PairStatus,
    RotationMode,
    RotationState,
    State,
    format_duration,
    node_of,
)

Progress = Callable[[str, int, int], None]
"""``progress(message, done, total)``: called from the worker doing the action, never blocks."""


NOT_AS_DECLARED = "not yet as declared"
"""A consumer end whose file still holds its generation, but not where or as the declaration
now says (file, owner, group, mode): push writes it again; it is not "holding nothing"."""


@dataclass(frozen=True)
class Claim:
    """Node ``node`` spoke for ``end`` of ``pair`` (or of a provider module's server), which is
    not its own."""

    node: str
    pair: str
    end: str

    def describe(self) -> str:
        """One phrase, for push's output and the audit."""
        return (
            f"{self.node} claims the {self.end} end of {self.pair}, which is not its own: "
            "not believed (check that node)"
        )


def no_progress(message: str, done: int, total: int) -> None:
    """The default progress callback: ignore."""


@dataclass(frozen=True)
class Summary:
    """Counts for the dashboard's header and ``status``."""

    pairs: int
    working: int
    stale: int
    revoked: int
    unknown: int
    alarms: int
    withdrawn: int
    last_push: str | None
    secrets: tuple[tuple[str, int], ...] = ()  # modules' own secrets by state (state, count)


@dataclass(frozen=True)
class HostView:
    """One node as the hosts screen shows it."""

    name: str
    address: str
    agent: str
    fingerprint: str
    declared: bool
    reachable: bool | None  # None: not asked
    reason: str
    holds: int  # ends (pair, end) this node should hold
    behind: list[str] = field(default_factory=list)  # pair ids where this node's end is behind


@dataclass(frozen=True)
class Resolution:
    """Whether one node answered and proved its identity."""

    node: str
    ok: bool
    reason: str
    pairs: list[str] = field(default_factory=list)
    claims: tuple[Claim, ...] = ()
    """What the node's answer said of ends that are not its own (not believed)."""
    admin_refused: bool = False
    """It answered, but a provider's provisioner there cannot work with its admin file."""


@dataclass(frozen=True)
class RotationPlan:
    """The pairs a rotation would touch and each affected node, resolved or not."""

    pairs: list[str]
    nodes: list[Resolution]

    @property
    def ok(self) -> bool:
        """True when every affected node resolved."""
        return bool(self.pairs) and all(r.ok for r in self.nodes)


@dataclass(frozen=True)
class PairOutcome:
    """How one pair came out of a rotation or push."""

    pair: str
    ok: bool
    generation: int
    previous: int | None = None
    window_ms: float | None = None
    reason: str = ""
    sessions: int | None = None  # on the old credential when its provider took the new one
    sessions_left: int | None = None  # of those, open still (0 once ended; drain: all)
    sessions_ended: bool = False
    both_accepted_ms: float | None = None  # an overlap: the new added -> the old removed
    old_after: str = ""  # an overlap: what a login with the old said at its end
    refused: int | None = None  # an overlap: its logins with what the consumer held, refused

    def sessions_said(self) -> str:
        """The old credential's sessions in words ("" when its provider was not asked)."""
        return sessions_said(self.sessions, self.sessions_left, self.sessions_ended)


def sessions_said(found: int | None, left: int | None, ended: bool) -> str:
    """'2 sessions on the old credential ended' (', 1 still open'), or '… left to drain';
    empty when nobody counted them."""
    if found is None:
        return ""
    said = f"{found} session{'' if found == 1 else 's'} on the old credential"
    if not ended:
        return f"{said} left to drain"
    return said + " ended" + (f", {left} still open" if left else "")


@dataclass(frozen=True)
class RotationReport:
    """The end of a rotation: done (all new), rolled back (all old) or converging."""

    rotation: int | None
    outcome: RotationState  # DONE, ROLLED_BACK or CONVERGING
    pairs: list[PairOutcome]
    reason: str = ""
    probes: list[ProbeOutcome] = field(default_factory=list)  # the probe after (an operator's)

    @property
    def done(self) -> bool:
        """True when every end holds the new credential (a consumer's reload may have failed)."""
        return self.outcome == RotationState.DONE

    @property
    def ok(self) -> bool:
        """True when the rotation finished all-new and every consumer's reload worked."""
        return self.done and all(p.ok for p in self.pairs)

    def to_json(self) -> JsonObject:
        """The ``rotate --json`` object."""
        return asdict(self)


@dataclass(frozen=True)
class PushReport:
    """The end of a push: what was delivered and who is still behind."""

    delivered: list[PairOutcome]
    withdrawn: list[PairOutcome]
    behind: dict[str, str]  # pair -> reason (a pair of an unreachable node included)
    ahead: dict[str, str] = field(default_factory=dict)  # pair -> ends ahead, what became of it
    claims: dict[str, str] = field(default_factory=dict)  # node -> ends it claimed, not its own
    repaired: dict[str, str] = field(default_factory=dict)
    """Pairs delivered again because an end was found not as meshtui left it (a file changed,
    opened to others or taken away; a login changed outside meshtui), and what was found: a
    repair is said, so the watch alerts on it, never silent."""
    stale_by_probe: dict[str, str] = field(default_factory=dict)
    """Pairs whose every end holds its generation but whose last probe refused or could not
    decide: nothing to deliver (not behind), a probe decides them again."""
    unreachable: list[str] = field(default_factory=list)
    """The pairs in ``behind`` for no reason but a node of theirs that did not answer: not known
    to be behind (their ends may well hold their generation), only not reached."""

    @property
    def ok(self) -> bool:
        """True when nobody is behind (or unreachable)."""
        return not self.behind

    def to_json(self) -> JsonObject:
        """The ``push --json`` object."""
        return asdict(self)


@dataclass(frozen=True)
class ProbeOutcome:
    """One pair's probe as stored: the verdict and why."""

    pair: str
    verdict: str  # accepted | refused | unknown | no password demanded
    reason: str
    latency_ms: float | None
    loopback: bool = False


@dataclass(frozen=True)
class DrillStep:
    """One of a drill's three logins."""

    name: str  # "old before", "new after", "old after"
    expected: str  # accepted | refused
    verdict: str
    latency_ms: float | None
    reason: str = ""

    @property
    def ok(self) -> bool:
        """True when the login came out as expected."""
        return self.verdict == self.expected


@dataclass(frozen=True)
class DrillReport:
    """A drill: rotation plus three logins, with the window."""

    pair: str
    ok: bool
    steps: list[DrillStep]
    window_ms: float | None
    rotation: int | None
    reason: str = ""
    sessions: str = ""  # what the rotation did to the old credential's sessions ("": not asked)
    sessions_before: int | None = None  # open on the old credential when the provider took new
    sessions_after: int | None = None  # of those, open after the rotation
    rotation_kind: str = SWAP
    both_accepted_ms: float | None = None  # an overlap: the new added -> the old removed
    refused: int | None = None  # an overlap: logins with what the consumer held, refused

    def to_json(self) -> JsonObject:
        """The ``drill --json`` object."""
        return asdict(self)

    def sessions_line(self) -> str:
        """The old credential's sessions in words ("" when its provider did not say)."""
        if not self.sessions:
            return ""
        before = "-" if self.sessions_before is None else self.sessions_before
        after = "-" if self.sessions_after is None else self.sessions_after
        what = "ended" if self.sessions == "end" else "left to drain"
        return f"sessions on the old credential: {before} before, {after} after ({what})"


@dataclass(frozen=True)
class GenerationView:
    """One generation of a pair's credential: its digest (never the secret) and its life."""

    generation: int
    digest: str
    created_at: str
    discarded_at: str | None


@dataclass(frozen=True)
class DeliveryView:
    """What one end holds: the generation delivered, since when, and the last attempt's error."""

    end: str
    generation: int | None
    digest: str | None
    since: str | None
    attempted_at: str | None
    error: str | None


@dataclass(frozen=True)
class ProbeView:
    """One stored probe of a pair: when, which generation, its verdict and evidence."""

    at: str
    generation: int | None
    verdict: str
    reason: str
    latency_ms: float | None
    client_addr: str | None
    loopback: bool


@dataclass(frozen=True)
class RotationView:
    """One rotation that included a pair: when, how far it got, and how it ended."""

    id: int
    started_at: str
    state: str
    outcome: str | None
    reason: str | None


@dataclass(frozen=True)
class DrillRecord:
    """A stored drill: when it ran, and its report."""

    at: str | None
    report: DrillReport


SECRET_LABEL = "secret "
"""How an own secret's label begins (``secret app1/gitea smtp_password``) where pairs and
secrets share one list: an alert's subject, a push report's keys."""


@dataclass(frozen=True)
class Draining:
    """A pair's sessions on an old credential left to drain: how many were open when last
    counted (and when), and when they are ended at the latest (docs/sessions.md)."""

    pair: str
    sessions: int
    until: str
    counted_at: str

    def line(self) -> str:
        """``draining: 2 sessions on the old credential (counted ...), ended at ... at the latest``."""
        plural = "session" if self.sessions == 1 else "sessions"
        return (
            f"draining: {self.sessions} {plural} on the old credential (counted "
            f"{self.counted_at}), ended at {self.until} at the latest"
        )

    def to_json(self) -> dict[str, object]:
        """The ``draining`` object of the pair's ``status --json``."""
        return {"sessions": self.sessions, "until": self.until, "counted_at": self.counted_at}


@dataclass(frozen=True)
class Rotating:
    """How a pair is rotated as declared: ``swap`` or ``overlap`` with its grace, and for a pair
    that alternates between two logins, the one its consumer's file names now (``holds``)."""

    pair: str
    rotation: str
    grace: float
    holds: str | None = None

    def line(self) -> str:
        """``rotation: overlap (grace 5s); the consumer logs in as gitea_app1_x_b``."""
        said = f"rotation: {self.rotation} (grace {format_duration(self.grace)})"
        return said + (f"; the consumer logs in as {self.holds}" if self.holds else "")

    def to_json(self) -> dict[str, object]:
        """The ``rotation`` object of the pair's ``status --json``."""
        return {"rotation": self.rotation, "grace_s": self.grace, "holds": self.holds}


@dataclass(frozen=True)
class SecretStatus:
    """Where one of a module's own secrets stands; never its value."""

    module: str
    name: str
    origin: str  # "minted" | "supplied"
    pair: str | None  # the module's vault pair, under which status lists it
    vault: str | None  # the vault module
    path: str | None  # its KV path in the vault
    file: str
    version: int  # the version the mesh wants held (0: none supplied yet)
    vault_version: int | None
    file_version: int | None
    state: str  # "working" | "stale" | "unknown"
    reason: str
    supplied_by: str | None
    supplied_at: str | None
    since: str | None = None  # when the wanted version was sealed (minted, or supplied)
    max_age: float | None = None  # a supplied secret's declared maximum age, seconds
    overdue: bool = False  # held longer than max_age: an operator must supply a new one

    @property
    def label(self) -> str:
        """``secret app1/gitea smtp_password``: how an alert or a metric names it."""
        return f"{SECRET_LABEL}{self.module} {self.name}"

    @property
    def node(self) -> str:
        """The module's node, where its file is."""
        return node_of(self.module)

    def to_json(self) -> JsonObject:
        """The ``secret status --json`` object (and, under its vault pair, ``status --json``'s):
        who holds the secret (the module's file, the vault's path), the versions, never a
        value."""
        out = asdict(self)
        out["holders"] = {
            "module": {"node": self.node, "module": self.module, "file": self.file},
            "vault": {"module": self.vault, "path": self.path},
        }
        return out


@dataclass(frozen=True)
class SecretDrillCheck:
    """One check of a secret's drill: what it proves, whether it held, and what was seen."""

    name: str
    ok: bool
    seen: str


@dataclass(frozen=True)
class SecretDrillReport:
    """A drill of a minted secret: rotated, then proved by the module's node that the new
    version is in its file and is the vault's current version, and the old one in neither."""

    module: str
    name: str
    ok: bool
    old_version: int
    new_version: int | None
    checks: list[SecretDrillCheck]
    reason: str

    def to_json(self) -> JsonObject:
        return asdict(self)


@dataclass(frozen=True)
class PairDetail:
    """Everything about one pair for its detail screen (never a secret); lists newest first."""

    status: PairStatus
    values: dict[str, str]
    reload: list[str]
    generations: list[GenerationView]  # oldest first
    deliveries: list[DeliveryView]  # by end
    probes: list[ProbeView]
    drills: list[DrillRecord]
    rotations: list[RotationView]
    secrets: list[SecretStatus] = field(default_factory=list)  # a vault pair's module's own
    rotation: RotationMode = field(default_factory=RotationMode)  # as declared
    draining: Draining | None = None  # its sessions on an old credential left to drain


class AuditEvent(NamedTuple):
    """One event of the audit log as the CLI and the dashboard read it (never an inventory row).

    ``detail`` is the event's free-form JSON object: each action writes its own keys. A named
    tuple, not a frozen dataclass: the log is read whole, and 10,000 of these build in a third
    of the time.
    """

    seq: int
    at: str
    operator: str
    ssh_client: str | None
    kind: str
    pairs: list[str]
    detail: dict[str, object]
    outcome: str
    prev: str
    hash: str

    def to_json(self) -> dict[str, object]:
        """The ``audit --json`` object (and the export's), keys in the log's column order."""
        return {
            "seq": self.seq,
            "at": self.at,
            "operator": self.operator,
            "ssh_client": self.ssh_client,
            "kind": self.kind,
            "pairs": self.pairs,
            "detail": self.detail,
            "outcome": self.outcome,
            "prev": self.prev,
            "hash": self.hash,
        }


@dataclass(frozen=True)
class ChainReport:
    """Whether the audit chain verifies: how many events, and the first bad one and why."""

    ok: bool
    events: int
    bad_seq: int | None = None
    problem: str = ""


@dataclass(frozen=True)
class SecretsRotated:
    """What rotating modules' minted own secrets did: each secret's new version and where it
    stands after (working: in the vault and the file), never a value."""

    secrets: list[SecretStatus]

    @property
    def ok(self) -> bool:
        return all(s.state == "working" for s in self.secrets)


JobResult = (
    RotationReport
    | PushReport
    | SecretsRotated
    | SecretDrillReport
    | list[DrillReport]
    | list[ProbeOutcome]
)
"""What one of the dashboard's jobs returns: ``rotate``, ``push``, ``drill``, ``probe`` or the
rotation of a module's minted secrets' report."""


def is_drills(result: JobResult) -> TypeGuard[list[DrillReport]]:
    """True for a drill's reports (an empty list counts: no pair was drilled)."""
    return isinstance(result, list) and all(isinstance(r, DrillReport) for r in result)


def is_probes(result: JobResult) -> TypeGuard[list[ProbeOutcome]]:
    """True for a probe's outcomes (an empty list counts: no pair was probed)."""
    return isinstance(result, list) and all(isinstance(r, ProbeOutcome) for r in result)


def not_working(rows: Iterable[PairStatus], secrets: Iterable[SecretStatus] = ()) -> list[str]:
    """What fails a monitor's check (``status --check``, ``probe``): each active pair that is
    not working (stale, refused, unknown), each alarm, each module's own secret not working,
    one line each; empty when everything is working."""
    out = [
        f"{r.pair}: {r.state}: {r.reason}"
        for r in rows
        if r.alarm or (not r.withdrawn and r.state is not State.WORKING)
    ]
    out += [
        f"{s.module} secret {s.name}: {s.state}: {s.reason}"
        for s in secrets
        if s.state != State.WORKING
    ]
    return out


@dataclass(frozen=True)
class Leadership:
    """Who leads the controllers of this inventory (the leader lease's ``watch`` turn), for
    ``status`` and the dashboard: the holder, its epoch and the seconds left on its lease by
    the database's clock; or why there is no one to show."""

    shared: bool  # the inventory is on PostgreSQL, shared by several controllers
    holder: str | None = None
    host: str | None = None
    pid: int | None = None
    epoch: int = 0
    left_s: float | None = None  # <= 0: ran out, nobody leads until a standby takes it
    alone: bool = False  # configured for several machines ([lease]) but on SQLite
    problem: str | None = None  # the lease could not be read (the server named, no password)

    def line(self) -> str | None:
        """One line about the lead, or None when there is nothing to say (SQLite, alone by
        choice)."""
        if self.alone:
            return (
                "HA off: controller.toml has a [lease] table but this inventory is SQLite on "
                "this machine; no other controller shares it (point [inventory] postgres at a "
                "conninfo file to share one)"
            )
        if not self.shared:
            return None
        if self.problem is not None:
            return f"leader unknown: {self.problem}"
        if self.holder is None or self.left_s is None:
            return "no leader: no watch has taken the lead yet"
        if self.left_s <= 0:
            return (
                f"no leader: {self.holder}'s lease (epoch {self.epoch}) ran out "
                f"{-self.left_s:.0f} s ago; a standby watch, if one runs, takes over at its next "
                "try (none runs? start meshtui watch on a controller)"
            )
        return (
            f"leader {self.holder} (host {self.host}, pid {self.pid}), epoch {self.epoch}, "
            f"{self.left_s:.0f} s left on its lease"
        )
