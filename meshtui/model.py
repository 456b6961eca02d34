"""The words of docs/ARCHITECTURE.md as plain dataclasses: nodes, modules, pairs, states. No I/O here."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from meshtui.kinds.kind import DEFAULT_KIND

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}\Z")
CONTROLLER_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}\Z")
"""A controller's name: lower-case letters, digits, ``.``, ``_``, ``-`` (a host name fits)."""
"""Node and module names: they become file names, login stems and path parts, so keep them plain."""

BUILTIN = "builtin"
"""The built-in provisioner, as a declaration names it: it reconciles whichever kind the manifest
names (``"builtin:postgres"``, its name from before every kind had one, is read as an alias)."""

BUILTIN_ARGV = ("builtin:postgres",)
"""How the inventory stores the built-in provisioner and an agent is sent it: the spelling of
before, kept so that stored specs and agents read the same across an upgrade."""


def is_builtin(argv: Sequence[str] | None) -> bool:
    """Whether a provider's ``provisioner`` means the built-in one (run in the agent's process)."""
    return not argv or tuple(argv) in (BUILTIN_ARGV, (BUILTIN,))


DEFAULT_MODE = "0600"
"""A credential file's mode when its ``requires`` entry names none."""

CONNECTION_FORMATS = ("env", "json", "dsn")
"""How a connection file may be written: KEY=value lines (libpq's own PG* names for
PostgreSQL), one JSON object, or one line a client takes whole (a libpq conninfo, a Redis URL)."""

ACCOUNT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,31}\Z")
"""A user or group name as a declaration may give it for a credential file's owner or group."""
# ``\Z``, not ``$``: ``$`` also matches before a trailing newline, which would let "app1\n" in.


def plain_address(text: str) -> bool:
    """True for an IPv4 or IPv6 address written plainly: no IPv6 scope id ("fe80::1%eth0").

    Python accepts any text after '%' as a scope id (tabs, '#', quotes), and addresses end up
    in pg_hba.conf lines, so only the bare address is an address here.
    """
    if "%" in text:
        return False
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def file_mode(text: str) -> int:
    """A credential file's mode from its declared string ("0640"); ValueError saying why not.

    Never anything for "other", never set-id or sticky bits, and the owner can always read it.
    """
    if not re.fullmatch(r"0?[0-7]{3}", text):
        raise ValueError(f'{text!r} is not a file mode (write it like "0640")')
    mode = int(text, 8)
    if mode & 0o007:
        raise ValueError(f"{text} lets every user on the node read or change the credential")
    if not mode & 0o400:
        raise ValueError(f"{text} does not let the file's owner read it")
    return mode


class State(StrEnum):
    """A pair's state, as docs/ARCHITECTURE.md "States of a pair" defines it."""

    WORKING = "working"
    STALE = "stale"
    REVOKED = "revoked"
    UNKNOWN = "unknown"


class Verdict(StrEnum):
    """What one login (or one probe of a pair) showed; the evidence behind a pair's state."""

    ACCEPTED = "accepted"
    REFUSED = "refused"
    UNKNOWN = "unknown"
    NO_PASSWORD = "no password demanded"


class OutcomeName(StrEnum):
    """What a provisioner run did to one login (the ``outcome`` of its report)."""

    CREATED = "created"
    UPDATED = "updated"
    UNCHANGED = "unchanged"
    WAITING = "waiting"  # its secret file is not there (yet)
    REMOVED = "removed"
    DROP_PENDING = "drop pending"  # locked, not dropped: the next run tries again
    REFUSED = "refused"  # not ours, or an unsafe name
    FAILED = "failed"


APPLIED: frozenset[str] = frozenset(
    {OutcomeName.CREATED, OutcomeName.UPDATED, OutcomeName.UNCHANGED}
)
"""Outcomes after which the login holds the credential the manifest names."""

SUCCESS: frozenset[str] = APPLIED | {OutcomeName.REMOVED}
"""Outcomes that count as success for a provisioner's exit code."""

KEEP_PINNED: frozenset[str] = frozenset(
    {OutcomeName.DROP_PENDING, OutcomeName.FAILED, OutcomeName.REFUSED, OutcomeName.WAITING}
)
"""Outcomes after which the login may still exist as it was (never unpin or forget it)."""


class Drift(StrEnum):
    """What a read-only inspection found for one login, compared with its secret file."""

    MATCHES = "matches"
    CHANGED = "changed"  # made by meshtui, changed outside it
    MISSING = "missing"
    UNKNOWN = "unknown"  # the admin cannot see it
    WAITING = "waiting"
    REFUSED = "refused"


class End(StrEnum):
    """The two ends of a pair."""

    CONSUMER = "consumer"
    PROVIDER = "provider"


class RotationState(StrEnum):
    """Where a journaled rotation is. The last four are also how it ended, its outcome: all
    new, all old again, left for ``push`` to converge, or new with a consumer locked out."""

    JOURNALED = "journaled"
    DELIVERING = "delivering"
    ROLLING_BACK = "rolling back"
    DONE = "done"
    ROLLED_BACK = "rolled back"
    CONVERGING = "converging"
    LOCKED_OUT = "locked out"  # break-glass: new at every provider, some consumer not yet
    ADDING_NEW = "adding new"  # overlap: the provider is asked to accept the new beside the old
    BOTH_ACCEPTED = "both accepted"  # overlap: old and new accepted, the consumer next
    REMOVING_OLD = "removing old"  # overlap: the consumer proved the new; the old goes


class Sessions(StrEnum):
    """What a rotation does to the sessions (connections, tokens) opened with the old
    credential, which a changed password alone ends on none of the servers (docs/sessions.md).

    ``end``: ended when the provider takes the new credential (the default: a rotation after a
    leak must shut the intruder out, not only refuse its next login). ``drain``: left to end
    on their own, counted in the rotation's report and the pair's status."""

    END = "end"
    DRAIN = "drain"


DEFAULT_SESSIONS = Sessions.END
"""What a rotation does to old sessions when neither the command nor the declaration says."""

DEFAULT_DRAIN_S = 900.0
"""How long sessions left to drain stay open at most when the declaration names no ``drain``:
15 minutes, the longest an OpenBao token a meshtui role issues lives, so every kind's drain
ends within the same bound (docs/sessions.md)."""

SESSIONS_UNSETTLED = "its sessions on the old credential could not be"
"""How a provisioner's note begins when it was asked to end or count a login's sessions on the
old credential and could not (the login holds the new one all the same)."""


DEFAULT_PROBE_EVERY_S = 300.0
"""Without a policy pairs are still probed, every five minutes; they are never rotated."""

_DURATION_RE = re.compile(r"^([1-9][0-9]{0,9})(s|m|h|d)$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """``"90d"``, ``"12h"``, ``"5m"``, ``"30s"`` -> seconds; ValueError saying what is allowed."""
    found = _DURATION_RE.match(text)
    if found is None and re.fullmatch(r"0+[smhd]", text):
        raise ValueError(f'{text!r} is not a duration longer than 0: write one, like "30s"')
    if found is None:
        raise ValueError(
            f"{text!r} is not a duration: write a whole number and one unit, "
            'like "90d", "12h", "5m" or "30s"'
        )
    return float(int(found[1]) * _UNIT_S[found[2]])


def format_duration(seconds: float) -> str:
    """Seconds as the largest whole unit (``7776000`` -> ``"90d"``); odd values in seconds."""
    whole = int(seconds)
    for unit in ("d", "h", "m"):
        if whole and whole % _UNIT_S[unit] == 0:
            return f"{whole // _UNIT_S[unit]}{unit}"
    return f"{whole}s"


class PolicySource(StrEnum):
    """Where a pair's effective policy value came from."""

    DEFAULT = "default"  # nothing declared: no rotation, probe every DEFAULT_PROBE_EVERY_S
    GLOBAL = "global"  # the top-level [policy] table
    PROVIDER = "provider"  # the provider module's rotate_every / probe_every
    CONSUMER = "consumer"  # the requires entry's rotate_every / probe_every


@dataclass(frozen=True)
class PolicySettings:
    """``rotate_every`` / ``probe_every`` as declared at one level, in seconds (None: not set)."""

    rotate_every: float | None = None
    probe_every: float | None = None


SWAP = "swap"
"""A rotation that replaces the credential at the provider, then at the consumer (a window)."""

OVERLAP = "overlap"
"""A rotation that adds the new credential beside the old, delivers and proves it at the
consumer, then removes the old (docs/rotation-overlap.md): no window."""

ROTATIONS = (SWAP, OVERLAP)
"""The rotations a declaration may name (``rotation = "overlap"``)."""

OVERLAP_STATES = frozenset({"adding new", "both accepted", "removing old"})
"""The states of an open rotation (``RotationState``) in which an overlap may have both
credentials accepted at its provider: status, doctor and watch name such a pair."""

OVERLAP_OPEN = "overlap not closed"
"""What status, doctor and an alert say of a pair whose overlap may still accept both."""

DEFAULT_GRACE_S = 5.0
"""How long an overlap keeps the old credential accepted at most after the consumer holds the
new one, when the declaration names no ``grace``."""


@dataclass(frozen=True)
class RotationMode:
    """How a pair's credential is rotated (:data:`ROTATIONS`) and, for an overlap, its grace
    in seconds: the longest the old stays accepted once the consumer holds the new."""

    rotation: str = SWAP
    grace: float = DEFAULT_GRACE_S

    @property
    def settle(self) -> float:
        """How long the credential a consumer's file named a moment ago stays accepted after
        the file changed (:data:`SETTLE_S`, never past the grace)."""
        return min(SETTLE_S, self.grace)


SETTLE_S = 1.0
"""An overlap removes the credential a consumer's file stopped naming (the old one going
forward, the new one on a rollback) no sooner than this after the file changed: an app that
read the file just before it changed, and is slow to log in (a loaded machine, a client that
builds a session first), still logs in with what it read."""


@dataclass(frozen=True)
class Policy:
    """A pair's effective policy and where each value came from."""

    rotate_every: float | None = None  # None: never rotated automatically
    probe_every: float = DEFAULT_PROBE_EVERY_S
    rotate_source: PolicySource = PolicySource.DEFAULT
    probe_source: PolicySource = PolicySource.DEFAULT

    def describe(self) -> str:
        """``rotate 90d (provider), probe 5m (default)``."""
        rotate = (
            "no rotation"
            if self.rotate_every is None
            else f"rotate {format_duration(self.rotate_every)}"
        )
        return (
            f"{rotate} ({self.rotate_source}), "
            f"probe {format_duration(self.probe_every)} ({self.probe_source})"
        )


def effective_policy(
    top: PolicySettings, provider: PolicySettings, consumer: PolicySettings
) -> Policy:
    """The most specific level wins, per key: consumer, then provider, then global."""
    rotate: tuple[float | None, PolicySource] = (None, PolicySource.DEFAULT)
    probe: tuple[float, PolicySource] = (DEFAULT_PROBE_EVERY_S, PolicySource.DEFAULT)
    for source, settings in (
        (PolicySource.GLOBAL, top),
        (PolicySource.PROVIDER, provider),
        (PolicySource.CONSUMER, consumer),
    ):
        if settings.rotate_every is not None:
            rotate = (settings.rotate_every, source)
        if settings.probe_every is not None:
            probe = (settings.probe_every, source)
    if probe[1] is PolicySource.DEFAULT and rotate[0] is not None and rotate[0] < probe[0]:
        probe = (rotate[0], PolicySource.DEFAULT)  # never probe less often than it rotates
    return Policy(
        rotate_every=rotate[0], probe_every=probe[0], rotate_source=rotate[1], probe_source=probe[1]
    )


@dataclass(frozen=True)
class Node:
    """A machine: private address (probes go there), agent URL, and its two public keys."""

    name: str
    address: str
    agent: str
    seal_key: bytes
    verify_key: bytes


@dataclass(frozen=True)
class Offer:
    """A provision a module provides: the port it listens on and what kind of software it is.

    ``ca`` (Redis) is the CA certificate, a path on each consumer's node, that probes verify the
    server's certificate against; ``tls`` False means a plain-text Redis (see docs/redis.md).
    """

    name: str
    port: int
    kind: str = DEFAULT_KIND  # a registered kind's name (meshtui.kinds.registry)
    ca: str | None = None
    tls: bool = True
    sessions: Sessions | None = None  # its pairs' old sessions in a rotation (None: default)
    rotation: str | None = None  # as declared on the offer (None: not set here)
    grace: float | None = None
    drain: float | None = None  # seconds its pairs' old sessions may drain (None: default)


@dataclass(frozen=True)
class ConnectionFile:
    """Where a consumer's non-secret connection facts go (login, host, port, database, CA) and
    in which of :data:`CONNECTION_FORMATS`; written beside the credential with its access."""

    file: str
    format: str
    ca: str | None = None  # the CA the app verifies the server with (Redis: the provider's)


@dataclass(frozen=True)
class Requirement:
    """A provision a module requires, where its credential goes, and how to reload it."""

    name: str
    file: str
    values: Mapping[str, str] = field(default_factory=dict)
    reload: tuple[str, ...] = ()
    source: str | None = None  # the `from` key: which provider, when several provide it
    owner: str | None = None  # the credential file's owner on the node (None: the agent's user)
    group: str | None = None  # its group (None: the agent's group)
    mode: str = DEFAULT_MODE  # its mode, as declared ("0640")
    policy: PolicySettings = field(default_factory=lambda: PolicySettings())
    connection: ConnectionFile | None = None  # login, host, port... for the app, no secret
    format: str = "password"  # the file's format: the password alone, or a unit with the login
    sessions: Sessions | None = None  # its pair's old sessions in a rotation (None: offer's)
    rotation: str | None = None  # as declared on the requirement (None: the offer's)
    grace: float | None = None
    drain: float | None = None  # seconds its old sessions may drain (None: the offer's)


VAULT_PROVISION = "secret"
"""The provision a vault provides; a module with its own secrets requires it (its vault pair)."""

KV_MOUNT = "meshtui"
"""The vault's KV version 2 mount holding each module's own path (``meshtui/data/<login>/...``):
here, not in bao.py, so that ``status`` names the path without importing httpx."""

ALPHABETS = {
    "urlsafe": "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_",
    "alnum": "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
    "hex": "0123456789abcdef",
}
"""What a minted own secret may be made of (``alphabet``), by name."""


@dataclass(frozen=True)
class OwnSecret:
    """A module's own secret (not a pair's): minted by the mesh (``length`` characters of
    ``alphabet``) or ``supplied`` by an operator; kept in the module's path of its vault and
    written on the module's node as ``file`` (owner, group, mode), then ``reload`` runs."""

    name: str
    file: str
    supplied: bool = False
    length: int = 32
    alphabet: str = "urlsafe"
    reload: tuple[str, ...] = ()
    owner: str | None = None
    group: str | None = None
    mode: str = DEFAULT_MODE
    max_age: float | None = None  # seconds a supplied value may be held before an alert says so


@dataclass(frozen=True)
class Module:
    """A piece of software on a node, named ``node/module``."""

    node: str
    name: str
    provides: tuple[Offer, ...] = ()
    requires: tuple[Requirement, ...] = ()
    receives: Mapping[str, str] = field(default_factory=dict)
    grants: Mapping[str, str] = field(default_factory=dict)
    admin: str | None = None
    provisioner: tuple[str, ...] = BUILTIN_ARGV
    pin: bool = False  # provider only: one pg_hba line per login, from its consumer's address
    policy: PolicySettings = field(default_factory=lambda: PolicySettings())
    secrets: tuple[OwnSecret, ...] = ()  # its own secrets, kept in the vault it requires

    @property
    def id(self) -> str:
        """``node/module``."""
        return f"{self.node}/{self.name}"


def node_of(module_id: str) -> str:
    """The node of a ``node/module`` id."""
    return module_id.split("/", 1)[0]


def pair_id(provision: str, consumer: str, provider: str) -> str:
    """``database:app1/gitea->db1/postgres``."""
    return f"{provision}:{consumer}->{provider}"


def split_pair_id(text: str) -> tuple[str, str, str]:
    """Inverse of :func:`pair_id`; ValueError when ``text`` is not a pair id."""
    provision, sep, rest = text.partition(":")
    consumer, arrow, provider = rest.partition("->")
    if not (sep and arrow and provision and "/" in consumer and "/" in provider):
        raise ValueError(f"{text!r} is not a pair id (like database:app1/gitea->db1/postgres)")
    return provision, consumer, provider


@dataclass(frozen=True)
class Pair:
    """One provision between one consumer module and one provider module, as declared."""

    provision: str
    consumer: str
    provider: str
    login: str
    file: str
    port: int
    values: Mapping[str, str] = field(default_factory=dict)
    reload: tuple[str, ...] = ()
    owner: str | None = None  # the consumer's credential file: owner, group and mode
    group: str | None = None
    mode: str = DEFAULT_MODE
    policy: Policy = field(default_factory=lambda: Policy())
    rotation: RotationMode = field(default_factory=RotationMode)

    @property
    def id(self) -> str:
        """The pair id."""
        return pair_id(self.provision, self.consumer, self.provider)

    @property
    def consumer_node(self) -> str:
        """The node the consumer module runs on."""
        return node_of(self.consumer)

    @property
    def provider_node(self) -> str:
        """The node the provider module runs on."""
        return node_of(self.provider)


@dataclass(frozen=True)
class Declaration:
    """A whole declaration after resolution: nodes, modules and the pairs they imply."""

    source: str
    nodes: Mapping[str, Node]
    modules: Mapping[str, Module]
    pairs: tuple[Pair, ...]
    policy: PolicySettings = field(default_factory=lambda: PolicySettings())


@dataclass(slots=True)
class PairStatus:
    """One row of ``meshtui status``: a pair, who holds it, how far each end is, and its state.

    Read-only by convention, not ``frozen``: every status read builds one per pair, and a frozen
    dataclass costs seven times as much to construct (10,000 of them: ~30 ms of a 100 ms read).
    """

    pair: str
    provision: str
    consumer: str
    provider: str
    login: str
    generation: int
    consumer_generation: int | None
    provider_generation: int | None
    withdrawn: bool
    state: State
    reason: str
    probed_at: str | None
    rotated_at: str | None
    consumer_file: str
    created_at: str
    alarm: bool = False
    latency_ms: float | None = None
    kind: str = DEFAULT_KIND  # the provider's software (its provides entry's kind)

    @property
    def consumer_node(self) -> str:
        """The consumer's node."""
        return node_of(self.consumer)

    @property
    def provider_node(self) -> str:
        """The provider's node."""
        return node_of(self.provider)

    def to_json(self) -> dict[str, object]:
        """The ``status --json`` object."""
        return {
            "pair": self.pair,
            "provision": self.provision,
            "consumer": self.consumer,
            "provider": self.provider,
            "login": self.login,
            "generation": self.generation,
            "consumer_generation": self.consumer_generation,
            "provider_generation": self.provider_generation,
            "withdrawn": self.withdrawn,
            "state": str(self.state),
            "reason": self.reason,
            "probed_at": self.probed_at,
            "rotated_at": self.rotated_at,
            "created_at": self.created_at,
            "alarm": self.alarm,
            "latency_ms": self.latency_ms,
            "kind": self.kind,
            "holders": {
                "consumer": {
                    "node": self.consumer_node,
                    "module": self.consumer,
                    "file": self.consumer_file,
                },
                "provider": {
                    "node": self.provider_node,
                    "module": self.provider,
                    "login": self.login,
                },
            },
        }
