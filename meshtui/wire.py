"""The messages between the controller and host agents, and their signed envelope.

Every message is JSON inside an envelope signed with the sender's Ed25519 key. The body names
sender and recipient, carries a timestamp and a fresh nonce, and a reply quotes the nonce of the
request it answers, so a message cannot be replayed or redirected, and an answer cannot be
passed off as the answer to another request.
Sealed blobs travel base64-encoded; nothing in a message is ever a plaintext credential.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from meshtui import crypto
from meshtui.errors import EnvelopeError, SignatureError

VERSION = 1
MAX_SKEW_S = 30.0
CONTROLLER = "controller"

# message kinds (controller -> agent); every one is answered by a signed reply
STATE = "state"  # which pairs and generations the node holds, by digest
DELIVER = "deliver"  # consumer credentials and provider manifests (sealed)
WITHDRAW = "withdraw"  # try a withdrawn pair's last credential once, then delete it
PROBE = "probe"  # live logins with the credentials the node holds
DRILL_HOLD = "drill-hold"  # log in with the current credential and keep it in memory
DRILL_CHECK = "drill-check"  # log in with the new and the held credential, then forget it


@dataclass(frozen=True)
class Message:
    """A verified message: who sent it, to whom, what kind, and its payload."""

    kind: str
    sender: str
    to: str
    at: float
    nonce: str
    payload: dict[str, Any]
    reply_to: str | None = None


def envelope(
    kind: str,
    payload: dict[str, Any],
    *,
    sender: str,
    to: str,
    keys: crypto.PrivateKeys,
    reply_to: str | None = None,
) -> tuple[dict[str, str], str]:
    """Sign a message; returns the envelope (JSON-ready) and its nonce."""
    nonce = secrets.token_hex(16)
    body = {
        "v": VERSION,
        "kind": kind,
        "from": sender,
        "to": to,
        "at": time.time(),
        "nonce": nonce,
        "reply_to": reply_to,
        "payload": payload,
    }
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
    not_before: float = 0.0,
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
        msg = Message(
            kind=str(body["kind"]),
            sender=str(body["from"]),
            to=str(body["to"]),
            at=float(body["at"]),
            nonce=str(body["nonce"]),
            payload=dict(body["payload"]),
            reply_to=body.get("reply_to"),
        )
        version = body["v"]
    except (ValueError, KeyError, TypeError) as exc:
        raise EnvelopeError("refused: signed body is malformed") from exc
    if version != VERSION:
        raise EnvelopeError(f"refused: message version {version}, expected {VERSION}")
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
    if msg.at < not_before:
        raise EnvelopeError("refused: message is older than this agent (replayed?)")
    return msg


class NonceCache:
    """Nonces seen inside the clock window; a second sighting is a replay."""

    def __init__(self, window: float = 2 * MAX_SKEW_S, limit: int = 100_000) -> None:
        self._seen: OrderedDict[str, float] = OrderedDict()
        self._window, self._limit = window, limit
        self._lock = threading.Lock()

    def check(self, nonce: str, at: float) -> None:
        """Remember ``nonce``; raise EnvelopeError if it was already used."""
        with self._lock:
            cutoff = time.time() - self._window
            while self._seen and (
                next(iter(self._seen.values())) < cutoff or len(self._seen) > self._limit
            ):
                self._seen.popitem(last=False)
            if nonce in self._seen:
                raise EnvelopeError("refused: replayed request (nonce already used)")
            self._seen[nonce] = max(at, time.time())
