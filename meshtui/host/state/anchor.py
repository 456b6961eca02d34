"""The audit head this node was shown, kept so the controller's log cannot be wiped unnoticed.

The controller shows its signed audit head (:class:`~meshtui.protocol.wire.SignedHead`) with every
request. The agent keeps it (in the replay guard's record, and a copy in ``audit-head.json``
beside its keys) when the controller's key signed it and it is longer than the one kept; it never goes back, so a later inventory that is
shorter, or that holds another event at that number, disagrees with what this node saw, and
``meshtui audit --verify`` says so, naming the node. Anyone may read it back (the head is a
number and a hash, no secret), answered signed by this node's key.

A restored controller's chain is shorter than what the nodes saw. A node takes such a head only
when it carries a restore proof (:class:`~meshtui.protocol.wire.RestoreProof`) signed by the controller key
that it has not seen before; the head it kept then becomes history (``history``, read back with
the head), so the gap stays on record and a second put-back of an old inventory, which can only
show a proof already seen, is caught as before.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path

from meshtui.atomic import write_private
from meshtui.errors import EnvelopeError, WireError
from meshtui.protocol.wire import KeyOf, SignedHead

ANCHOR = "audit-head.json"
ADVICE = (
    "delete it to start again from the next head the controller shows (the node then forgets "
    "what it saw, so a wipe before that is no longer caught by this node)"
)

_NONCE = re.compile(r"[0-9a-f]{32,64}")


def _unsigned_advice(head: SignedHead) -> str:
    """What to do about a kept head the key of the controller it names does not verify: when
    it names one, that controller may have been retired from a node whose policy now names no
    controller (it then checks every head against its one pinned key)."""
    if head.controller is None:
        return ADVICE
    return (
        f"if controller {head.controller} was retired, name the controllers that stay in this "
        "node's policy ([[controllers]]; a node that names them keeps a head a retired one "
        f"signed) and restart the agent; otherwise {ADVICE}"
    )


def is_nonce(text: str) -> bool:
    """True for a nonce as the controller makes them (hex, 32 to 64 characters)."""
    return bool(_NONCE.fullmatch(text))


class AuditAnchor:
    """The longest controller-signed audit head this node was shown.

    Durably, it is kept in the replay guard's record (:mod:`meshtui.host.state.guard`), in the same
    line and the same fdatasync as the request that showed it, before the request is acted on;
    ``audit-head.json`` is a readable copy of it (replaced atomically, not fsynced: the record
    is what a restart trusts when the copy is behind).
    """

    def __init__(
        self,
        state_dir: Path,
        controller_verify_key: bytes | KeyOf,
        recorded: Mapping[str, object] | None = None,
        history: Iterable[Mapping[str, object]] = (),
    ) -> None:
        """``controller_verify_key``: the one controller key, or the key of each accepted
        controller by name (:meth:`meshtui.host.policy.controller_keys.Controllers.key_of`): a head
        is verified with the key of the controller that signed it."""
        self._path = state_dir / ANCHOR
        self._key_of: KeyOf = (
            controller_verify_key
            if callable(controller_verify_key)
            else _only(controller_verify_key)
        )
        self._lock = threading.Lock()
        self._copying = threading.Lock()
        self._history: list[SignedHead] = []
        for n, old in enumerate(history, 1):  # signed by the key pinned then (maybe not now)
            try:
                self._history.append(SignedHead.from_json(dict(old)))
            except ValueError as exc:
                raise WireError(f"the guard's record, old head {n}: {exc}: {ADVICE}") from exc
        self._head = self._load() if recorded is not None or not self._history else None
        self._copied = _mark(self._head)
        if recorded is not None:  # what the guard's record kept (a head it verified then)
            try:
                head = SignedHead.from_json(dict(recorded))
            except ValueError as exc:
                raise WireError(f"the audit head in the guard's record: {exc}: {ADVICE}") from exc
            if self._signed(head) is False:
                raise WireError(
                    "the audit head in the guard's record is not signed by the key of "
                    f"controller {head.controller or '(pinned)'}: {_unsigned_advice(head)}"
                )
            if self._head is None or head.seq > self._head.seq or head.restore is not None:
                self._head = head  # the record is what a restart trusts (a restored head too)

    def _load(self) -> SignedHead | None:
        try:
            data = json.loads(self._path.read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise WireError(f"{self._path} cannot be read ({exc}): {ADVICE}") from exc
        try:
            head = SignedHead.from_json(data)
        except ValueError as exc:
            raise WireError(f"{self._path}: {exc}: {ADVICE}") from exc
        if self._signed(head) is False:
            raise WireError(
                f"{self._path} is not signed by the key of controller "
                f"{head.controller or '(pinned)'}: {_unsigned_advice(head)}"
            )
        return head

    def _signed(self, head: SignedHead) -> bool | None:
        """Whether the key of the controller ``head`` names signed it; None when this node no
        longer accepts that controller (a kept head it verified then, from a retired
        controller, stays: the chain it heads goes on under the others)."""
        try:
            key = self._key_of(head.controller)
        except EnvelopeError:
            return None
        return head.verifies(key)

    @property
    def head(self) -> SignedHead | None:
        """The head kept (None: never shown one)."""
        return self._head

    @property
    def history(self) -> list[SignedHead]:
        """The heads kept before a restore (or a re-key) replaced them, oldest first."""
        with self._lock:
            return list(self._history)

    def _new_restore(self, head: SignedHead) -> bool:
        """True when ``head`` carries a restore proof this node has not seen (call locked)."""
        if head.restore is None:
            return False
        seen = {h.restore.hash for h in (self._head, *self._history) if h and h.restore}
        return head.restore.hash not in seen

    def wants(self, head: SignedHead) -> bool:
        """Whether ``head`` would be kept: the controller signed it and it extends the kept one
        (a head at the same or a lower number is not: the kept one is what a later check
        compares against), or it heads a restored chain whose signed proof this node has not
        seen yet (any number: the kept head becomes history). Nothing is written."""
        with self._lock:
            fresh = self._new_restore(head)
            if not fresh and self._head is not None and head.seq <= self._head.seq:
                return False
        if fresh:
            proof = head.restore
            assert proof is not None
            try:
                key = self._key_of(head.controller)
            except EnvelopeError:
                return False
            if proof.seq > head.seq or not proof.verifies(key):
                return False
        return self._signed(head) is True

    def keep(self, head: SignedHead) -> None:
        """Keep ``head`` (one :meth:`wants` said yes to, already recorded durably by the guard)
        unless a longer one came meanwhile, and refresh the readable copy."""
        self.take(head)
        self.copy()

    def take(self, head: SignedHead) -> None:
        """Keep ``head`` in memory (what :meth:`wants` and the anchor read answer from) unless a
        longer one came meanwhile; the readable copy is :meth:`copy`'s, which may come later
        (after the answer is sent): the guard's durable line already holds the head."""
        with self._lock:
            if self._new_restore(head):
                if self._head is not None:
                    self._history.append(self._head)
                self._head = head
            elif self._head is None or head.seq > self._head.seq:
                self._head = head

    def forget(self) -> None:
        """Keep no head (``host rekey``: the guard moved it to its history) and drop the
        readable copy."""
        with self._lock:
            if self._head is not None:
                self._history.append(self._head)
            self._head = None
        self._path.unlink(missing_ok=True)

    def copy(self) -> None:
        """Bring ``audit-head.json`` up to the head kept, once however many heads came since
        the last copy (copies never cross: the newest head is written last)."""
        with self._copying:
            head = self._head
            if head is None or _mark(head) == self._copied:
                return
            body = json.dumps(head.to_json(), sort_keys=True).encode()
            write_private(self._path, body, durable=False)
            self._copied = _mark(head)


def _only(key: bytes) -> KeyOf:
    """The one key, whatever controller a head names."""
    return lambda _name: key


def _mark(head: SignedHead | None) -> tuple[int, str] | None:
    """What tells two kept heads apart (a restored chain's head may have a lower number)."""
    return None if head is None else (head.seq, head.hash)
