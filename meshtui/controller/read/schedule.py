"""When each pair is due: its effective policy, the age of its credential, its due and overdue
times. Read by ``status --due``, ``rotate --due``, the watch, its metrics and the dashboard.

A pair's due time is its last rotation (or creation) plus ``rotate_every``, plus a stable
offset within the first tenth of the interval, so a thousand pairs declared together do not
all rotate in the same second. It is overdue once that spread window has passed as well: the
watch, had it been able to, would have rotated it by then.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from datetime import datetime

from meshtui.inventory import Inventory
from meshtui.model import DEFAULT_PROBE_EVERY_S, Policy, PolicySource

SPREAD = 0.1
"""Due rotations are spread over this fraction of their interval."""


def epoch(stamp: str) -> float:
    """An inventory timestamp as seconds since the epoch."""
    return datetime.fromisoformat(stamp).timestamp()


def spread_offset(pair: str, interval: float) -> float:
    """A stable offset in ``[0, interval * SPREAD)`` derived from the pair id."""
    digest = hashlib.blake2b(pair.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 * interval * SPREAD


def probe_slot(pair: str, interval: float, after: float) -> float:
    """The pair's next probe time after ``after``: its own stable phase within each interval,
    so N pairs probed every ``interval`` make N/interval probes a second, never a burst."""
    digest = hashlib.blake2b(pair.encode(), digest_size=8, person=b"probe-slot").digest()
    phase = int.from_bytes(digest, "big") / 2**64 * interval
    return phase + interval * (math.floor((after - phase) / interval) + 1)


@dataclass(frozen=True)
class PairDue:
    """One pair's policy and when its credential is due for rotation (None: never)."""

    pair: str
    provider: str
    consumer: str
    withdrawn: bool
    policy: Policy
    since: float  # when the current generation was put in place (epoch seconds)
    due_at: float | None
    overdue_at: float | None

    def age(self, now: float) -> float:
        """Seconds the current credential has been in place."""
        return max(0.0, now - self.since)

    def is_due(self, now: float) -> bool:
        """True when the policy says rotate now (never for a withdrawn pair)."""
        return not self.withdrawn and self.due_at is not None and now >= self.due_at

    def is_overdue(self, now: float) -> bool:
        """True when the rotation should have happened and has not."""
        return not self.withdrawn and self.overdue_at is not None and now >= self.overdue_at

    def to_json(self, now: float) -> dict[str, object]:
        """The ``status --due --json`` fields of this pair."""
        return {
            "pair": self.pair,
            "rotate_every": self.policy.rotate_every,
            "probe_every": self.policy.probe_every,
            "rotate_source": str(self.policy.rotate_source),
            "probe_source": str(self.policy.probe_source),
            "age_s": round(self.age(now), 3),
            "due_in_s": None if self.due_at is None else round(self.due_at - now, 3),
            "due": self.is_due(now),
            "overdue": self.is_overdue(now),
        }


def schedule(inv: Inventory, *, declared_only: bool = False) -> list[PairDue]:
    """Every pair's policy and due times, sorted by pair id: one query.

    ``declared_only``: leave out the pairs on the default policy (never rotated, probed at the
    default interval), which is most of them in a mesh that declares no policy.
    """
    out = []
    for (
        pid,
        provider,
        consumer,
        withdrawn_at,
        since_text,
        rotate,
        probe,
        rsrc,
        psrc,
    ) in inv.schedule_rows(declared_only):
        policy = (
            Policy(None, DEFAULT_PROBE_EVERY_S)
            if probe is None or rsrc is None or psrc is None
            else Policy(rotate, probe, PolicySource(rsrc), PolicySource(psrc))
        )
        since = epoch(since_text)
        due_at = overdue_at = None
        if rotate is not None:
            due_at = since + rotate + spread_offset(pid, rotate)
            overdue_at = since + rotate * (1 + SPREAD) + spread_offset(pid, rotate)
        out.append(
            PairDue(
                pair=pid,
                provider=provider,
                consumer=consumer,
                withdrawn=bool(withdrawn_at),
                policy=policy,
                since=since,
                due_at=due_at,
                overdue_at=overdue_at,
            )
        )
    return out
