"""The leader lease: one row per turn (``deliver``, ``watch``) in PostgreSQL, with an epoch,
read and written only in the database's clock.

Acquire and renew are each one statement evaluated by the server (``clock_timestamp()``, the
server's clock at that moment; never a controller's clock, which may be wrong or paused). A
row whose ``expires_at`` has passed may be taken by anyone, and taking it adds one to its
epoch, so every holding has an epoch no earlier holding had: the agents keep the highest they
accepted and refuse a lower one. :func:`check` runs inside a delivering write's own
transaction and locks the row ``FOR SHARE``: a takeover's ``UPDATE`` then waits until that
write commits, so no write of a holder lands after another took its place (``FOR KEY SHARE``
would not make it wait).

Every statement of the lease is here; a caller passes a psycopg connection (its own for
acquire and renew, autocommit; the inventory's, inside its transaction, for :func:`check`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import class_row

from meshtui.errors import InventoryError, LeaseLostError
from meshtui.inventory import pg_connection
from meshtui.inventory.pg_connection import link_settings

T = TypeVar("T")

DELIVER = "deliver"
"""The turn every delivering action takes (push, rotate, drill, secret rotate, recovery)."""
WATCH = "watch"
"""The turn of the leading ``meshtui watch``: held for as long as it leads."""

TABLE = """
CREATE TABLE IF NOT EXISTS lease (
    name text PRIMARY KEY,
    holder text NOT NULL,
    host text NOT NULL,
    pid integer NOT NULL,
    action text NOT NULL,
    since timestamptz NOT NULL,
    epoch bigint NOT NULL,
    expires_at timestamptz NOT NULL
)
"""
"""The lease table, made by :func:`ensure_table` on first use rather than by a schema step: the
two engines' migrations are one numbered list (a step exists on both), and SQLite has no
lease; a step of its own would make every older controller refuse both engines' inventories
for a table only PostgreSQL uses."""

TABLE_LOCK = 0x6D657368_6C656173  # "meshleas": the advisory lock the table's creators take
"""One number no other lock of the inventory's database uses."""

_COLUMNS = (
    "name, holder, host, pid, action, since, epoch, expires_at, "
    "extract(epoch FROM expires_at - clock_timestamp())::float8 AS left_s"
)


@dataclass(frozen=True)
class Claimant:
    """Who asks for a turn: the controller's name, and the process on its machine."""

    controller: str
    host: str
    pid: int


@dataclass(frozen=True)
class LeaseRow:
    """A turn's row as the server sees it now: who holds it, since when, its epoch, and the
    seconds left on it by the server's clock (0 or less: expired, anyone may take it)."""

    name: str
    holder: str
    host: str
    pid: int
    action: str
    since: datetime
    epoch: int
    expires_at: datetime
    left_s: float

    @property
    def live(self) -> bool:
        """True while the holder's lease has not run out."""
        return self.left_s > 0

    def who(self) -> str:
        """The holder in one phrase: ``controller ctl-a (host a1, pid 12: rotate, since …,
        epoch 4)``, as a busy message or ``status`` names it."""
        since = self.since.isoformat(timespec="seconds")
        return (
            f"controller {self.holder} (host {self.host}, pid {self.pid}: {self.action}, "
            f"since {since}, epoch {self.epoch})"
        )


def ensure_table(conn: psycopg.Connection[Any]) -> None:
    """Create the lease table when it is not there yet (looked for first: a reader on a
    read-only server or role writes nothing). Creators take turns on a transaction lock:
    ``CREATE TABLE IF NOT EXISTS`` alone lets two at once collide in the catalog."""
    found = conn.execute("SELECT to_regclass('lease') IS NOT NULL").fetchone()
    if found is None or not found[0]:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", [TABLE_LOCK])
            conn.execute(TABLE)


def _fetch(conn: psycopg.Connection[Any], query: str, params: dict[str, object]) -> LeaseRow | None:
    with conn.cursor(row_factory=class_row(LeaseRow)) as cur:
        cur.execute(query.format(columns=_COLUMNS), params)
        return cur.fetchone()


def acquire(
    conn: psycopg.Connection[Any], name: str, me: Claimant, action: str, length_s: float
) -> LeaseRow | None:
    """Take the turn ``name`` for ``length_s`` seconds when it is free or its lease has run out
    (the epoch one higher than the last holding's; 1 for the first); None when another holds it.

    One statement: two claimants at once both reach the row, one takes it, and the other sees
    the new holder's lease and takes nothing. A holder of ``name`` that asks again (a new
    holding of the same controller) also gets a new epoch, only once its lease ran out.
    """
    return _fetch(
        conn,
        "INSERT INTO lease AS l (name, holder, host, pid, action, since, epoch, expires_at) "
        "VALUES (%(name)s, %(holder)s, %(host)s, %(pid)s, %(action)s, clock_timestamp(), 1, "
        "clock_timestamp() + make_interval(secs => %(length)s)) "
        "ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, host = excluded.host, "
        "pid = excluded.pid, action = excluded.action, since = clock_timestamp(), "
        "epoch = l.epoch + 1, expires_at = excluded.expires_at "
        "WHERE l.expires_at <= clock_timestamp() "
        "RETURNING {columns}",
        {
            "name": name,
            "holder": me.controller,
            "host": me.host,
            "pid": me.pid,
            "action": action,
            "length": length_s,
        },
    )


_HELD = (
    "WHERE name = %(name)s AND holder = %(holder)s AND host = %(host)s AND pid = %(pid)s "
    "AND epoch = %(epoch)s AND expires_at > clock_timestamp()"
)
"""The row of one live holding: its turn, its holder's process and its epoch, not run out."""


def _holding(name: str, me: Claimant, epoch: int, **more: object) -> dict[str, object]:
    """The parameters of :data:`_HELD`, and ``more``."""
    return {
        "name": name,
        "holder": me.controller,
        "host": me.host,
        "pid": me.pid,
        "epoch": epoch,
        **more,
    }


def renew(
    conn: psycopg.Connection[Any], name: str, me: Claimant, epoch: int, length_s: float
) -> LeaseRow | None:
    """Push the holding's end ``length_s`` seconds past the server's now, while it still holds
    (same holder, process and epoch, not yet run out); None when it no longer does."""
    return _fetch(
        conn,
        "UPDATE lease SET expires_at = clock_timestamp() + make_interval(secs => %(length)s) "
        f"{_HELD} RETURNING {{columns}}",
        _holding(name, me, epoch, length=length_s),
    )


def raise_epoch(
    conn: psycopg.Connection[Any], name: str, me: Claimant, epoch: int, to: int
) -> LeaseRow | None:
    """Give the holding (``me``, ``epoch``) of ``name`` the epoch ``to`` while it still holds;
    None when it no longer does. A node that accepted ``to - 1`` from a holding this database
    lost (a switch to a standby that had not received it) refuses this one's epoch until then:
    only the row's live holder can raise it, so no two holdings share one."""
    return _fetch(
        conn,
        f"UPDATE lease SET epoch = greatest(epoch, %(to)s) {_HELD} RETURNING {{columns}}",
        _holding(name, me, epoch, to=to),
    )


def timeline(conn: psycopg.Connection[Any]) -> int | None:
    """The server's WAL timeline (a standby's promotion starts a new one: the only switch that
    can lose holdings), read from its current WAL file's name; None when it cannot say."""
    try:
        row = conn.execute("SELECT substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8)").fetchone()
    except psycopg.Error:
        return None
    return int(row[0], 16) if row is not None and row[0] else None


def release(conn: psycopg.Connection[Any], name: str, me: Claimant, epoch: int) -> bool:
    """End the holding now (the row stays, run out, naming its last holder and epoch); False
    when it had already ended or was taken."""
    return (
        _fetch(
            conn,
            f"UPDATE lease SET expires_at = clock_timestamp() {_HELD} RETURNING {{columns}}",
            _holding(name, me, epoch),
        )
        is not None
    )


def read(conn: psycopg.Connection[Any], name: str) -> LeaseRow | None:
    """The turn's row now (None: nobody ever took it)."""
    return _fetch(conn, "SELECT {columns} FROM lease WHERE name = %(name)s", {"name": name})


def check(conn: psycopg.Connection[Any], name: str, me: Claimant, epoch: int) -> None:
    """Inside the caller's transaction: the holding (``me``, ``epoch``) of ``name`` still
    holds, and the row is locked ``FOR SHARE`` until that transaction ends, so a takeover waits
    for its commit. LeaseLostError naming who holds the turn now when it does not.

    The process is part of the holding: after a switch to a standby that had not received a
    holding, another process of the same controller can be given its epoch again."""
    held = conn.execute(
        f"SELECT epoch FROM lease {_HELD} FOR SHARE",
        _holding(name, me, epoch),
    ).fetchone()
    if held is not None:
        return
    now = read(conn, name)
    after = f"{now.who()} took it over" if now is not None and now.live else "its lease ran out"
    raise LeaseLostError(controller=me.controller, epoch=epoch, turn=name, after=after)


def _gone(conn: psycopg.Connection[Any]) -> bool:
    """True when a kept connection can no longer be used: closed, broken, or idle with
    something to read (the server's goodbye, or the end of the stream after a restart), looked
    at without waiting. It is opened anew then, before a statement is sent that would fail."""
    import select

    if conn.closed or conn.broken:
        return True
    try:
        return bool(select.select([conn.fileno()], [], [], 0)[0])
    except (OSError, ValueError):
        return True


class Leases:
    """This process's own connection to the lease table (autocommit, apart from the inventory's
    so a renewal never waits behind a write), opened on first use and again after a failure.

    Every call is bounded: ``connect_timeout``, ``tcp_user_timeout`` and keepalives
    (:func:`link_settings`) make a server that is gone, or a link that is cut, an InventoryError
    naming the server (never the password) in seconds, not libpq's minutes or TCP's hours."""

    def __init__(self, conninfo: str, *, timeout_s: float = 3.0) -> None:
        params = conninfo_to_dict(conninfo)
        self.server = pg_connection.server_name(conninfo)
        params.setdefault("connect_timeout", str(max(1, round(timeout_s))))
        for key, value in link_settings(timeout_s).items():
            params.setdefault(key, value)
        params.setdefault("application_name", "meshtui lease")
        self._conninfo = make_conninfo("", **params)
        self._conn: psycopg.Connection[Any] | None = None
        self._lock = threading.Lock()

    @classmethod
    def from_file(cls, path: Path, *, timeout_s: float = 3.0) -> Leases:
        """The lease table of the PostgreSQL the conninfo file ``path`` names (read and checked
        as the inventory's own, :func:`meshtui.inventory.pg_connection.read_conninfo`)."""
        return cls.from_text(path, pg_connection.read_conninfo(Path(path)), timeout_s=timeout_s)

    @classmethod
    def from_text(cls, path: Path, text: str, *, timeout_s: float = 3.0) -> Leases:
        """The lease table of the PostgreSQL the conninfo ``text`` (read from ``path``, named
        in an error) names."""
        try:
            return cls(text, timeout_s=timeout_s)
        except psycopg.Error:
            raise InventoryError(f"{path}: not a libpq conninfo") from None

    def _run(self, call: Callable[[psycopg.Connection[Any]], T]) -> T:
        with self._lock:  # one call at a time: the check below must not see another's answer
            return self._run_alone(call)

    def _run_alone(self, call: Callable[[psycopg.Connection[Any]], T]) -> T:
        try:
            if self._conn is not None and _gone(self._conn):
                self.close()  # the server ended it while it was idle: a restart, a cut link
            if self._conn is None:
                return call(self._opened())
            try:
                return call(self._conn)
            except psycopg.errors.ReadOnlySqlTransaction:
                # a kept session whose server became read-only since (a switchover fencing
                # the old primary): nothing was done there; asked again where the conninfo
                # finds a server that takes writes, as a session opened now would be
                self.close()
                return call(self._opened())
        except psycopg.Error as exc:
            self.close()
            why = pg_connection.reason(exc)
            raise InventoryError(f"lease on PostgreSQL {self.server}: {why}") from None

    def _opened(self) -> psycopg.Connection[Any]:
        """A new session, kept for the next calls, with the lease table there."""
        self._conn = psycopg.connect(self._conninfo, autocommit=True)
        ensure_table(self._conn)
        return self._conn

    def acquire(self, name: str, me: Claimant, action: str, length_s: float) -> LeaseRow | None:
        """:func:`acquire` on this connection."""
        return self._run(lambda c: acquire(c, name, me, action, length_s))

    def renew(self, name: str, me: Claimant, epoch: int, length_s: float) -> LeaseRow | None:
        """:func:`renew` on this connection."""
        return self._run(lambda c: renew(c, name, me, epoch, length_s))

    def raise_epoch(self, name: str, me: Claimant, epoch: int, to: int) -> LeaseRow | None:
        """:func:`raise_epoch` on this connection."""
        return self._run(lambda c: raise_epoch(c, name, me, epoch, to))

    def timeline(self) -> int | None:
        """:func:`timeline` on this connection."""
        return self._run(timeline)

    def release(self, name: str, me: Claimant, epoch: int) -> bool:
        """:func:`release` on this connection."""
        return self._run(lambda c: release(c, name, me, epoch))

    def read(self, name: str) -> LeaseRow | None:
        """:func:`read` on this connection."""
        return self._run(lambda c: read(c, name))

    def close(self) -> None:
        """Close the connection (the next call opens another)."""
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None
