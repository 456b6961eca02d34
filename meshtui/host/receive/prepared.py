"""Consumer credentials written ahead: the consumer's half of a rotation, ready before its
provider applies, so that once it has, holding the new credential is one rename.

A prepared credential is an unnamed file (:class:`meshtui.host.credential_files.Unnamed`): nobody can open
it and nothing holds it. It is given its name only by a ``deliver`` of exactly the item it was
prepared for (pair, node, generation, digest, file, owner, group, mode); a different delivery
of the pair, a newer prepare, or :data:`PREPARED_S` going by lets it go, and the filesystem
frees it (a crash or a restart frees it too).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from meshtui.host.credential_files import Unnamed
from meshtui.protocol.messages import ConsumerItem

PREPARED_S = 60.0
"""How long a prepared credential waits for its delivery (a provider's provisioner may take
longer; its delivery then writes the credential in full)."""
PREPARED_LIMIT = 128
"""At most this many credentials are held prepared (each keeps two descriptors open); past it a
credential is not prepared, and its delivery writes it in full."""


@dataclass
class _Ready:
    """One prepared credential, the item it was prepared for, and when it is let go."""

    item: tuple[object, ...]
    file: Unnamed
    until: float


def _key(item: ConsumerItem) -> tuple[object, ...]:
    return (
        item["node"],
        item["generation"],
        item["digest"],
        item["file"],
        item["owner"],
        item["group"],
        item["mode"],
    )


class Prepared:
    """This node's prepared credentials, at most one per pair, each for a bounded time (one
    sweeper thread, started with the first, lets the expired ones go)."""

    def __init__(self, keep_s: float = PREPARED_S, limit: int = PREPARED_LIMIT) -> None:
        self._keep_s = keep_s
        self._limit = limit
        self._changed = threading.Condition()
        self._ready: dict[str, _Ready] = {}
        self._sweeper: threading.Thread | None = None

    def room(self, pair: str) -> bool:
        """Whether a credential for ``pair`` could be prepared now."""
        with self._changed:
            return pair in self._ready or len(self._ready) < self._limit

    def put(self, item: ConsumerItem, file: Unnamed) -> bool:
        """Keep ``file`` for ``item`` (letting go of one prepared before for the pair); False,
        with ``file`` let go, when :data:`PREPARED_LIMIT` are held already."""
        pair = item["pair"]
        with self._changed:
            old = self._ready.pop(pair, None)
            if old is None and len(self._ready) >= self._limit:
                file.close()
                return False
            self._ready[pair] = _Ready(_key(item), file, time.monotonic() + self._keep_s)
            if self._sweeper is None:
                self._sweeper = threading.Thread(
                    target=self._sweep, name="meshtui-prepared", daemon=True
                )
                self._sweeper.start()
            self._changed.notify()
        if old is not None:
            old.file.close()
        return True

    def take(self, item: ConsumerItem) -> Unnamed | None:
        """The file prepared for exactly ``item`` (the caller closes it), else None; whatever
        was prepared for the pair is let go either way."""
        with self._changed:
            ready = self._ready.pop(item["pair"], None)
        if ready is None:
            return None
        if ready.item != _key(item):
            ready.file.close()
            return None
        return ready.file

    def _sweep(self) -> None:
        with self._changed:
            while True:
                now = time.monotonic()
                for pair in [p for p, r in self._ready.items() if r.until <= now]:
                    self._ready.pop(pair).file.close()
                soonest = min((r.until for r in self._ready.values()), default=None)
                self._changed.wait(None if soonest is None else soonest - now)

    def close(self) -> None:
        """Let every prepared credential go."""
        with self._changed:
            ready, self._ready = list(self._ready.values()), {}
        for r in ready:
            r.file.close()

    def __len__(self) -> int:
        with self._changed:
            return len(self._ready)
