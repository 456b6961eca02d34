"""The messages between the controller and host agents, and their signed envelope.

Every message is JSON inside an envelope signed with the sender's Ed25519 key. The body names
sender and recipient, carries a timestamp, a fresh nonce and the sender's sequence number (strictly
increasing, see :class:`Sequence`), and a reply quotes the nonce of the request it answers, so a
message cannot be redirected and an answer cannot be passed off as the answer to another request.
The agent refuses a replay by remembering, on disk, the sequence numbers it accepted
(:mod:`meshtui.host.state.guard`), each controller's apart. A request also names the controller
that sent it and carries that controller's epoch (:class:`~meshtui.protocol.fence.Fence`): the
agent verifies it with that controller's key and refuses a delivering request of an epoch
below one it accepted.
Sealed blobs travel base64-encoded; nothing in a message is ever a plaintext credential.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, NotRequired, TypedDict

import msgspec

from meshtui import crypto
from meshtui.errors import EnvelopeError, OffClockError, SignatureError
from meshtui.model import CONTROLLER_NAME_RE
from meshtui.protocol.fence import Fence

VERSION = 3  # 2: every body carries "seq"; 3: a request names its controller and its epoch
MAX_SKEW_S = 30.0
CONTROLLER = "controller"

# message kinds (controller -> agent); every one is answered by a signed reply
STATE = "state"  # which pairs and generations the node holds, by digest


DELIVER = "deliver"  # consumer credentials and provider manifests (sealed)
PREPARE = "prepare"  # consumer credentials written ahead, unnamed, until a delivery names them
WITHDRAW = "withdraw"  # try a withdrawn pair's last credential once, then delete it
PROBE = "probe"  # live logins with the credentials the node holds
DRILL_HOLD = "drill-hold"  # log in with the current credential and keep it in memory
DRILL_CHECK = "drill-check"  # log in with the new and the held credential, then forget it
CHECK = "check"  # doctor: the node's side of the preflight (folders, users, reloads, admin, ports)
ANCHOR = "anchor"  # the agent's answer to an unsigned read of the audit head it keeps
SECRET_STORE = "secret-store"  # the vault node: write modules' own secrets (sealed) into KV
SECRET_FETCH = "secret-fetch"  # a module's node: read its own secrets from the vault, write files
SECRET_CHECK = "secret-check"  # a module's node: its secret file's and the vault's current digests

DELIVERING = frozenset({DELIVER, PREPARE, WITHDRAW, SECRET_STORE, SECRET_FETCH})
"""The kinds that change a node (files, manifests, provisioner runs, the vault): refused under
an epoch below the highest the node accepted (a controller that lost its turn)."""


def head_message(seq: int, digest: str) -> bytes:
    """What the controller signs for the audit chain's head: its newest event number and hash."""
    return f"meshtui-audit-head:{seq}:{digest}".encode()


def restore_message(seq: int, digest: str, base_seq: int, base_hash: str, taken_at: str) -> bytes:
    """What the controller signs for a restore: event ``seq`` (hash ``digest``) continues the
    chain of a backup taken at ``taken_at`` whose head was ``base_seq`` / ``base_hash``."""
    return f"meshtui-audit-restore:{seq}:{digest}:{base_seq}:{base_hash}:{taken_at}".encode()


class RestoreJson(TypedDict):
    """A signed restore (:class:`RestoreProof`) as it travels with a head and as a node keeps it."""

    seq: Annotated[int, msgspec.Meta(ge=1)]
    hash: Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{64}$")]
    base_seq: Annotated[int, msgspec.Meta(ge=0)]
    base_hash: Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{64}$")]
    taken_at: Annotated[str, msgspec.Meta(max_length=64)]
    sig: Annotated[str, msgspec.Meta(min_length=1)]


class HeadJson(TypedDict):
    """A signed audit head as it travels and as an agent keeps it (``audit-head.json``); with
    ``restore`` when the chain it heads was restored from a backup."""

    seq: Annotated[int, msgspec.Meta(ge=1)]
    hash: Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{64}$")]
    sig: Annotated[str, msgspec.Meta(min_length=1)]  # base64, checked by :meth:`verifies`
    restore: NotRequired[RestoreJson]
    controller: NotRequired[Annotated[str, msgspec.Meta(max_length=63)]]
    """The controller that signed it (absent: the one pinned before controllers were named)."""


@dataclass(frozen=True)
class RestoreProof:
    """The controller's signed word that its chain was restored from a backup: the restore's
    own audit event (``seq``, ``hash``) and the backup's head it continues (``base_seq``,
    ``base_hash``, taken at ``taken_at``).

    A node accepts a head lower than the one it keeps only with a proof it has not seen before
    (:mod:`meshtui.host.state.anchor`); the head it kept becomes history. Without one, a shorter
    chain is what it always was: a wipe, caught."""

    seq: int
    hash: str
    base_seq: int
    base_hash: str
    taken_at: str
    sig: str

    def message(self) -> bytes:
        """The bytes the controller signs."""
        return restore_message(self.seq, self.hash, self.base_seq, self.base_hash, self.taken_at)

    def verifies(self, controller_verify_key: bytes) -> bool:
        """True when the controller's key signed exactly this restore."""
        try:
            crypto.verify(
                self.message(), crypto.unb64(self.sig, "sig"), controller_verify_key, CONTROLLER
            )
        except (SignatureError, ValueError):
            return False
        return True

    def to_json(self) -> RestoreJson:
        """The proof as it travels."""
        return {
            "seq": self.seq,
            "hash": self.hash,
            "base_seq": self.base_seq,
            "base_hash": self.base_hash,
            "taken_at": self.taken_at,
            "sig": self.sig,
        }

    @classmethod
    def from_json(cls, data: object) -> RestoreProof:
        """A proof from its JSON form; ValueError naming the field when it is not one."""
        try:
            got = msgspec.convert(data, type=RestoreJson)
        except msgspec.ValidationError as exc:
            raise ValueError(f"not a restore proof: {exc}") from None
        return cls(**got)


@dataclass(frozen=True)
class SignedHead:
    """The audit chain's head as the controller signed it: event number, its hash, signature.

    The controller shows it to every agent on every request; each agent keeps the longest one
    it was shown (:mod:`meshtui.host.state.anchor`), so a wiped or cut-back inventory is caught.
    """

    seq: int
    hash: str
    sig: str  # base64 Ed25519 signature of :func:`head_message` by the controller key
    restore: RestoreProof | None = None  # the newest restore of the chain it heads, if any
    controller: str | None = None  # the controller that signed it (whose key verifies it)

    def verifies(self, controller_verify_key: bytes) -> bool:
        """True when the controller's key signed exactly this sequence number and hash."""
        try:
            crypto.verify(
                head_message(self.seq, self.hash),
                crypto.unb64(self.sig, "sig"),
                controller_verify_key,
                CONTROLLER,
            )
        except (SignatureError, ValueError):
            return False
        return True

    def to_json(self) -> HeadJson:
        """The head as it travels."""
        out: HeadJson = {"seq": self.seq, "hash": self.hash, "sig": self.sig}
        if self.restore is not None:
            out["restore"] = self.restore.to_json()
        if self.controller is not None:
            out["controller"] = self.controller
        return out

    @classmethod
    def from_json(cls, data: object) -> SignedHead:
        """A head from its JSON form; ValueError naming the field when it is not a head.

        ``data`` is checked here whatever it came as (a kept file, a payload, the guard's
        record): the constraints (a positive number, 64 hex characters) are part of the shape.
        """
        try:
            head = msgspec.convert(data, type=HeadJson)
        except msgspec.ValidationError as exc:
            raise ValueError(f"not an audit head: {exc}") from None
        got = head.get("restore")
        restore = RestoreProof(**got) if got is not None else None
        return cls(
            seq=head["seq"],
            hash=head["hash"],
            sig=head["sig"],
            restore=restore,
            controller=head.get("controller"),
        )


@dataclass(frozen=True)
class Message:
    """A verified message: who sent it, to whom, what kind, and its payload."""

    kind: str
    sender: str
    to: str
    at: float
    nonce: str
    seq: int
    payload: msgspec.Raw
    """The payload's JSON as signed, not yet decoded: its kind's typed shape decodes it
    (:meth:`meshtui.protocol.messages.Kind.request_of`), so nothing is built that the shape does not hold."""
    reply_to: str | None = None
    head: SignedHead | None = None  # the controller's audit head, shown on a request
    controller: str | None = None  # the controller that signed a request (None on an answer)
    epoch: int = 0  # the sending controller's epoch (0: no lease in use)


ControllerName = Annotated[str, msgspec.Meta(pattern=CONTROLLER_NAME_RE.pattern)]
"""A controller's name as a body may carry it (:data:`meshtui.model.CONTROLLER_NAME_RE`)."""


class _Envelope(msgspec.Struct, forbid_unknown_fields=True):
    """What travels: the signed body and its signature, both base64 (decoded to bytes as they
    are read). Strict: any other field, or a field of another type, ends the read at once, so
    nothing but these two values is ever built from a body nobody has authenticated yet."""

    body: bytes
    sig: bytes


class _Version(msgspec.Struct):
    """Only the body's version, read to say "update meshtui" when the rest does not fit."""

    v: int | None = None


class _Body(msgspec.Struct, forbid_unknown_fields=True):
    """The signed body, as :func:`envelope` writes it."""

    v: int
    kind: str
    sender: str = msgspec.field(name="from")
    to: str
    at: float
    nonce: str
    seq: Annotated[int, msgspec.Meta(ge=0)]
    payload: msgspec.Raw  # kept as JSON until its kind's shape decodes it
    reply_to: str | None = None
    head: HeadJson | None = None
    controller: ControllerName | None = None
    epoch: Annotated[int, msgspec.Meta(ge=0)] = 0


class _Signer(msgspec.Struct):
    """Only the body's controller name, read (unverified) to choose the key that verifies it:
    a name by its shape, so nothing longer or stranger reaches a refusal's text or a log."""

    controller: ControllerName | None = None


KeyOf = Callable[[str | None], bytes]
"""The verify key of the controller a request names (EnvelopeError when none is accepted)."""

_ENVELOPE = msgspec.json.Decoder(_Envelope)
_BODY = msgspec.json.Decoder(_Body)
_VERSION = msgspec.json.Decoder(_Version)
_SIGNER = msgspec.json.Decoder(_Signer)


def wall_clock() -> float:
    """The clock a :class:`Sequence` reads by default (looked up per call, so tests can skew it)."""
    return time.time()


class Sequence:
    """The sender's request numbers: strictly increasing, and never below its clock in µs.

    Starting from the clock means numbers from two controller processes interleave in time, so
    an agent can accept them slightly out of order; counting up from the last number means a
    clock that steps back never makes a number repeat or go down. With ``path`` the last number
    is kept in that file (under ``flock``, so every process on one state folder shares one
    sequence), which carries the guarantee across restarts. The file is not fsynced: a number
    lost to a crash is only ever re-issued if the clock also stepped back, and then the agent
    refuses it as a replay, never accepts it twice.
    """

    def __init__(self, path: Path | None = None, clock: Callable[[], float] | None = None) -> None:
        self.path = path
        self.clock = clock if clock is not None else wall_clock
        self._last = 0
        self._lock = threading.Lock()

    def next(self) -> tuple[int, float]:
        """The next number and the clock reading it was made at."""
        with self._lock:
            at = float(self.clock())
            floor = int(at * 1_000_000)
            if self.path is None:
                self._last = max(self._last + 1, floor)
                return self._last, at
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                try:
                    stored = int(os.pread(fd, 32, 0).split()[0])
                except (ValueError, IndexError):
                    stored = 0  # a new (or unreadable) file: the clock floor still holds
                self._last = max(self._last + 1, stored + 1, floor)
                os.pwrite(fd, f"{self._last:020d}\n".encode(), 0)
            finally:
                os.close(fd)  # releases the flock
            return self._last, at

    def jump_past(self, number: int) -> None:
        """Make every later number higher than ``number`` (a restored controller's first
        request must be above what every node accepted from the controller before it)."""
        with self._lock:
            self._last = max(self._last, number)
            if self.path is None:
                return
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                try:
                    stored = int(os.pread(fd, 32, 0).split()[0])
                except (ValueError, IndexError):
                    stored = 0
                self._last = max(self._last, stored)
                os.pwrite(fd, f"{self._last:020d}\n".encode(), 0)
                os.fsync(fd)
            finally:
                os.close(fd)


PROCESS_SEQUENCE = Sequence()
"""The in-memory sequence of a process that was not given one (agents' replies, tests)."""


def envelope(
    kind: str,
    payload: Mapping[str, object],
    *,
    sender: str,
    to: str,
    keys: crypto.PrivateKeys,
    reply_to: str | None = None,
    sequence: Sequence | None = None,
    head: SignedHead | None = None,
    fence: Fence | None = None,
) -> tuple[dict[str, str], str]:
    """Sign a message numbered by ``sequence``; returns the envelope (JSON-ready) and its nonce.

    ``head``: the controller's audit head, shown to the agent with the request (no extra trip).
    ``fence``: a request's sending controller and its epoch (an answer has none).
    """
    nonce = secrets.token_hex(16)
    seq, at = (sequence or PROCESS_SEQUENCE).next()
    body = {
        "v": VERSION,
        "kind": kind,
        "from": sender,
        "to": to,
        "at": at,
        "seq": seq,
        "nonce": nonce,
        "reply_to": reply_to,
        "payload": payload,
    }
    if head is not None:
        body["head"] = head.to_json()
    if fence is not None:
        body["controller"] = fence.controller
        body["epoch"] = fence.epoch
    raw = json.dumps(body, separators=(",", ":"), sort_keys=True).encode()
    return {"body": crypto.b64(raw), "sig": crypto.b64(keys.sign(raw))}, nonce


def seq_of(envelope: Mapping[str, str]) -> int:
    """The sequence number of an envelope this process signed (its own, so read unverified)."""
    return int(json.loads(crypto.unb64(envelope["body"], "body"))["seq"])


def open_envelope(
    data: bytes | bytearray | Mapping[str, object],
    *,
    verify_key: bytes | KeyOf,
    sender: str,
    to: str,
    reply_to: str | None = None,
    max_skew: float = MAX_SKEW_S,
) -> Message:
    """Verify and decode an envelope (the bytes as they came, a bytearray emptied once read,
    or a mapping made in this process); EnvelopeError says why it was refused (for a signed body that does not have the
    body's shape: the field, as ``- at `$.seq```).

    Bounded before anything is built: the envelope is read by its exact type (two base64
    strings), the signature checked over the body's exact bytes, and only then is the body
    decoded, its payload kept as JSON for its kind's typed shape (:mod:`meshtui.protocol.messages`).

    ``verify_key``: the sender's key, or (an agent reading a request) the callable that names
    the key of the controller the body says sent it; the name is read before the signature is
    checked only to choose the key, and a body whose name and signature disagree is refused."""
    raw, sig = _outer(data)
    named: str | None = None
    if callable(verify_key):
        named = _signer(raw)
        key = verify_key(named)
        who = f"controller {named}" if named is not None else sender
    else:
        key, who = verify_key, sender
    try:
        crypto.verify(raw, sig, key, sender)
    except SignatureError as exc:
        raise EnvelopeError(f"refused: not signed by {who}'s key") from exc
    try:
        body = _BODY.decode(raw)
    except msgspec.ValidationError as exc:
        _refuse_version(raw)
        raise EnvelopeError(f"refused: signed body is malformed: {exc}") from None
    except msgspec.DecodeError as exc:
        raise EnvelopeError("refused: signed body is malformed: not JSON") from exc
    except RecursionError:  # a field skipped or kept as JSON (a payload) nests without end
        raise EnvelopeError("refused: signed body is malformed: nested too deeply") from None
    if body.v != VERSION:
        _refuse_version(raw)
    if memoryview(body.payload)[:1].tobytes() != b"{":
        raise EnvelopeError("refused: signed body is malformed: its payload is not an object")
    try:
        head = SignedHead.from_json(body.head) if body.head is not None else None
    except ValueError as exc:
        raise EnvelopeError(f"refused: signed body is malformed: {exc}") from None
    msg = Message(
        kind=body.kind,
        sender=body.sender,
        to=body.to,
        at=body.at,
        nonce=body.nonce,
        seq=body.seq,
        payload=body.payload,
        reply_to=body.reply_to,
        head=head,
        controller=body.controller,
        epoch=body.epoch,
    )
    if callable(verify_key) and msg.controller != named:  # the same bytes: never, but said
        raise EnvelopeError("refused: the body names two controllers")
    if msg.sender != sender:
        raise EnvelopeError(f"refused: message says it is from {msg.sender!r}, expected {sender!r}")
    if msg.to != to:
        raise EnvelopeError(f"refused: message is for {msg.to!r}, this is {to!r}")
    if reply_to is not None and msg.reply_to != reply_to:
        raise EnvelopeError("refused: reply does not answer this request (replayed?)")
    skew = time.time() - msg.at
    if abs(skew) > max_skew:
        raise OffClockError(
            f"refused: message is {skew:+.0f}s off this clock (limit {max_skew:.0f}s)", msg.nonce
        )
    return msg


def _outer(data: bytes | bytearray | Mapping[str, object]) -> tuple[bytes, bytes]:
    """The signed body and its signature from an envelope; EnvelopeError when it is not one.

    A bytearray (the agent's request body, the controller's answer buffer) is emptied once
    read: the caller's copy goes before the signature's check makes its own of the body."""
    try:
        if isinstance(data, bytes | bytearray):
            outer = _ENVELOPE.decode(data)
            if isinstance(data, bytearray):
                data.clear()
        else:
            outer = msgspec.convert(data, type=_Envelope)
    except msgspec.DecodeError:  # (a ValidationError is one) its text is not repeated: whoever
        # sent it is not known, and the agent logs its refusals
        raise EnvelopeError("not a meshtui envelope (needs body and sig)") from None
    return outer.body, outer.sig


def _signer(raw: bytes) -> str | None:
    """The controller name an (unverified) body gives; EnvelopeError when it cannot be read."""
    try:
        return _SIGNER.decode(raw).controller
    except msgspec.ValidationError:
        raise EnvelopeError(
            "refused: signed body is malformed: its controller is not a name"
        ) from None
    except (msgspec.DecodeError, RecursionError):
        raise EnvelopeError("refused: signed body is malformed: not JSON") from None


def _refuse_version(raw: bytes) -> None:
    """EnvelopeError saying to update meshtui when the body is of another version."""
    try:
        version = _VERSION.decode(raw).v
    except (msgspec.DecodeError, RecursionError):
        return
    if version is not None and version != VERSION:
        raise EnvelopeError(
            f"refused: message version {version}, expected {VERSION} "
            "(update meshtui on the controller and on every node)"
        )
