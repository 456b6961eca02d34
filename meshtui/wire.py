"""The messages between the controller and host agents, and their signed envelope.

Every message is JSON inside an envelope signed with the sender's Ed25519 key. The body names
sender and recipient, carries a timestamp, a fresh nonce and the sender's sequence number (strictly
increasing, see :class:`Sequence`), and a reply quotes the nonce of the request it answers, so a
message cannot be redirected and an answer cannot be passed off as the answer to another request.
The agent refuses a replay by remembering, on disk, the sequence numbers it accepted
(:mod:`meshtui.host.guard`).
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
from typing import Any

from meshtui import crypto
from meshtui.errors import EnvelopeError, SignatureError

VERSION = 2  # 2: every body carries "seq"
MAX_SKEW_S = 30.0
CONTROLLER = "controller"

# message kinds (controller -> agent); every one is answered by a signed reply
STATE = "state"  # which pairs and generations the node holds, by digest


DELIVER = "deliver"  # consumer credentials and provider manifests (sealed)
WITHDRAW = "withdraw"  # try a withdrawn pair's last credential once, then delete it
PROBE = "probe"  # live logins with the credentials the node holds
DRILL_HOLD = "drill-hold"  # log in with the current credential and keep it in memory
DRILL_CHECK = "drill-check"  # log in with the new and the held credential, then forget it
CHECK = "check"  # doctor: the node's side of the preflight (folders, users, reloads, admin, ports)
ANCHOR = "anchor"  # the agent's answer to an unsigned read of the audit head it keeps


def head_message(seq: int, digest: str) -> bytes:
    """What the controller signs for the audit chain's head: its newest event number and hash."""
    return f"meshtui-audit-head:{seq}:{digest}".encode()


@dataclass(frozen=True)
class SignedHead:
    """The audit chain's head as the controller signed it: event number, its hash, signature.

    The controller shows it to every agent on every request; each agent keeps the longest one
    it was shown (:mod:`meshtui.host.anchor`), so a wiped or cut-back inventory is caught.
    """

    seq: int
    hash: str
    sig: str  # base64 Ed25519 signature of :func:`head_message` by the controller key

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

    def to_json(self) -> dict[str, Any]:
        """The head as it travels."""
        return {"seq": self.seq, "hash": self.hash, "sig": self.sig}

    @classmethod
    def from_json(cls, data: Any) -> SignedHead:
        """A head from its JSON form; ValueError when the shape is wrong."""
        if not isinstance(data, dict):
            raise ValueError("an audit head must be an object")
        seq, digest, sig = data.get("seq"), data.get("hash"), data.get("sig")
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
            raise ValueError("an audit head's seq must be a positive integer")
        if not isinstance(digest, str) or len(digest) != 64:
            raise ValueError("an audit head's hash must be 64 hex characters")
        if not isinstance(sig, str) or not sig:
            raise ValueError("an audit head must carry the controller's signature")
        return cls(seq=seq, hash=digest, sig=sig)


@dataclass(frozen=True)
class Message:
    """A verified message: who sent it, to whom, what kind, and its payload."""

    kind: str
    sender: str
    to: str
    at: float
    nonce: str
    seq: int
    payload: dict[str, Any]
    reply_to: str | None = None
    head: SignedHead | None = None  # the controller's audit head, shown on a request


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
) -> tuple[dict[str, str], str]:
    """Sign a message numbered by ``sequence``; returns the envelope (JSON-ready) and its nonce.

    ``head``: the controller's audit head, shown to the agent with the request (no extra trip).
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
    raw = json.dumps(body, separators=(",", ":"), sort_keys=True).encode()
    return {"body": crypto.b64(raw), "sig": crypto.b64(keys.sign(raw))}, nonce


def open_envelope(
    data: Any,
    *,
    verify_key: bytes,
    sender: str,
    to: str,
    reply_to: str | None = None,
    max_skew: float = MAX_SKEW_S,
) -> Message:
    """Verify and decode an envelope; EnvelopeError says why it was refused."""
    try:
        raw = crypto.unb64(data["body"], "body")
        sig = crypto.unb64(data["sig"], "sig")
    except (TypeError, KeyError, ValueError) as exc:
        raise EnvelopeError("not a meshtui envelope (needs body and sig)") from exc
    try:
        crypto.verify(raw, sig, verify_key, sender)
    except SignatureError as exc:
        raise EnvelopeError(f"refused: not signed by {sender}'s key") from exc
    try:
        body = json.loads(raw)
        version = body["v"]
        if version != VERSION:
            raise EnvelopeError(
                f"refused: message version {version}, expected {VERSION} "
                "(update meshtui on the controller and on every node)"
            )
        msg = Message(
            kind=str(body["kind"]),
            sender=str(body["from"]),
            to=str(body["to"]),
            at=float(body["at"]),
            nonce=str(body["nonce"]),
            seq=_integer(body["seq"]),
            payload=dict(body["payload"]),
            reply_to=body.get("reply_to"),
            head=SignedHead.from_json(body["head"]) if body.get("head") is not None else None,
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise EnvelopeError("refused: signed body is malformed") from exc
    if msg.sender != sender:
        raise EnvelopeError(f"refused: message says it is from {msg.sender!r}, expected {sender!r}")
    if msg.to != to:
        raise EnvelopeError(f"refused: message is for {msg.to!r}, this is {to!r}")
    if reply_to is not None and msg.reply_to != reply_to:
        raise EnvelopeError("refused: reply does not answer this request (replayed?)")
    skew = time.time() - msg.at
    if abs(skew) > max_skew:
        raise EnvelopeError(
            f"refused: message is {skew:+.0f}s off this clock (limit {max_skew:.0f}s)"
        )
    return msg


def _integer(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError("seq must be a non-negative integer")
    return value
