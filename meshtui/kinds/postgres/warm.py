"""Admin sessions kept open between runs of the provisioner inside one long-lived process.

Opening a session costs a SCRAM login and three reads (who the admin is, which settings it can
lower); a host agent reconciles one manifest per delivery, so it keeps the sessions it opened
and lends them out again. A kept session is checked before each loan: it must be open and idle
(no transaction left behind), else it is closed and a new one opened. Its settings are read
again (the quiet plan, so a setting turned loud since is never missed) in the loan's first round
trip, with the inspection's or the write's lookups; should that find the session gone (the
server restarted, the backend ended), a new one is opened and the call made again on it. A
session idle for longer than :data:`IDLE_S` is closed rather than lent.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

import psycopg
from psycopg.pq import TransactionStatus

from meshtui.contracts import lent as provisioner_lent
from meshtui.contracts.adapter import Scope
from meshtui.kinds.postgres.adapter import PostgresAdapter

IDLE_S = 300.0
KEEP = 2
"""At most this many idle sessions per (admin, scope): the harness uses two at most."""


T = TypeVar("T")


class Lent(provisioner_lent.Lent[PostgresAdapter]):
    """A kept session on loan: an adapter whose ``close`` gives it back to its pool.

    Should a kept session be found gone by the loan's first round trip (the one that reads its
    settings again), a new session is opened and the call made again on it, as a check before
    the loan would have done."""

    def __init__(self, pool: WarmSessions, key: tuple[str, Scope], adapter: PostgresAdapter):
        self._pool, self._key, self.adapter = pool, key, adapter

    def _use(self, call: Callable[[PostgresAdapter], T]) -> T:
        unproven = self.adapter.stale  # nothing read on it yet in this loan
        try:
            return call(self.adapter)
        except psycopg.OperationalError:
            if not (unproven and self.adapter.conn.closed):
                raise  # the statement failed, or the session died during the loan
        self.adapter.close()
        self.adapter = PostgresAdapter(*self._key)
        return call(self.adapter)

    @property
    def create_decides(self) -> bool:
        """See :attr:`PostgresAdapter.create_decides`."""
        return self.adapter.create_decides

    @property
    def limits(self) -> list[str]:
        """What this admin cannot do (see :attr:`PostgresAdapter.limits`)."""
        return self._use(lambda a: a.limits)

    def close(self) -> None:
        """Give the session back (or close it when it is not fit to be lent again)."""
        self._pool.give_back(self._key, self.adapter)


class WarmSessions:
    """A small pool of admin sessions keyed by (admin conninfo, manifest scope); thread-safe."""

    def __init__(self) -> None:
        self._idle: dict[tuple[str, Scope], list[tuple[PostgresAdapter, float]]] = {}
        self._lock = threading.Lock()

    def open(self, conninfo: str, scope: Scope) -> Lent:
        """A healthy kept session for ``scope``, or a new one (an AdapterFactory)."""
        key = (conninfo, scope)
        while True:
            with self._lock:
                idle = self._idle.get(key, [])
                adapter, since = idle.pop() if idle else (None, 0.0)
            if adapter is None:
                return Lent(self, key, PostgresAdapter(conninfo, scope))
            if time.monotonic() - since <= IDLE_S and _healthy(adapter):
                return Lent(self, key, adapter)
            adapter.close()

    def give_back(self, key: tuple[str, Scope], adapter: PostgresAdapter) -> None:
        """Keep ``adapter`` for the next loan when it is idle and open; else close it."""
        adapter.close_others()
        conn = adapter.conn
        if conn.closed or conn.info.transaction_status != TransactionStatus.IDLE:
            adapter.close()
            return
        with self._lock:
            idle = self._idle.setdefault(key, [])
            if len(idle) < KEEP:
                idle.append((adapter, time.monotonic()))
                return
        adapter.close()

    def close(self) -> None:
        """Close every kept session."""
        with self._lock:
            kept, self._idle = self._idle, {}
        for idle in kept.values():
            for adapter, _ in idle:
                adapter.close()


def _healthy(adapter: PostgresAdapter) -> bool:
    """Open and idle; its settings are to be read again and what it assumed is forgotten."""
    if adapter.conn.closed or adapter.conn.info.transaction_status != TransactionStatus.IDLE:
        return False
    adapter.refresh_later()
    return True
