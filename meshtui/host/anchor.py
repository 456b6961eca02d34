"""The audit head this node was shown, kept so the controller's log cannot be wiped unnoticed.

The controller shows its signed audit head (:class:`~meshtui.wire.SignedHead`) with every
request. The agent keeps it (in the replay guard's record, and a copy in ``audit-head.json``
beside its keys) when the controller's key signed it and it is longer than the one kept; it never goes back, so a later inventory that is
shorter, or that holds another event at that number, disagrees with what this node saw, and
``meshtui audit --verify`` says so, naming the node. Anyone may read it back (the head is a
number and a hash, no secret), answered signed by this node's key.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Mapping
from pathlib import Path

from meshtui.atomic import write_private
from meshtui.errors import WireError
from meshtui.wire import SignedHead

ANCHOR = "audit-head.json"
ADVICE = (
    "delete it to start again from the next head the controller shows (the node then forgets "
    "what it saw, so a wipe before that is no longer caught by this node)"
)

_NONCE = re.compile(r"[0-9a-f]{32,64}")


def is_nonce(text: str) -> bool:
    """True for a nonce as the controller makes them (hex, 32 to 64 characters)."""
    return bool(_NONCE.fullmatch(text))


class AuditAnchor:
    """The longest controller-signed audit head this node was shown.

    Durably, it is kept in the replay guard's record (:mod:`meshtui.host.guard`), in the same
    line and the same fdatasync as the request that showed it, before the request is acted on;
    ``audit-head.json`` is a readable copy of it (replaced atomically, not fsynced: the record
    is what a restart trusts when the copy is behind).
    """

    def __init__(
        self,
        state_dir: Path,
        controller_verify_key: bytes,
        recorded: Mapping[str, object] | None = None,
    ) -> None:
        self._path = state_dir / ANCHOR
        self._key = controller_verify_key
        self._lock = threading.Lock()
        self._copying = threading.Lock()
        self._head = self._load()
        self._copied = self._head.seq if self._head is not None else None
        if recorded is not None:  # what the guard's record kept (a head it verified then)
            try:
                head = SignedHead.from_json(dict(recorded))
            except ValueError as exc:
                raise WireError(f"the audit head in the guard's record: {exc}: {ADVICE}") from exc
            if not head.verifies(self._key):
                raise WireError(
                    "the audit head in the guard's record is not signed by the pinned "
                    f"controller key: {ADVICE}"
                )
            if self._head is None or head.seq > self._head.seq:
                self._head = head

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
        if not head.verifies(self._key):
            raise WireError(f"{self._path} is not signed by the pinned controller key: {ADVICE}")
        return head

    @property
    def head(self) -> SignedHead | None:
        """The head kept (None: never shown one)."""
        return self._head

    def wants(self, head: SignedHead) -> bool:
        """Whether ``head`` would be kept: the controller signed it and it extends the kept one
        (a head at the same or a lower number is not: the kept one is what a later check
        compares against). Nothing is written."""
        with self._lock:
            if self._head is not None and head.seq <= self._head.seq:
                return False
        return head.verifies(self._key)

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
            if self._head is None or head.seq > self._head.seq:
                self._head = head

    def copy(self) -> None:
        """Bring ``audit-head.json`` up to the head kept, once however many heads came since
        the last copy (copies never cross: the newest head is written last)."""
        with self._copying:
            head = self._head
            if head is None or (self._copied is not None and head.seq <= self._copied):
                return
            body = json.dumps(head.to_json(), sort_keys=True).encode()
            write_private(self._path, body, durable=False)
            self._copied = head.seq
