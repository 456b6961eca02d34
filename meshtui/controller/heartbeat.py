"""The watch's heartbeat: ``<state>/watch.json``, rewritten every cycle, so the dashboard and
an operator can tell whether a watch runs and when it last finished a cycle.

It holds a pid and timestamps only (0644: a read-only dashboard of another user may read it).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

HEARTBEAT = "watch.json"


@dataclass(frozen=True)
class Heartbeat:
    """What the watch writes to ``<state>/watch.json`` each cycle, for the dashboard."""

    pid: int
    started_at: str
    last_cycle_at: str | None
    last_ok_at: str | None
    cycles: int
    stopped_at: str | None = None

    @classmethod
    def read(cls, state_dir: Path) -> Heartbeat | None:
        """The heartbeat file, or None when there is none (or it cannot be read)."""
        try:
            data = json.loads((state_dir / HEARTBEAT).read_text())
            return cls(**{k: data.get(k) for k in cls.__dataclass_fields__})
        except (OSError, ValueError, TypeError):
            return None

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
