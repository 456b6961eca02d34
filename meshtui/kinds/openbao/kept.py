"""OpenBao admin sessions kept between runs of the provisioner inside one long-lived agent.

Opening a session costs a TLS handshake and three reads (the token is alive, AppRole and the KV
mount are there: the preflight that names what is missing), more than the two writes a rotated
secret_id needs. A host agent reconciles one manifest per delivery, so it keeps the session it
opened, for that admin file's text and that scope only, and lends it again. Before a loan one
read proves the session still reaches OpenBao with a live token; when it does not (OpenBao
restarted, the token revoked) the session is closed and a new one opened, whose preflight names
the cause. A session whose run failed is closed, not kept; one idle longer than :data:`IDLE_S`
is closed rather than lent. What a session read in one run is forgotten before the next.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from meshtui.contracts import lent as provisioner_lent
from meshtui.contracts.adapter import Done, Scope, Wanted
from meshtui.kinds.openbao.adapter import KEEPALIVE_S, OpenBaoAdapter

IDLE_S = KEEPALIVE_S
"""Longest a kept session waits for its next loan (as long as its connection is kept)."""

T = TypeVar("T")
Key = tuple[str, Scope]


class Lent(provisioner_lent.Lent[OpenBaoAdapter]):
    """A kept (or new) session on loan: the adapter's calls, and ``close`` giving it back."""

    create_decides = OpenBaoAdapter.create_decides

    def __init__(self, pool: KeptSessions, key: Key, adapter: OpenBaoAdapter) -> None:
        self._pool, self._key, self.adapter = pool, key, adapter
        self.failed = False

    def _use(self, call: Callable[[OpenBaoAdapter], T]) -> T:
        try:
            return call(self.adapter)
        except BaseException:
            self.failed = True
            raise

    def create_many(self, batch: Sequence[Wanted]) -> dict[str, Done | Exception]:
        """See :meth:`OpenBaoAdapter.create_many` (a login's error marks the loan failed)."""
        done = super().create_many(batch)
        if any(isinstance(d, Exception) for d in done.values()):
            self.failed = True
        return done

    def close(self) -> None:
        """Give the session back (closed instead when its run failed)."""
        self._pool.give_back(self._key, self.adapter, keep=not self.failed)


class KeptSessions:
    """At most one idle session per (admin file's text, manifest scope); thread-safe. Its
    :meth:`open` is the kind's ``AdapterFactory`` in an agent (``Kind.kept``)."""

    def __init__(self) -> None:
        self._idle: dict[Key, tuple[OpenBaoAdapter, float]] = {}
        self._lock = threading.Lock()

    def open(self, conninfo: str, scope: Scope) -> Lent:
        """The kept session for ``scope``, proved alive, or a new one (its preflight run)."""
        key = (conninfo, scope)
        with self._lock:
            found = self._idle.pop(key, None)
        if found is not None:
            adapter, since = found
            if time.monotonic() - since <= IDLE_S and adapter.alive():
                return Lent(self, key, adapter)
            adapter.close()
        return Lent(self, key, OpenBaoAdapter(conninfo, scope))

    def give_back(self, key: Key, adapter: OpenBaoAdapter, *, keep: bool) -> None:
        """Keep ``adapter`` for the next loan of ``key`` (closing any other idle one for it and
        every one idle too long), or close it when ``keep`` is False."""
        if not keep:
            adapter.close()
            return
        adapter.forget()
        now = time.monotonic()
        with self._lock:
            old = [a for k, (a, since) in self._idle.items() if k == key or now - since > IDLE_S]
            self._idle = {
                k: (a, since)
                for k, (a, since) in self._idle.items()
                if k != key and now - since <= IDLE_S
            }
            self._idle[key] = (adapter, now)
        for stale in old:
            stale.close()
