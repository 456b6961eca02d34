"""Every request and answer between controller and agent: one typed shape per kind, checked once.

The shapes are TypedDicts because the payloads are JSON and stay dicts on both sides (handlers
index ``item["pair"]`` as before, and nothing is copied into objects), and they are validated
with msgspec because it checks TypedDicts, lists, unions and literals in C and names the path
of the first fault (``Expected `int`, got `str` - at `$.consumer[0].generation```), which keeps
a 10,000-pair delivery (about 5 MiB) cheap to check.

Receipt is the only place a payload is checked: the agent checks a request right after its
envelope is verified (:meth:`Kind.request_of`), the controller checks an answer in its client
(:meth:`Kind.answer_of`); code past those points relies on the shape. An unknown field is
refused, not ignored: the envelope already demands that both ends run the same wire version,
so an unknown field means a sender speaking another contract (a newer controller asking an old
agent to probe a Redis target, say), and half-obeying a signed request is worse than a clear
error naming the field. msgspec ignores extra keys of a TypedDict, so the check runs against a
mirror of each shape made of ``forbid_unknown_fields`` Structs, built once from the TypedDicts
(the shapes stay the one definition). A payload from the wire arrives as its signed JSON
(:attr:`meshtui.protocol.wire.Message.payload`) and is decoded by the mirror, then by the TypedDict
itself: nothing is built that the shape does not hold, and its depth is the shape's, so a
signed payload of ten million empty objects or a million nested arrays is refused at its first
item. A mapping made in this process is checked as it is and handed on unchanged, except that
a shape holding one of the core's names (``Verdict``, ``Drift``, ``End``, ``OutcomeName``, from
:mod:`meshtui.model`) is also converted to its TypedDict, so those fields hold the member and
not merely a string equal to it.
"""

import enum
import hashlib
import json
import types
from collections.abc import Iterable, Mapping
from typing import (
    Generic,
    NamedTuple,
    NotRequired,
    TypedDict,
    TypeVar,
    Union,
    cast,
    get_args,
    get_origin,
    get_type_hints,
    is_typeddict,
)

import msgspec

from meshtui.errors import MessageError
from meshtui.model import Drift, End, OutcomeName, Sessions, Verdict
from meshtui.protocol import wire
from meshtui.protocol.wire import HeadJson

# ---- pieces used by several kinds -----------------------------------------------------------


class Target(TypedDict):
    """Where a probe logs in: the provider node's private address, the login and database.

    A provider that is not PostgreSQL names its ``kind`` (``redis``), the CA file its TLS is
    verified with, and whether it speaks TLS at all; absent, the target is PostgreSQL.
    """

    host: str
    port: int
    login: str
    dbname: str
    kind: NotRequired[str]
    ca: NotRequired[str | None]
    tls: NotRequired[bool]


Rollback = TypedDict("Rollback", {"from": list[int], "rotations": list[int]})
"""The signed note that an item goes back from the newer generations in ``from``."""


class LoginReport(TypedDict):
    """One login attempt as the agent reports it (never the password)."""

    verdict: Verdict  # the names live once, in the core (meshtui/model.py)
    reason: str
    latency_ms: float
    used_password: bool | None
    client_addr: str | None
    loopback: bool
    system_user: str | None


class ProbeReport(TypedDict):
    """A login with the held credential and its negative control, judged."""

    verdict: Verdict
    reason: str
    loopback: bool
    login: LoginReport
    control: LoginReport | None


class ErrorAnswer(TypedDict):
    """The payload of every refusal (reply kind ``error``): its text, and for a request fenced
    by its epoch the highest epoch the node holds and when it first accepted it (``at``, the
    node's clock, when it knows)."""

    error: str
    highest: NotRequired[int]
    at: NotRequired[float]


# ---- state ----------------------------------------------------------------------------------


class InspectSpec(TypedDict):
    """One provider manifest whose server the provisioner should inspect, read-only."""

    provider: str
    provision: str
    receives: str
    admin: str | None
    provisioner: list[str] | None
    admin_only: NotRequired[bool]  # only whether the admin file opens a session: no login read
    kind: NotRequired[str]  # with admin_only: the provider's kind when it is not PostgreSQL


class StateRequest(TypedDict):
    """``state``: who the node is and what it holds (``holdings: False``: only who it is, as a
    rotation resolving its nodes asks); with ``inspect``, also what each provider's server holds."""

    holdings: NotRequired[bool]
    inspect: NotRequired[list[InspectSpec]]
    secrets: NotRequired[bool]  # also its modules' own secret files, as they are


class EndRecord(TypedDict):
    """One end of one pair as its node records it, by generation and digest: a consumer's file
    (owner, group and mode since file access was added, so they may be absent in an older
    agent's record), a provider's module and login."""

    generation: int
    digest: str
    file: NotRequired[str]
    owner: NotRequired[str | None]
    group: NotRequired[str | None]
    mode: NotRequired[str]
    provider: NotRequired[str]
    login: NotRequired[str]
    connection: NotRequired[str]  # a consumer's connection file, as last written
    manifest: NotRequired[str]  # a provider's manifest, as last written
    connection_digest: NotRequired[str]  # the digest of the text written there
    unit: NotRequired[str]  # a consumer's credential file format when it holds the login too
    unit_digest: NotRequired[str]  # the digest of that unit's format and lines but the password


class Holding(EndRecord):
    """One end of one pair this node holds, as ``state`` reports it: which end and pair, and
    for a consumer whether its file still matches (or why it cannot be read)."""

    end: End
    pair: str
    present: NotRequired[bool]
    error: NotRequired[str]
    unlike: NotRequired[list[str]]  # how its files' mode, owner or group differ from written


class InspectedLogin(TypedDict):
    """What a provider's server holds for one login: matches, changed, missing, ..."""

    login: str
    verdict: Drift
    reason: str


class Inspection(TypedDict):
    """The inspection of one provider manifest; ``error`` when it could not be done."""

    provider: str
    provision: str
    ok: bool
    logins: list[InspectedLogin]
    error: NotRequired[str]


class HeldSecret(TypedDict):
    """One of a module's own secret files the node wrote, as it is now: whether it still holds
    the digest written, how its mode, owner or group differ, or why it cannot be read."""

    module: str
    name: str
    file: str
    version: int
    present: bool
    unlike: NotRequired[list[str]]
    error: NotRequired[str]


class StateAnswer(TypedDict):
    """Who the node is (name, key fingerprint) and what it holds."""

    node: str
    fingerprint: str
    holdings: NotRequired[list[Holding]]  # absent when asked with ``holdings: False``
    inspected: NotRequired[list[Inspection]]
    secrets: NotRequired[list[HeldSecret]]  # asked with ``secrets: True``


# ---- deliver --------------------------------------------------------------------------------

ManifestEntry = TypedDict(
    "ManifestEntry",
    {
        "pair": str,
        "as": str,
        "node": str,
        "module": str,
        "at": str,
        "values": dict[str, str],
        "generation": int,
        "digest": str,
        "sealed": str,
        "rollback": NotRequired[Rollback],
        "keep": NotRequired[bool],
        "alt": NotRequired[str],
    },
)
"""One consumer in a provider's manifest: its login (``as``), where it connects from, its
declared values and its credential sealed to the provider. ``keep``: an overlap rotation's
first step, the login keeps the credential it holds now beside this one (the manifest's
``keep``)."""


class ManifestBase(TypedDict):
    """What a delta applies to: the digest (:func:`consumer_set_digest`) of the consumer set
    the manifest on the node must hold, as the controller's inventory says it was delivered."""

    digest: str


class ProviderSet(TypedDict):
    """A manifest for one (provider module, provision): every live consumer, or, with ``base``,
    a delta: ``consumers`` are only the entries that changed or were added and ``removed`` the
    logins that go; the node merges them into the manifest it holds (when that holds ``base``)
    and writes it whole, or refuses the delta (``base_refused``) and nothing changes."""

    provider: str
    provision: str
    receives: str
    grants: str
    admin: str | None
    provisioner: list[str] | None
    pin: bool
    consumers: list[ManifestEntry]
    kind: NotRequired[str]  # the provider's kind when it is not PostgreSQL (redis)
    base: NotRequired[ManifestBase]
    removed: NotRequired[list[str]]
    sessions: NotRequired[dict[str, Sessions]]  # a rotation's logins: their old sessions' fate
    drained: NotRequired[dict[str, str]]  # logins whose drain is checked: their marks


class ConnectionItem(TypedDict):
    """A consumer's connection file: where, and its whole text (no secret in it)."""

    file: str
    text: str


class UnitItem(TypedDict):
    """A credential file holding the login with the password (meshtui.credential_unit): its
    format and its lines but the password, which the agent adds."""

    format: str
    fields: dict[str, str]


class ConsumerItem(TypedDict):
    """One consumer credential, sealed to the consumer's node, and where to write it (with its
    connection file, when the ``requires`` entry declares one)."""

    pair: str
    node: str
    generation: int
    digest: str
    file: str
    owner: str | None
    group: str | None
    mode: str | None
    reload: list[str]
    sealed: str
    rollback: NotRequired[Rollback]
    connection: NotRequired[ConnectionItem]
    unit: NotRequired[UnitItem]  # the credential file is a unit of this format, not the password


class DeliverRequest(TypedDict):
    """``deliver``: provider manifests (applied first), consumer credentials, or both."""

    provider: NotRequired[list[ProviderSet]]
    consumer: NotRequired[list[ConsumerItem]]


class LoginOutcome(TypedDict):
    """What the provisioner did to one login (a command provisioner names no node/module)."""

    login: str
    outcome: OutcomeName
    reason: str
    node: NotRequired[str]
    module: NotRequired[str]
    sessions: NotRequired[int]  # on the old credential when the new one was applied
    sessions_left: NotRequired[int]  # of those, still open after (ended, or left to drain)
    sessions_ended: NotRequired[bool]
    sessions_mark: NotRequired[str]  # left to drain: tells their sessions from later ones


class ProviderOutcome(TypedDict):
    """One manifest's delivery: applied when, and each login's outcome."""

    provider: str
    provision: str
    ok: bool
    outcomes: list[LoginOutcome]
    applied_at: NotRequired[float]
    error: NotRequired[str]
    base_refused: NotRequired[str]  # a delta not applied, and why: send the whole manifest


class ConsumerOutcome(TypedDict):
    """One credential's delivery: written when, its digest, the reload command's outcome."""

    pair: str
    generation: int
    ok: bool
    digest: NotRequired[str]
    written_at: NotRequired[float]
    reload: NotRequired[str]
    error: NotRequired[str]


class DeliverAnswer(TypedDict):
    """Per manifest and per credential, in the order they were sent."""

    provider: list[ProviderOutcome]
    consumer: list[ConsumerOutcome]


class PrepareRequest(TypedDict):
    """``prepare``: consumer credentials of a rotation, written ahead while its providers apply.

    Nothing is held yet: each is written under no name, and only a ``deliver`` of the same
    item (after the providers applied) gives it its name; one never delivered is let go.
    """

    consumer: list[ConsumerItem]
    delivery: NotRequired[int]
    """The sequence number of the delivery, signed ahead, that will name these: recorded as
    used with this request, so that its acceptance is on disk before it arrives."""


class PreparedOutcome(TypedDict):
    """One credential written ahead, or why not (its delivery then writes it in full)."""

    pair: str
    ok: bool
    error: NotRequired[str]


class PrepareAnswer(TypedDict):
    """Per credential, in the order they were sent."""

    consumer: list[PreparedOutcome]


class ConsumerLine(NamedTuple):
    """The part of one manifest consumer both ends know: what a delta's base is a digest of."""

    login: str
    node: str
    module: str
    at: str
    values: Mapping[str, str]
    digest: str


SET_MODULUS = 1 << 256
"""A consumer set's digest is the sum of its lines' SHA-256 values modulo this."""


def _line_value(line: ConsumerLine) -> int:
    canonical = [
        line.login,
        line.node,
        line.module,
        line.at,
        sorted(line.values.items()),
        line.digest,
    ]
    text = json.dumps(canonical, separators=(",", ":"), ensure_ascii=True)
    return int.from_bytes(hashlib.sha256(text.encode()).digest(), "big")


def _hex(value: int) -> str:
    return format(value % SET_MODULUS, "064x")


def consumer_set_digest(lines: Iterable[ConsumerLine]) -> str:
    """A digest of a manifest's consumer set, in any order (login, where from, values, the
    credential's digest): the controller keeps it per provision as it delivers, the node
    computes it from the manifest it holds, and a delta is merged only when the two agree.

    It is the sum of each line's SHA-256 (a multiset hash), so the controller moves a kept
    digest past a delta in the delta's size (:func:`rebased_digest`), not the provision's.
    It guards against a stale or edited manifest, not against the node itself (a node that
    lies about its own manifest only spoils its own deliveries).
    """
    return _hex(sum(_line_value(line) for line in lines))


def rebased_digest(
    base: str, removed: Iterable[ConsumerLine], added: Iterable[ConsumerLine]
) -> str:
    """The digest of the set ``base`` is the digest of, with ``removed`` lines taken out and
    ``added`` lines put in (each line once)."""
    total = int(base, 16)
    total -= sum(_line_value(line) for line in removed)
    total += sum(_line_value(line) for line in added)
    return _hex(total)


# ---- withdraw -------------------------------------------------------------------------------


class WithdrawItem(TypedDict):
    """A withdrawn pair's credential file, and where its last login must now be refused."""

    pair: str
    file: str
    target: Target


class WithdrawRequest(TypedDict):
    """``withdraw``: try each credential once (it must be refused), then delete it."""

    consumer: list[WithdrawItem]


class WithdrawOutcome(TypedDict):
    """Whether the file was removed, and the probe that proved the login refused."""

    pair: str
    removed: bool
    probe: ProbeReport | None
    error: NotRequired[str]


class WithdrawAnswer(TypedDict):
    """Per withdrawn pair, in the order they were sent."""

    consumer: list[WithdrawOutcome]


# ---- probe ----------------------------------------------------------------------------------


class ProbeItem(Target):
    """One pair to probe: its held credential file and its target."""

    pair: str
    file: str


class ProbeRequest(TypedDict):
    """``probe``: live logins with the credentials the node holds, ``concurrency`` at a time."""

    targets: list[ProbeItem]
    concurrency: NotRequired[int]


class ProbedPair(TypedDict):
    """One pair's probe: the digest of the credential used, or why there was none."""

    pair: str
    digest: str | None
    result: ProbeReport | None
    error: NotRequired[str]
    unlike: NotRequired[list[str]]  # as a Holding's: the file is not as it was written


class ProbeAnswer(TypedDict):
    """Per pair, in the order they were sent."""

    results: list[ProbedPair]


# ---- drill ----------------------------------------------------------------------------------


class DrillRequest(TypedDict):
    """``drill-hold`` and ``drill-check``: one pair's drill, named by ``drill``."""

    drill: str
    pair: str
    file: str
    target: Target


class DrillHoldAnswer(TypedDict):
    """The old credential's login before the rotation; it is kept in memory."""

    result: ProbeReport | None
    digest: NotRequired[str]
    error: NotRequired[str]


class DrillCheckAnswer(TypedDict):
    """The new credential's login and the held old one's, after the rotation."""

    new: ProbeReport | None
    old: ProbeReport | None
    digest: str | None
    error: str | None


# ---- check (meshtui doctor) -----------------------------------------------------------------
# the node's side of the preflight: meshtui.controller.read.doctor builds the request, meshtui.host.checks
# answers it; both use these shapes as they are


class CheckServer(TypedDict):
    """The server a consumer end's credential is handed to (a kind whose login sends it, as
    declared): its kind, address, port and CA file, for the node's ``[[servers]]``."""

    kind: str
    host: str
    port: int
    ca: str | None


class CheckConsumer(TypedDict):
    """A consumer end on the node: its credential file, who must read it, its reload."""

    pair: str
    file: str
    owner: str | None
    group: str | None
    reload: list[str]
    connection: NotRequired[str]  # its connection file, when the requirement declares one
    server: NotRequired[CheckServer]  # where its credential is sent, for such a kind
    mode: NotRequired[str]  # the credential file's declared mode
    digests: NotRequired[list[str]]  # the digests of every generation meshtui delivered
    unit: NotRequired[str]  # the credential file's format, when it holds the login too


class CheckProvision(TypedDict):
    """One provision of a provider module: its kind and where its manifest and grants go."""

    provision: str
    kind: str
    receives: str
    grants: str


class CheckProvider(TypedDict):
    """A provider module on the node: its admin file and what its provisioner needs, and
    (for the node's policy) its provisions and its declared provisioner argv."""

    provider: str
    admin: str | None
    builtin: bool  # the built-in provisioner, for a kind whose admin rights doctor checks
    databases: bool
    pin: bool
    kind: NotRequired[str]  # the provider's kind (absent: the default kind)
    provisions: NotRequired[list[CheckProvision]]
    provisioner: NotRequired[list[str] | None]


class CheckPort(TypedDict):
    """A provider's address and port, to be reached by TCP from this node."""

    host: str
    port: int
    provider: str
    pairs: list[str]


class CheckRequest(TypedDict):
    """``check``: everything one node is asked to check (nothing is written)."""

    consumers: list[CheckConsumer]
    providers: list[CheckProvider]
    ports: list[CheckPort]


class Finding(TypedDict):
    """One problem a node found: what was checked, about what, what is wrong, what to do."""

    check: str
    subject: str
    problem: str
    fix: str


class CheckAnswer(TypedDict):
    """The node's clock, how many checks passed, and every problem found."""

    node: str
    at: float
    passed: int
    findings: list[Finding]
    elapsed_ms: float


# ---- anchor ---------------------------------------------------------------------------------


class AnchorRequest(TypedDict):
    """``anchor``: nothing; the read is an unsigned ``GET /v1/anchor`` whose nonce is a query
    parameter (no key is needed to ask), answered with a signed :class:`AnchorAnswer`."""


class AcceptedController(TypedDict):
    """A controller a node accepts: its name (None: the pinned key, under any name, when the
    node's policy names none) and its key's fingerprint."""

    name: str | None
    fingerprint: str


class AnchorAnswer(TypedDict):
    """The audit head this node keeps (None: never shown one), as the controller signed it;
    ``history``: the heads it kept before a restore replaced them (oldest first); ``accepted``:
    the highest request number it accepted (a restored controller numbers past it);
    ``controller``: the fingerprint of the controller key it pins; ``controllers``: the
    controllers it accepts (``doctor`` names a node that does not accept one yet)."""

    node: str
    head: HeadJson | None
    history: NotRequired[list[HeadJson]]
    accepted: NotRequired[int]
    controller: NotRequired[str]
    controllers: NotRequired[list[AcceptedController]]


# ---- the strict mirror ----------------------------------------------------------------------

_MIRRORS: dict[object, object] = {}


def _mirror(shape: object) -> object:
    """The type msgspec checks ``shape`` with: each TypedDict becomes a Struct that refuses
    unknown fields (NotRequired fields default to UNSET); lists, dicts and unions are mirrored
    element by element; plain types and literals stay as they are."""
    if is_typeddict(shape):
        if shape not in _MIRRORS:
            fields: list[tuple[str, object] | tuple[str, object, object]] = []
            for key, hint in get_type_hints(shape, include_extras=True).items():
                if get_origin(hint) is NotRequired:
                    (inner,) = get_args(hint)
                    fields.append((key, _mirror(inner) | msgspec.UnsetType, msgspec.UNSET))
                else:
                    fields.append((key, _mirror(hint)))
            name = getattr(shape, "__name__", "Shape")
            _MIRRORS[shape] = msgspec.defstruct(
                name, fields, kw_only=True, forbid_unknown_fields=True
            )
        return _MIRRORS[shape]
    origin, args = get_origin(shape), get_args(shape)
    if origin is list:
        return types.GenericAlias(list, (_mirror(args[0]),))
    if origin is dict:
        return types.GenericAlias(dict, (args[0], _mirror(args[1])))
    if origin is Union or origin is types.UnionType:
        return Union.__getitem__(tuple(_mirror(a) for a in args))
    return shape


def _holds_enum(shape: object, seen: frozenset[object] = frozenset()) -> bool:
    """True when a field somewhere in ``shape`` is an enum (a verdict, an end, an outcome)."""
    if isinstance(shape, type) and issubclass(shape, enum.Enum):
        return True
    if is_typeddict(shape):
        if shape in seen:
            return False
        hints = get_type_hints(shape).values()
        return any(_holds_enum(h, seen | {shape}) for h in hints)
    return any(_holds_enum(a, seen) for a in get_args(shape))


Payload = Mapping[str, object] | msgspec.Raw
"""A payload to check: its JSON as signed (:attr:`meshtui.protocol.wire.Message.payload`), or a mapping
made in this process."""


class _Decoders(NamedTuple):
    """One shape's strict decoders: its mirror (refusing unknown fields), then the shape."""

    mirror: msgspec.json.Decoder[object]
    shape: msgspec.json.Decoder[Mapping[str, object]]


def _check(
    mirror: object,
    shape: object | None,
    decoders: _Decoders,
    payload: Payload,
    what: str,
) -> Mapping[str, object]:
    """``payload`` checked against ``mirror``; with ``shape`` (one holding enums), converted to
    it, so a field typed ``Verdict`` holds the member, not only a string equal to it.

    JSON is decoded by the mirror first: every field typed, none unknown, so the first value
    that is not what the shape holds ends the read, and nothing is built but what the shape
    holds (its depth is the shape's); then by the shape itself, into the dicts handlers read."""
    try:
        if isinstance(payload, msgspec.Raw):
            decoders.mirror.decode(payload)
            return decoders.shape.decode(payload)
        msgspec.convert(payload, type=mirror)
        if shape is not None:
            converted: Mapping[str, object] = msgspec.convert(payload, type=shape)
            return converted
    except msgspec.ValidationError as exc:
        text = str(exc)
        raise MessageError(f"{what}: {text if ' - at `' in text else text + ' - at `$`'}") from None
    except msgspec.DecodeError:
        raise MessageError(f"{what}: not JSON - at `$`") from None
    return payload


# ---- a module's own secrets ----------------------------------------------------------------


class SecretStoreItem(TypedDict):
    """One own secret for the vault node to write into KV: sealed to that node, its digest."""

    module: str
    login: str  # the module's login at the vault: its path in the KV mount
    name: str
    version: int
    digest: str
    sealed: str
    digest_key: NotRequired[str]  # a keyed digest's key, sealed to this node (absent: unkeyed)


class SecretStoreRequest(TypedDict):
    """``secret-store``: the vault module (its kind, manifest and grants paths, for the node's
    policy), its admin file on this node, and what to write."""

    vault: str
    kind: str
    receives: str
    grants: str
    admin: str
    items: list[SecretStoreItem]


class SecretStored(TypedDict):
    """What the vault holds for one own secret now (KV's version of it), or why not."""

    module: str
    name: str
    version: int
    kv_version: int | None
    error: str | None


class SecretStoreAnswer(TypedDict):
    stored: list[SecretStored]


class SecretFetchItem(TypedDict):
    """One own secret for the module's node to read from the vault with the module's own
    AppRole credential (the pair's credential file it holds) and write as ``file``."""

    module: str
    name: str
    version: int
    kv_version: int
    digest: str
    login: str
    credential: str
    host: str
    port: int
    ca: str | None
    file: str
    owner: str | None
    group: str | None
    mode: str | None
    reload: list[str]
    digest_key: NotRequired[str]  # a keyed digest's key, sealed to this node (absent: unkeyed)
    kind: NotRequired[str]  # the vault's kind (absent: the one kind that stores own secrets)


class SecretFetchRequest(TypedDict):
    """``secret-fetch``: own secrets to bring from the vault to this node's files."""

    items: list[SecretFetchItem]


class SecretFetched(TypedDict):
    """What the module's file holds now (its digest), the reload's outcome, or why not."""

    module: str
    name: str
    version: int
    digest: str | None
    reload: str | None
    error: str | None


class SecretFetchAnswer(TypedDict):
    fetched: list[SecretFetched]


class SecretCheckItem(TypedDict):
    """One own secret for the module's node to look at (a drill): the file it wrote for it,
    and the vault's current version, read with the module's own AppRole credential."""

    module: str
    name: str
    login: str
    credential: str
    host: str
    port: int
    ca: str | None
    file: str
    digest_key: NotRequired[str]  # a keyed digest's key, sealed to this node (absent: unkeyed)
    kind: NotRequired[str]  # the vault's kind (absent: the one kind that stores own secrets)


class SecretCheckRequest(TypedDict):
    """``secret-check``: own secrets whose file and vault version to look at, by digest."""

    items: list[SecretCheckItem]


class SecretChecked(TypedDict):
    """The digest the module's file holds and the digest (and KV version) of the vault's
    current version, never a value; or why not."""

    module: str
    name: str
    file_digest: str | None
    vault_digest: str | None
    kv_version: int | None
    error: str | None
    marked_version: NotRequired[int | None]  # meshtui's version its last store marked KV with
    marked_digest: NotRequired[str | None]  # and that version's digest


class SecretCheckAnswer(TypedDict):
    checked: list[SecretChecked]


# ---- kinds ----------------------------------------------------------------------------------

Request = TypeVar("Request", bound=Mapping[str, object], covariant=True)
Answer = TypeVar("Answer", bound=Mapping[str, object], covariant=True)


class Kind(Generic[Request, Answer]):
    """One kind of message: its wire name, its request shape and its answer shape."""

    def __init__(self, name: str, request: object, answer: object) -> None:
        self.name = name
        self._request = _mirror(request)
        self._answer = _mirror(answer)
        self._request_enums = request if _holds_enum(request) else None
        self._answer_enums = answer if _holds_enum(answer) else None
        self._request_json = _Decoders(
            msgspec.json.Decoder(self._request), msgspec.json.Decoder(request)
        )
        self._answer_json = _Decoders(
            msgspec.json.Decoder(self._answer), msgspec.json.Decoder(answer)
        )

    def request_of(self, payload: Payload) -> Request:
        """The payload as this kind's request; MessageError naming the field when it is not."""
        checked = _check(
            self._request, self._request_enums, self._request_json, payload, f"{self.name} request"
        )
        return cast(Request, checked)

    def answer_of(self, payload: Payload) -> Answer:
        """The payload as this kind's answer; MessageError naming the field when it is not."""
        checked = _check(
            self._answer, self._answer_enums, self._answer_json, payload, f"{self.name} answer"
        )
        return cast(Answer, checked)

    def __repr__(self) -> str:
        return f"Kind({self.name!r})"


STATE: Kind[StateRequest, StateAnswer] = Kind(wire.STATE, StateRequest, StateAnswer)
DELIVER: Kind[DeliverRequest, DeliverAnswer] = Kind(wire.DELIVER, DeliverRequest, DeliverAnswer)
PREPARE: Kind[PrepareRequest, PrepareAnswer] = Kind(wire.PREPARE, PrepareRequest, PrepareAnswer)
WITHDRAW: Kind[WithdrawRequest, WithdrawAnswer] = Kind(
    wire.WITHDRAW, WithdrawRequest, WithdrawAnswer
)
PROBE: Kind[ProbeRequest, ProbeAnswer] = Kind(wire.PROBE, ProbeRequest, ProbeAnswer)
DRILL_HOLD: Kind[DrillRequest, DrillHoldAnswer] = Kind(
    wire.DRILL_HOLD, DrillRequest, DrillHoldAnswer
)
DRILL_CHECK: Kind[DrillRequest, DrillCheckAnswer] = Kind(
    wire.DRILL_CHECK, DrillRequest, DrillCheckAnswer
)
CHECK: Kind[CheckRequest, CheckAnswer] = Kind(wire.CHECK, CheckRequest, CheckAnswer)
ANCHOR: Kind[AnchorRequest, AnchorAnswer] = Kind(wire.ANCHOR, AnchorRequest, AnchorAnswer)
"""The unsigned read of a node's audit head (served at ``GET /v1/anchor``, not in :data:`KINDS`)."""
SECRET_STORE: Kind[SecretStoreRequest, SecretStoreAnswer] = Kind(
    wire.SECRET_STORE, SecretStoreRequest, SecretStoreAnswer
)
SECRET_FETCH: Kind[SecretFetchRequest, SecretFetchAnswer] = Kind(
    wire.SECRET_FETCH, SecretFetchRequest, SecretFetchAnswer
)
SECRET_CHECK: Kind[SecretCheckRequest, SecretCheckAnswer] = Kind(
    wire.SECRET_CHECK, SecretCheckRequest, SecretCheckAnswer
)
ERROR: Kind[ErrorAnswer, ErrorAnswer] = Kind("error", ErrorAnswer, ErrorAnswer)
"""The reply kind of a refusal (never a request)."""

KINDS: dict[str, Kind[Mapping[str, object], Mapping[str, object]]] = {
    k.name: k
    for k in (
        STATE, DELIVER, PREPARE, WITHDRAW, PROBE, DRILL_HOLD, DRILL_CHECK, CHECK,
        SECRET_STORE, SECRET_FETCH, SECRET_CHECK,
    )
}  # fmt: skip
"""Every request kind the agent serves, by wire name."""
