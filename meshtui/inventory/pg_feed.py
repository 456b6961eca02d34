"""The feed of a PostgreSQL inventory's changes: a session of its own listening on
:data:`~meshtui.inventory.engine.CHANGED_CHANNEL`, which every write transaction notifies at its
commit (:meth:`~meshtui.inventory.pg_connection.PgConnection.writing`), so an open dashboard on
any controller wakes within milliseconds of another's write instead of at its next poll.

A notification is only a wake-up: the reader then reads what changed as it always does (the
kept status read), so one lost or merged with another loses nothing. While the session is lost
(the server restarted, the link was cut) the feed opens a new one, waiting a little longer
each time up to :data:`RETRY_MAX` seconds, and says "changed" once it listens again: what was
committed meanwhile was notified to nobody. A SQLite inventory has no feed (its readers look at
the file's stamp).
"""

from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from meshtui.errors import InventoryError
from meshtui.inventory import pg_connection
from meshtui.inventory.engine import CHANGED_CHANNEL

if TYPE_CHECKING:
    import psycopg

RETRY_FIRST = 0.2
RETRY_MAX = 5.0
"""Seconds between attempts to listen again after the session was lost: the first, then
doubled each time up to this."""


class ChangeFeed:
    """Wakes a reader when any controller commits a write to the inventory the conninfo file
    ``path`` names. Not shared between threads: one reader's worker calls :meth:`wait`."""

    def __init__(self, path: Path) -> None:
        self._open = functools.partial(pg_connection.opened, pg_connection.settings(path),
                                       read_only=True)  # fmt: skip
        self._conn: psycopg.Connection[Any] | None = None
        self._retry = 0.0
        self._next_try = 0.0
        self.reconnects = 0
        """How many times the session was opened again after it was lost."""
        self.error: str | None = None
        """Why the feed is not listening now (None while it is)."""

    def wait(self, timeout: float) -> bool:
        """Within ``timeout`` seconds: True as soon as a write was committed since the feed
        began listening (every notification already arrived is taken with it), or the feed
        listens again after it lost its session; False when nothing came."""
        deadline = time.monotonic() + timeout
        if self._conn is None and not self._listen(deadline):
            return False
        if self._newly_listening:
            self._newly_listening = False
            return True
        import psycopg

        assert self._conn is not None
        try:
            came = any(True for _ in self._conn.notifies(timeout=max(0.0, timeout), stop_after=1))
            if came:  # the rest of a burst (a push's transactions) with it
                for _ in self._conn.notifies(timeout=0.0):
                    pass
            return came
        except psycopg.Error as exc:
            self._lost(pg_connection.reason(exc))
            return False

    _newly_listening = False
    """Listening again after a loss, not yet said."""

    def _listen(self, deadline: float) -> bool:
        """A new listening session, unless the last attempt was too recent; True when it
        listens (and then "changed" is said once)."""
        pause = self._next_try - time.monotonic()
        if pause > 0:
            time.sleep(max(0.0, min(pause, deadline - time.monotonic())))
            if time.monotonic() < self._next_try:
                return False
        try:
            conn = self._open()
            conn.execute(f"LISTEN {CHANGED_CHANNEL}")  # type: ignore[arg-type,unused-ignore]
        except InventoryError as exc:
            self._lost(str(exc))
            return False
        except Exception as exc:  # psycopg's, on the new session: it is lost again
            self._lost(pg_connection.reason(exc))
            return False
        again = self.error is not None  # after a loss: what was committed meanwhile is unseen
        self.reconnects += again
        self._conn, self.error, self._retry = conn, None, 0.0
        self._newly_listening = again
        return True

    def _lost(self, why: str) -> None:
        """The session is gone: closed, and the next attempt scheduled."""
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # already gone with the server
                pass
        self._conn = None
        self.error = why
        self._retry = min(RETRY_MAX, self._retry * 2 or RETRY_FIRST)
        self._next_try = time.monotonic() + self._retry

    def close(self) -> None:
        """End the listening session."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> ChangeFeed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
