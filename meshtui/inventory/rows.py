"""The inventory's rows as typed shapes: what each table holds, as the store returns it.

TypedDicts, not dataclasses: a row comes out of SQLite as a mapping of its column names, so
the keys stay the columns (one vocabulary from the schema to the screen), callers and tests keep
indexing by name, and mypy checks every key and its type. JSON columns are decoded on the way
out (``values``, ``reload``, ``spec``, ``items``, ``evidence``, ``pairs``, ``detail``); the
``*Record`` shapes are what a write takes, columns as stored.

A module's ``spec`` is the one column held as msgspec Structs (:class:`ModuleSpec`): declare
builds one and stores it with :func:`encode_spec`, every read decodes it with
:func:`decode_spec`, checked once, here, against that same shape.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final, NotRequired, TypedDict

import msgspec

from meshtui.errors import InventoryError
from meshtui.freeform import JsonObject

Provision = tuple[str, str]
"""(provider module, provision name): one manifest on one provider node."""


class NodeRow(TypedDict):
    """A node: where its agent listens and its public keys (base64)."""

    name: str
    address: str
    agent: str
    seal_key: str
    verify_key: str
    declared: int
    updated_at: str


class OfferSpec(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One provision a module offers, in its stored spec: ``kind``, ``ca`` and ``tls`` are
    stored only for a kind other than the default."""

    name: str
    port: int
    kind: str | None = None
    ca: str | None = None
    tls: bool = True
    sessions: str | None = None  # a Sessions, when declared on the offer
    drain: float | None = None  # seconds old sessions may drain, when declared on the offer


class ConnectionSpec(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Where a consumer's connection file goes, and its format (``env``, ``json``, ``dsn``)."""

    file: str
    format: str
    ca: str | None = None


class NeedSpec(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One provision a module requires, the file it wants it in, and its connection file."""

    name: str
    file: str
    connection: ConnectionSpec | None = None
    sessions: str | None = None  # a Sessions, when declared on the requirement
    drain: float | None = None  # seconds old sessions may drain, when declared on it
    format: str = "password"  # the credential file's format (meshtui.credential_unit)


class OwnSecretSpec(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One of a module's own secrets, in its stored spec: minted or supplied, and its file."""

    name: str
    file: str
    supplied: bool
    length: int
    alphabet: str
    reload: list[str]
    owner: str | None
    group: str | None
    mode: str
    max_age: float | None = None  # seconds (a supplied secret's; None: no limit)


class OwnSecretRow(TypedDict):
    """The state of one of a module's own secrets (never its value; ``sealed`` only for the
    vault node, until the vault stored it)."""

    module: str
    name: str
    version: int
    digest: str | None
    sealed: bytes | None
    vault_version: int | None
    kv_version: int | None
    file_version: int | None
    supplied_by: str | None
    supplied_at: str | None  # when ``version`` was sealed: supplied (by supplied_by) or minted
    error: str | None
    updated_at: str
    digest_key: bytes | None
    """The key this secret's digests are made with when they were made before the mesh had a
    digest key, boxed under the mesh's key; None: derived from the mesh's key."""


class DigestKeyRow(TypedDict):
    """The mesh's digest key as one controller holds it: sealed to its key, never in plain;
    signed (``sig``, over :func:`meshtui.controller.act.digest_keys.signed_text`) by the
    controller that sealed it."""

    controller: str
    sealed: bytes
    sealed_by: str
    sig: str
    at: str


class ModuleSpec(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A module's declared spec, decoded once from the canonical JSON it is stored as
    (:func:`decode_spec`); a key an older spec lacks reads as its default."""

    provides: list[OfferSpec] = []
    receives: dict[str, str] = {}  # provision -> the manifest's path on the node
    grants: dict[str, str] = {}  # provision -> the grants folder's path on the node
    admin: str | None = None
    provisioner: list[str] | None = None
    requires: list[NeedSpec] = []
    pin: bool = False
    secrets: list[OwnSecretSpec] = []


_SPEC_DECODER = msgspec.json.Decoder(ModuleSpec)

_sorted_json = json.JSONEncoder(sort_keys=True).encode
"""``json.dumps(x, sort_keys=True)`` without building an encoder per call."""

_ALWAYS_STORED = ("admin", "grants", "provides", "provisioner", "receives", "requires")
"""ModuleSpec keys stored even at their default, as the first specs were. Every other key of the
spec shapes is left out at its default (``omit_defaults``): a key added later with a default
leaves every spec stored before it byte for byte as it was, so declare finds it unchanged."""


def encode_spec(spec: ModuleSpec) -> str:
    """``spec`` as stored: canonical JSON (sorted keys, ``json``'s separators), byte for byte
    what declare has always written, so declaring the same module again compares equal.

    Defaults are left out but for :data:`_ALWAYS_STORED`, and an offer of a kind other than
    the default writes ``kind``, ``ca`` and ``tls`` together (``ca`` null, ``tls`` true too)."""
    stored = msgspec.to_builtins(spec)
    for key in _ALWAYS_STORED:
        if key not in stored:
            stored[key] = msgspec.to_builtins(getattr(spec, key))
    for offer, written in zip(spec.provides, stored["provides"], strict=True):
        if offer.kind is not None:
            written.update(ca=offer.ca, tls=offer.tls)
    text: str = _sorted_json(stored)
    return text


def decode_spec(module: str, text: str | bytes) -> ModuleSpec:
    """A module's stored spec as its typed shape; InventoryError naming the module when the
    stored JSON does not have that shape."""
    try:
        return _SPEC_DECODER.decode(text)
    except msgspec.DecodeError as exc:
        raise InventoryError(
            f"module {module}: its stored spec is not as declare writes it ({exc}); "
            "declare again, or restore the inventory from a backup"
        ) from exc


class ModuleRow(TypedDict):
    """A module with its spec decoded."""

    id: str
    node: str
    name: str
    spec: ModuleSpec
    declared: int


class ModuleRecord(TypedDict):
    """A module as stored: its spec still the canonical JSON declare compares."""

    id: str
    node: str
    name: str
    spec: str
    declared: int


class PairFields(TypedDict):
    """The columns of a pair that come from the declaration (values and reload as JSON)."""

    id: str
    provision: str
    consumer: str
    provider: str
    login: str
    file: str
    port: int
    values: str
    reload: str
    file_owner: str | None
    file_group: str | None
    file_mode: str


class PairRecord(PairFields):
    """A whole pair as stored: the declared columns plus its generation and times."""

    generation: int
    created_at: str
    rotated_at: str | None
    withdrawn_at: str | None


class PairRow(TypedDict):
    """A pair with ``values`` and ``reload`` decoded."""

    id: str
    provision: str
    consumer: str
    provider: str
    login: str
    file: str
    port: int
    values: dict[str, str]
    reload: list[str]
    file_owner: str | None
    file_group: str | None
    file_mode: str
    generation: int
    created_at: str
    rotated_at: str | None
    withdrawn_at: str | None


class FileAccess(TypedDict):
    """Where and as whom a consumer's credential file is declared."""

    file: str
    file_owner: str | None
    file_group: str | None
    file_mode: str


class GenerationRow(TypedDict):
    """One minted generation: sealed to both ends (None once discarded) and its digest."""

    pair: str
    generation: int
    consumer_sealed: bytes | None
    provider_sealed: bytes | None
    digest: str
    created_at: str
    discarded_at: str | None


class DeliveryRow(TypedDict):
    """Which generation one end of a pair holds (None: never delivered; 0: holds nothing)."""

    pair: str
    end: str
    generation: int | None
    digest: str | None
    since: str | None
    attempted_at: str | None
    error: str | None


class ProbeRecord(TypedDict):
    """A probe's result as stored (verdict, reason, timing; never a secret)."""

    pair: str
    at: str
    generation: int | None
    verdict: str
    reason: str
    latency_ms: float | None
    used_password: int | None
    loopback: int
    client_addr: str | None
    control: str | None
    withdrawn: int


class ProbeRow(ProbeRecord):
    """A stored probe with its number."""

    id: int


class DrillRecord(TypedDict):
    """A drill's outcome as stored; ``evidence`` is its report as JSON."""

    pair: str
    at: str
    rotation: int | None
    ok: int
    window_ms: float | None
    evidence: str


class DrillStepEvidence(TypedDict):
    """One of a drill's three logins as its evidence stores it."""

    name: str  # "old before", "new after", "old after"
    expected: str  # accepted | refused
    verdict: str
    latency_ms: float | None
    reason: str


class DrillEvidence(TypedDict):
    """A drill's evidence: its report (``DrillReport.to_json()``) as stored and decoded."""

    pair: str
    ok: bool
    steps: list[DrillStepEvidence]
    window_ms: float | None
    rotation: int | None
    reason: str
    sessions: NotRequired[str]
    sessions_before: NotRequired[int | None]
    sessions_after: NotRequired[int | None]
    rotation_kind: NotRequired[str]  # "overlap" (absent: a swap, or a drill stored before)
    both_accepted_ms: NotRequired[float | None]
    refused: NotRequired[int | None]


class DrillRow(TypedDict):
    """A stored drill with its evidence decoded."""

    id: int
    pair: str
    at: str
    rotation: int | None
    ok: int
    window_ms: float | None
    evidence: DrillEvidence


RotationItem = TypedDict(
    "RotationItem",
    {
        "pair": str,
        "from": int,
        "to": int,
        "revoke_old": NotRequired[bool],
        "sessions": NotRequired[str],
        "drain_s": NotRequired[float],
    },
)
"""One pair of a rotation: the generation it leaves and the one it goes to; ``revoke_old``:
break-glass (a consumer end that cannot take it is locked out, not rolled back); ``sessions``:
what becomes of the sessions opened with the old credential (a ``Sessions`` value); ``drain_s``:
how long they may stay open at most, when left to drain."""


class RotationStart(TypedDict):
    """What a rotation needs to run: its number and its items (a journal entry, or more)."""

    id: int
    items: list[RotationItem]


class RotationRow(RotationStart):
    """A journaled rotation."""

    started_at: str
    finished_at: str | None
    state: str
    outcome: str | None
    reason: str | None
    owner_pid: int | None


class RotationUpdate(TypedDict, total=False):
    """The columns a rotation's progress changes."""

    state: str
    owner_pid: int
    reason: str
    finished_at: str
    outcome: str


class PolicyRecord(TypedDict):
    """A pair's effective policy as declare stores it (sources as their names)."""

    pair: str
    rotate_every: float | None
    probe_every: float
    rotate_source: str
    probe_source: str
    rotation: str  # "swap" or "overlap" (meshtui.model.ROTATIONS)
    grace: float


class DrainRecord(TypedDict):
    """A pair's sessions on an old credential left to drain: the rotation that left them, the
    provider's mark that tells them from later sessions, when they are ended at the latest,
    how many were open at the last count, and when its provider was last asked."""

    pair: str
    rotation: int
    mark: str
    until: str
    sessions: int
    counted_at: str


class ClaimRecord(TypedDict):
    """Whose a claim at a provider is (a bucket): the module that made it, and since when."""

    provider: str
    claim: str
    module: str
    since: str


class AuditRecord(TypedDict):
    """One audit event as chained and stored: ``pairs`` and ``detail`` as canonical JSON."""

    seq: int
    at: str
    operator: str
    ssh_client: str | None
    kind: str
    pairs: str
    detail: str
    outcome: str
    prev: str
    hash: str
    controller: str | None  # the controller that wrote it (None: before controllers were named)


class EventRow(TypedDict):
    """One audit event with ``pairs`` and ``detail`` decoded (detail is free-form JSON)."""

    seq: int
    at: str
    operator: str
    ssh_client: str | None
    kind: str
    pairs: list[str]
    detail: JsonObject  # each kind of event records its own detail
    outcome: str
    prev: str
    hash: str
    controller: str | None


class HeadRow(TypedDict):
    """The audit chain's head: newest event number and hash, and the controller's signature."""

    seq: int
    hash: str
    sig: str | None
    controller: str | None  # whose key signed it (None: the one controller of old)


HeldSealed = tuple[str, bytes | None, bytes | None]
"""A generation still held sealed: (digest, consumer_sealed, provider_sealed)."""

HeldEnd = tuple[int | None, str | None, str | None, str | None]
"""What one end holds as the deliveries table says: (generation, digest, since, error)."""

StatusRow = tuple[
    str,  # id
    str,  # provision
    str,  # consumer
    str,  # provider
    str,  # login
    str,  # file
    int,  # generation
    str,  # created_at
    str | None,  # rotated_at
    str | None,  # withdrawn_at
    int | None,  # consumer_generation: the generation the consumer end holds
    str | None,  # consumer_error
    int | None,  # provider_generation: the generation the provider end holds
    str | None,  # provider_error
    str | None,  # verdict of the newest probe (None: never probed)
    str | None,  # reason of the newest probe (None when it logged in: no state says it)
    str | None,  # probed_at: when the newest probe ran
    int | None,  # probe_generation: the generation it tried
    int | None,  # loopback: it did not cross the private network
    str | None,  # client_addr: where the server saw it from
    int | None,  # probe_withdrawn: it probed a withdrawn pair
    float | None,  # latency_ms
    int | None,  # used_password
    str | None,  # provider_attempted_at: the provider end's last attempt (only beside its error)
]
"""One pair joined with both ends' deliveries and its newest probe (status's one query). A plain
tuple, since status reads every pair on every refresh, read by name through the column numbers
below (never a bare index): :data:`STATUS_COLUMNS` are the query's column names, in order."""

STATUS_COLUMNS = (
    "id",
    "provision",
    "consumer",
    "provider",
    "login",
    "file",
    "generation",
    "created_at",
    "rotated_at",
    "withdrawn_at",
    "consumer_generation",
    "consumer_error",
    "provider_generation",
    "provider_error",
    "verdict",
    "reason",
    "probed_at",
    "probe_generation",
    "loopback",
    "client_addr",
    "probe_withdrawn",
    "latency_ms",
    "used_password",
    "provider_attempted_at",
)
""":data:`StatusRow`'s columns (``STATUS_SQL`` selects them in this order; tests/test_rows.py
checks both this and the numbers below against the query)."""

ID: Final = 0
PROVISION: Final = 1
CONSUMER: Final = 2
PROVIDER: Final = 3
LOGIN: Final = 4
FILE: Final = 5
GENERATION: Final = 6
CREATED_AT: Final = 7
ROTATED_AT: Final = 8
WITHDRAWN_AT: Final = 9
CONSUMER_GENERATION: Final = 10
CONSUMER_ERROR: Final = 11
PROVIDER_GENERATION: Final = 12
PROVIDER_ERROR: Final = 13
VERDICT: Final = 14
REASON: Final = 15
PROBED_AT: Final = 16
PROBE_GENERATION: Final = 17
LOOPBACK: Final = 18
CLIENT_ADDR: Final = 19
PROBE_WITHDRAWN: Final = 20
LATENCY_MS: Final = 21
USED_PASSWORD: Final = 22
PROVIDER_ATTEMPTED_AT: Final = 23
"""Each column's number in :data:`StatusRow`: ``row[rows.GENERATION]``."""


@dataclass(frozen=True)
class StatusMark:
    """Where one status read stood, so the next may read only what changed since: the file's
    ``epoch`` (random, drawn when its status clock was made), the pairs table's ``stamp``
    (drawn anew whenever a pair is added, deleted or one of its static columns written) and the
    status clock's ``tick`` (one more for every row written that a status row is read from)."""

    epoch: int
    stamp: int
    tick: int


@dataclass(frozen=True)
class Identity:
    """Which inventory this is, for what is kept beside it (the status image) to be refused by
    any other: a SQLite file's device and inode, or a PostgreSQL database's server (a digest of
    ``host:port/dbname``) and oid; and who owns it (the file's, or the state folder's, owner
    and group)."""

    uid: int
    gid: int
    device: int
    inode: int


@dataclass(frozen=True)
class StatusChanges:
    """A status read since a :class:`StatusMark`: every pair, sorted by id (``whole``), or only
    the pairs written since the mark and those asked for again, in no order; ``mark``: where
    this read stood (None: inside a write transaction, nothing to read from later)."""

    mark: StatusMark | None
    whole: bool
    rows: list[StatusRow]


@dataclass(frozen=True)
class KeptStatus:
    """What a keeping status reader reads at once: the open rotations, the provider kinds
    (:meth:`~meshtui.inventory.store.Inventory.provider_kinds`) and the pairs changed since its
    mark (None: not read with them, or the mark no longer holds, or too many changed; read
    :class:`StatusChanges` next then)."""

    rotations: list[RotationRow]
    kinds: dict[tuple[str, str], str]
    changes: StatusChanges | None


ScheduleRow = tuple[
    str, str, str, str | None, str, float | None, float | None, str | None, str | None
]
"""One pair with its policy (None columns: no policy row) and when its generation began:
(id, provider, consumer, withdrawn_at, since, rotate_every, probe_every, rotate_source,
probe_source). A plain tuple: the watch reads it every cycle for every pair."""
