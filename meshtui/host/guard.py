"""What this agent has accepted, kept on disk so a restart forgets nothing an attacker could use.

Two records beside the node's keys, each replaced atomically and fsynced *before* the request
is acted on:

- ``requests.json``: the controller's sequence numbers accepted lately. A number is accepted
  once, and only if it is above the floor (the newest accepted number minus
  :data:`WINDOW_US`). The window lets concurrent requests (two controller processes, parallel
  threads) arrive slightly out of order; it is measured on the controller's own sequence, never
  against this agent's start time, so a restart locks nobody out.
- ``generations.json``: per pair end, the generation of the newest delivery this node accepted.
  A delivery of an older generation is refused unless its signed item says it rolls back from
  exactly that generation.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from meshtui.atomic import write_private
from meshtui.errors import EnvelopeError, WireError
from meshtui.messages import ConsumerItem, DeliverRequest, Holding, ManifestEntry
from meshtui.wire import MAX_SKEW_S

REQUESTS = "requests.json"
GENERATIONS = "generations.json"
WINDOW_US = int(2 * MAX_SKEW_S * 1_000_000)
"""How far (in the controller's sequence, microseconds of its clock) a request may trail the
newest accepted one: the whole span the clock limit allows on both sides."""
RECENT_LIMIT = 10_000
"""At most this many numbers are kept; past it the floor rises (a refusal, never a replay)."""


REQUESTS_ADVICE = (
    "delete it once the agent has been stopped for over a minute (every request captured "
    "before is then refused by the clock limit)"
)
GENERATIONS_ADVICE = "delete it to start again from what holdings.json says this node holds"


def _load(path: Path, advice: str) -> dict[str, Any] | None:
    """A record, None when it does not exist yet; WireError when it exists but cannot be read."""
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise WireError(
            f"{path} cannot be read ({exc}); the agent will not run without knowing what it "
            f"accepted: {advice}"
        ) from exc
    if not isinstance(data, dict):
        raise WireError(f"{path} is not a JSON object: {advice}")
    return data


class AcceptedRequests:
    """The controller's sequence numbers this agent accepted, persisted before each is acted on."""

    def __init__(self, state_dir: Path) -> None:
        self._path = state_dir / REQUESTS
        self._lock = threading.Lock()
        data = _load(self._path, REQUESTS_ADVICE) or {}
        try:
            self._floor = int(data.get("floor", 0))
            self._recent = {int(s) for s in data.get("recent", [])}
        except (TypeError, ValueError) as exc:
            raise WireError(
                f"{self._path}: 'floor' and 'recent' must be integers: {REQUESTS_ADVICE}"
            ) from exc

    def admit(self, seq: int) -> None:
        """Accept ``seq`` once (recorded durably) or raise EnvelopeError saying why not."""
        with self._lock:
            if seq <= self._floor:
                raise EnvelopeError(
                    "refused: request is older than the requests this agent already accepted "
                    "(replayed?)"
                )
            if seq in self._recent:
                raise EnvelopeError("refused: replayed request (sequence number already used)")
            recent = self._recent | {seq}
            floor = max(self._floor, max(recent) - WINDOW_US)
            recent = {s for s in recent if s > floor}
            if len(recent) > RECENT_LIMIT:
                kept = sorted(recent)[-RECENT_LIMIT:]
                floor, recent = kept[0] - 1, set(kept)
            body = {"floor": floor, "recent": sorted(recent)}
            write_private(self._path, json.dumps(body, separators=(",", ":")).encode())
            self._floor, self._recent = floor, recent


@dataclass(frozen=True)
class Refusal:
    """Why one delivery item (a consumer credential or a whole provider manifest) was refused."""

    key: str
    reason: str


class AcceptedGenerations:
    """Per (end, pair): the generation of the newest delivery this node accepted."""

    def __init__(self, state_dir: Path, node: str, held: list[Holding]) -> None:
        self._path = state_dir / GENERATIONS
        self._node = node
        data = _load(self._path, GENERATIONS_ADVICE)
        if data is None:  # first run of this version: start from what the node holds
            data = {"consumer": {}, "provider": {}}
            for h in held:
                data.setdefault(str(h["end"]), {})[str(h["pair"])] = int(h["generation"])
        try:
            self._data: dict[str, dict[str, int]] = {
                end: {str(p): int(g) for p, g in dict(data.get(end, {})).items()}
                for end in ("consumer", "provider")
            }
        except (TypeError, ValueError) as exc:
            raise WireError(
                f"{self._path}: generations must be integers: {GENERATIONS_ADVICE}"
            ) from exc

    def get(self, end: str, pair: str) -> int | None:
        """The newest generation accepted for one end of a pair."""
        return self._data[end].get(pair)

    def admit(self, payload: DeliverRequest) -> list[Refusal]:
        """Check every item of a delivery; record the accepted generations durably, before any
        file is written. Call under the agent's delivery lock. Returns the refused items, keyed
        ``consumer:<pair>`` or ``provider:<provider>:<provision>``."""
        refused: list[Refusal] = []
        changes: list[tuple[str, str, int]] = []
        for item in payload.get("consumer", []):
            if item["node"] != self._node:
                continue  # the delivery itself refuses it, naming the node
            pair = item["pair"]
            why = self._older(item, "consumer", pair, item["generation"])
            if why:
                refused.append(Refusal(f"consumer:{pair}", why))
            else:
                changes.append(("consumer", pair, item["generation"]))
        for spec in payload.get("provider", []):
            if spec["provider"].split("/", 1)[0] != self._node:
                continue
            ends = [(c["pair"], c["generation"], c) for c in spec["consumers"]]
            whys = [w for pair, gen, c in ends if (w := self._older(c, "provider", pair, gen))]
            if whys:  # a manifest is all or nothing
                refused.append(Refusal(f"provider:{spec['provider']}:{spec['provision']}", whys[0]))
            else:
                changes += [("provider", pair, gen) for pair, gen, _ in ends]
        if changes:
            data = {end: dict(pairs) for end, pairs in self._data.items()}
            for end, pair, gen in changes:
                data[end][pair] = gen
            write_private(self._path, json.dumps(data, sort_keys=True).encode())
            self._data = data
        return refused

    def _older(
        self, item: ConsumerItem | ManifestEntry, end: str, pair: str, gen: int
    ) -> str | None:
        held = self._data[end].get(pair)
        if held is None or gen >= held:
            return None
        note = item.get("rollback")
        if note is not None and held in note["from"]:
            return None
        return (
            f"{pair}: refused: generation {gen} is older than generation {held} this node "
            f"({self._node}, {end} end) already accepted, and the delivery is not a rollback "
            f"from generation {held} (a replay, or a controller with an out-of-date inventory; "
            "run meshtui push from the controller that rotated it)"
        )
