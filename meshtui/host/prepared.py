"""Consumer credentials written ahead: the consumer's half of a rotation, ready before its
provider applies, so that once it has, holding the new credential is one rename.

A prepared credential is an unnamed file (:class:`meshtui.host.files.Unnamed`): nobody can open
it and nothing holds it. It is given its name only by a ``deliver`` of exactly the item it was
prepared for (pair, generation, digest, file, owner, group, mode); a different delivery of the
pair, a newer prepare, or :data:`PREPARED_S` going by lets it go, and the filesystem frees it
(a crash or a restart frees it too).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from meshtui.host.files import Unnamed
from meshtui.messages import ConsumerItem

PREPARED_S = 60.0
"""How long a prepared credential waits for its delivery (a provider's provisioner may take
longer; its delivery then writes the credential in full)."""


@dataclass
class _Ready:
    """One prepared credential and the item it was prepared for."""

    item: tuple[object, ...]
    file: Unnamed
    timer: threading.Timer


def _key(item: ConsumerItem) -> tuple[object, ...]:
    return (
        item["generation"],
        item["digest"],
        item["file"],
        item["owner"],
        item["group"],
        item["mode"],
    )


class Prepared:
    """This node's prepared credentials, at most one per pair, each for a bounded time."""

    def __init__(self, keep_s: float = PREPARED_S) -> None:
        self._keep_s = keep_s
        self._lock = threading.Lock()
        self._ready: dict[str, _Ready] = {}

    def put(self, item: ConsumerItem, file: Unnamed) -> None:
        """Keep ``file`` for ``item`` (letting go of one prepared before for the pair)."""
        timer = threading.Timer(self._keep_s, self._expire, (item["pair"], file))
        timer.daemon = True
        with self._lock:
            old = self._ready.pop(item["pair"], None)
            self._ready[item["pair"]] = _Ready(_key(item), file, timer)
        if old is not None:
            old.timer.cancel()
            old.file.close()
        timer.start()

    def take(self, item: ConsumerItem) -> Unnamed | None:
        """The file prepared for exactly ``item`` (the caller closes it), else None; whatever
        was prepared for the pair is let go either way."""
        with self._lock:
            ready = self._ready.pop(item["pair"], None)
        if ready is None:
            return None
        ready.timer.cancel()
        if ready.item != _key(item):
            ready.file.close()
            return None
        return ready.file

    def _expire(self, pair: str, file: Unnamed) -> None:
        with self._lock:
            ready = self._ready.get(pair)
            if ready is None or ready.file is not file:
                return  # taken or replaced meanwhile
            del self._ready[pair]
            file.close()

    def close(self) -> None:
        """Let every prepared credential go."""
        with self._lock:
            ready, self._ready = list(self._ready.values()), {}
        for r in ready:
            r.timer.cancel()
            r.file.close()

    def __len__(self) -> int:
        with self._lock:
            return len(self._ready)
