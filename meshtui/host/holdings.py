"""What this node holds, by pair and end: generation and digest, never the secret.

Persisted beside the node's keys (0600 JSON) so the agent can answer ``state`` after a restart
and the controller can find out who is behind even when a reply was lost.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Literal, NotRequired, TypedDict, cast

from meshtui.atomic import write_private
from meshtui.messages import Holding

FILE = "holdings.json"
End = Literal["consumer", "provider"]


class Held(TypedDict):
    """One end of one pair as this node records it: a consumer's file, a provider's login."""

    generation: int
    digest: str
    file: NotRequired[str]
    owner: NotRequired[str | None]
    group: NotRequired[str | None]
    mode: NotRequired[str]
    provider: NotRequired[str]
    login: NotRequired[str]


class Holdings:
    """A small persistent map ``(end, pair) -> {generation, digest, ...}``."""

    def __init__(self, state_dir: Path) -> None:
        self._path = state_dir / FILE
        self._lock = threading.Lock()
        try:
            data = json.loads(self._path.read_text())
        except (OSError, ValueError):
            data = {}
        self._data: dict[End, dict[str, Held]] = {
            "consumer": dict(data.get("consumer", {})),
            "provider": dict(data.get("provider", {})),
        }

    def get(self, end: End, pair: str) -> Held | None:
        """What this node holds for one end of a pair."""
        with self._lock:
            held = self._data[end].get(pair)
            return Held(**held) if held else None

    def update(self, end: End, changes: dict[str, Held | None]) -> None:
        """Set (or with None, forget) several pairs of one end, then persist once."""
        with self._lock:
            for pair, held in changes.items():
                if held is None:
                    self._data[end].pop(pair, None)
                else:
                    self._data[end][pair] = held
            # a cache of what the files hold: losing the last update to a crash only makes the
            # controller re-deliver, so it is not worth an fsync inside a rotation's window
            write_private(
                self._path, json.dumps(self._data, sort_keys=True).encode(), durable=False
            )

    def listing(self) -> list[Holding]:
        """Every holding as ``{end, pair, generation, digest, ...}`` (each a fresh dict)."""
        with self._lock:
            return [
                cast(Holding, {"end": end, "pair": pair, **held})
                for end, pairs in self._data.items()
                for pair, held in sorted(pairs.items())
            ]
