"""The audit head this node was shown, kept so the controller's log cannot be wiped unnoticed.

The controller shows its signed audit head (:class:`~meshtui.wire.SignedHead`) with every
request. The agent keeps it in ``audit-head.json`` beside its keys when the controller's key
signed it and it is longer than the one kept; it never goes back, so a later inventory that is
shorter, or that holds another event at that number, disagrees with what this node saw, and
``meshtui audit --verify`` says so, naming the node. Anyone may read it back (the head is a
number and a hash, no secret), answered signed by this node's key.
"""

from __future__ import annotations

import json
import re
import threading
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
    """The longest controller-signed audit head this node was shown, persisted atomically."""

    def __init__(self, state_dir: Path, controller_verify_key: bytes) -> None:
        self._path = state_dir / ANCHOR
        self._key = controller_verify_key
        self._lock = threading.Lock()
        self._head = self._load()

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

    def offer(self, head: SignedHead) -> bool:
        """Keep ``head`` when the controller signed it and it extends the kept one; True if kept.

        A head at the same or a lower number is not kept (the kept one is what a later check
        compares against); OSError when it cannot be written (nothing is kept then).
        """
        with self._lock:
            if self._head is not None and head.seq <= self._head.seq:
                return False
            if not head.verifies(self._key):
                return False
            body = json.dumps(head.to_json(), sort_keys=True).encode()
            write_private(self._path, body)
            self._head = head
            return True
