"""The watch's heartbeat: ``<state>/watch.json``, rewritten every cycle, so the dashboard and
an operator can tell whether a watch runs, when it last finished a cycle, and whether it leads
(``"role": "leader"``) or stands by (``"standby"``) for another controller's watch.

It holds a pid and timestamps only (0644: a read-only dashboard of another user may read it).
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

HEARTBEAT = "watch.json"
MAX_BYTES = 4096


@dataclass(frozen=True)
class Heartbeat:
    """What the watch writes to ``<state>/watch.json`` each cycle, for the dashboard."""

    pid: int
    started_at: str
    last_cycle_at: str | None
    last_ok_at: str | None
    cycles: int
    stopped_at: str | None = None
    role: str | None = None  # "leader" or "standby"
    lease_s: float | None = None  # the leader lease's length (None on SQLite: no lease)
    leader: str | None = None  # who leads, as the lease row says (a standby's)

    @classmethod
    def read(cls, state_dir: Path) -> Heartbeat | None:
        """The heartbeat file, or None when there is none (or it cannot be read)."""
        try:
            # no symlink, no FIFO: the dashboard may run as root on another user's folder
            fd = os.open(state_dir / HEARTBEAT, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            data = json.loads(os.read(fd, MAX_BYTES))
            beat = cls(**{k: data.get(k) for k in cls.__dataclass_fields__})
        except (OSError, ValueError, TypeError, AttributeError):
            return None
        finally:
            os.close(fd)
        if not isinstance(beat.pid, int) or beat.pid <= 0 or not isinstance(beat.cycles, int):
            return None
        return beat

    def running(self) -> bool:
        """True when the process that wrote it still runs and has not said it stopped."""
        if self.stopped_at is not None:
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True  # another user's process: alive
        return True
