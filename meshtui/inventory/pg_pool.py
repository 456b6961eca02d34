"""Pools of connections to the inventory's PostgreSQL, for a process whose threads each open
the inventory (the dashboard's workers, the watch's metrics server): a checkout, checked, in
place of a new login per open.

Which and why: a one-shot command (``status``, ``push``, ``rotate``) opens one inventory, uses
one connection and exits; a pool would add its worker threads and idle sessions for nothing, so
it keeps :func:`~meshtui.inventory.pg_connection.connect`'s one connection. A process that
opens the inventory again and again from several threads calls :func:`share` once; from then
on every PostgreSQL inventory it opens checks a connection out of one pool per conninfo (and
read-only or not) and gives it back when closed.

Each checkout is checked: psycopg_pool's own check (the connection still answers) and
:func:`~meshtui.inventory.pg_connection.check` (the server still takes writes). psycopg_pool's
check alone does not notice a primary that became read-only (``default_transaction_read_only``
switched on, or a standby answering after a failover); a connection so refused is closed, so
the pool opens new ones (with several hosts and ``target_session_attrs=read-write``, on the
new primary). When no connection passes within ``connect_timeout`` × hosts, one new connection
is tried outside the pool, so the checkout fails with the very line a one-shot command prints
(cannot connect, the password, read-only), naming the server and never the password.
"""

from __future__ import annotations

import functools
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from meshtui.inventory import pg_connection
from meshtui.inventory.pg_connection import PgConnection, Settings

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

MAX_SIZE = 4
"""Sessions one pool holds at most: the dashboard's workers and its kept status reader."""

_lock = threading.Lock()
_pools: dict[tuple[str, bool], ConnectionPool[psycopg.Connection[Any]]] | None = None
"""The pools of this process, by conninfo and read-only; None until :func:`share`."""


def share() -> None:
    """From now on, this process's PostgreSQL inventories check connections out of pools."""
    global _pools
    with _lock:
        if _pools is None:
            _pools = {}


def sharing() -> bool:
    """Whether :func:`share` was called (and :func:`close` not since)."""
    return _pools is not None


def close() -> None:
    """Close every pool (their sessions end) and stop sharing."""
    global _pools
    with _lock:
        pools, _pools = _pools, None
    for pool in (pools or {}).values():
        pool.close()


def checkout(path: Path, *, read_only: bool) -> PgConnection:
    """A checked connection from this process's pool for the conninfo file ``path`` (made on
    first use); closing the :class:`PgConnection` gives it back. InventoryError naming the
    server when none can be had (see the module's note)."""
    found = pg_connection.settings(path)
    pool = _pool(found, read_only)
    get = functools.partial(_get, pool, found, read_only)
    return PgConnection(get(), found.server, get, functools.partial(_give_back, pool))


def _pool(found: Settings, read_only: bool) -> ConnectionPool[psycopg.Connection[Any]]:
    from psycopg_pool import ConnectionPool

    key = (found.conninfo, read_only)
    with _lock:
        if _pools is None:
            raise RuntimeError("pg_pool.checkout without pg_pool.share()")
        pool = _pools.get(key)
        if pool is None:
            pool = ConnectionPool(
                found.conninfo,
                kwargs={"autocommit": True},
                min_size=1,
                max_size=MAX_SIZE,
                open=False,
                configure=functools.partial(pg_connection.prepare, read_only=read_only),
                check=functools.partial(_check, found.server),
                timeout=found.patience,
                name=f"meshtui inventory {found.server}",
            )
            pool.open(wait=False)
            _pools[key] = pool
    return pool


def _check(server: str, conn: psycopg.Connection[Any]) -> None:
    """psycopg_pool's check, and the server still takes writes; a connection refused for that
    is closed, so the pool does not hand it out again."""
    from psycopg_pool import ConnectionPool

    ConnectionPool.check_connection(conn)
    try:
        pg_connection.check(conn, server)
    except BaseException:
        conn.close()
        raise


def _get(
    pool: ConnectionPool[psycopg.Connection[Any]], found: Settings, read_only: bool
) -> psycopg.Connection[Any]:
    """A checked connection from ``pool``; past its patience, a new one of its own (which
    fails with the one-shot command's line when the server is still unfit)."""
    from psycopg_pool import PoolTimeout

    try:
        return pool.getconn()
    except PoolTimeout:
        return pg_connection.opened(found, read_only=read_only)


def _give_back(pool: ConnectionPool[psycopg.Connection[Any]], raw: psycopg.Connection[Any]) -> None:
    """``raw`` back into ``pool`` (rolled back if a transaction is open), or closed when it is
    one :func:`_get` opened outside the pool."""
    if getattr(raw, "_pool", None) is pool:
        pool.putconn(raw)
    else:
        raw.close()
