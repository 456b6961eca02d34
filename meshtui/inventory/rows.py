"""The inventory's rows as typed shapes: what each table holds, as the store returns it.

TypedDicts, not dataclasses: a row comes out of SQLite as a mapping of its column names, so
the keys stay the columns (one vocabulary from the schema to the screen), callers and tests keep
indexing by name, and mypy checks every key and its type. JSON columns are decoded on the way
out (``values``, ``reload``, ``spec``, ``items``, ``evidence``, ``pairs``, ``detail``); the
``*Record`` shapes are what a write takes, columns as stored.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

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


class OfferSpec(TypedDict):
    """One provision a module offers, in its stored spec (kind, ca, tls: not PostgreSQL only)."""

    name: str
    port: int
    kind: NotRequired[str]
    ca: NotRequired[str | None]
    tls: NotRequired[bool]


class NeedSpec(TypedDict):
    """One provision a module requires, and the file it wants it in."""

    name: str
    file: str


class ModuleSpec(TypedDict):
    """A module's declared spec, as stored (canonical JSON) and decoded."""

    provides: list[OfferSpec]
    receives: dict[str, str]
    grants: dict[str, str]
    admin: str | None
    provisioner: list[str]
    requires: list[NeedSpec]
    pin: NotRequired[bool]


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


class DrillRow(TypedDict):
    """A stored drill with its evidence decoded."""

    id: int
    pair: str
    at: str
    rotation: int | None
    ok: int
    window_ms: float | None
    evidence: DrillEvidence


RotationItem = TypedDict("RotationItem", {"pair": str, "from": int, "to": int})
"""One pair of a rotation: the generation it leaves and the one it goes to."""


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


class EventRow(TypedDict):
    """One audit event with ``pairs`` and ``detail`` decoded (detail is free-form JSON)."""

    seq: int
    at: str
    operator: str
    ssh_client: str | None
    kind: str
    pairs: list[str]
    detail: dict[str, Any]
    outcome: str
    prev: str
    hash: str


class HeadRow(TypedDict):
    """The audit chain's head: newest event number and hash, and the controller's signature."""

    seq: int
    hash: str
    sig: str | None


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
    int | None,  # consumer end: generation held
    str | None,  # consumer end: error
    int | None,  # provider end: generation held
    str | None,  # provider end: error
    str | None,  # newest probe: verdict (None: never probed)
    str | None,  # newest probe: reason (None when it logged in: no state says it)
    str | None,  # newest probe: at
    int | None,  # newest probe: generation
    int | None,  # newest probe: loopback
    str | None,  # newest probe: client_addr
    int | None,  # newest probe: withdrawn
    float | None,  # newest probe: latency_ms
    int | None,  # newest probe: used_password
    str | None,  # provider end: attempted_at (only beside its error)
]
"""One pair joined with both ends' deliveries and its newest probe (status's one query). A plain
tuple, unpacked where it is read: status reads every pair on every refresh."""


ScheduleRow = tuple[
    str, str, str, str | None, str, float | None, float | None, str | None, str | None
]
"""One pair with its policy (None columns: no policy row) and when its generation began:
(id, provider, consumer, withdrawn_at, since, rotate_every, probe_every, rotate_source,
probe_source). A plain tuple: the watch reads it every cycle for every pair."""
