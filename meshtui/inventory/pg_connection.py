"""The inventory's connection to PostgreSQL: read from a checked conninfo file, bounded in time,
refused when the server cannot take writes, and shaped like ``sqlite3``'s so the store runs
each statement on either engine.

The conninfo file is read as the provisioner reads its admin file (private, owned by this user
or root, through checked folders, never a link another user controls). Its password appears in
no message: the server is named as ``host:port/dbname`` only. ``connect_timeout`` is set
(:data:`CONNECT_TIMEOUT` unless the file says otherwise), so an unreachable server fails in
seconds rather than libpq's minutes per host. ``psycopg`` is imported here and only when a
PostgreSQL inventory is opened.
"""

from __future__ import annotations

import functools
import hashlib
import secrets
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from meshtui.contracts.provider_files import read_admin
from meshtui.errors import InventoryError
from meshtui.inventory.engine import BEGIN_WRITE_STATEMENTS, CHANGED_CHANNEL, POSTGRES, Dialect

if TYPE_CHECKING:
    import psycopg

CONNECT_TIMEOUT = 5
"""Seconds libpq waits for each connection attempt, unless the conninfo file names its own."""

LOCK_TIMEOUT_MS = 10000
"""How long a write waits for another writer (SQLite's busy timeout is the same 10 s)."""


def read_conninfo(path: Path) -> str:
    """The conninfo in ``path``, checked as the provisioner's admin file; InventoryError naming
    the file otherwise (its text never)."""
    return read_admin(Path(path), "inventory conninfo file", InventoryError)


def server_name(conninfo: str) -> str:
    """``host:port/dbname`` of a conninfo (several hosts: each, comma-separated); no password."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        params = conninfo_to_dict(conninfo)
    except Exception:  # a malformed conninfo: its text may hold the password, so none of it
        return "(unreadable conninfo)"
    hosts = str(params.get("host") or params.get("hostaddr") or "localhost").split(",")
    ports = str(params.get("port") or "5432").split(",")
    ports = ports * len(hosts) if len(ports) == 1 else ports
    db = params.get("dbname") or params.get("user") or ""
    return ",".join(f"{h}:{p}" for h, p in zip(hosts, ports, strict=False)) + f"/{db}"


def reason(exc: BaseException) -> str:
    """libpq's message in one line, without what it repeats of the conninfo; its lines
    (the failure, then libpq's hint) kept apart by a semicolon."""
    lines = (" ".join(line.split()) for line in str(exc).splitlines())
    text = "; ".join(line for line in lines if line)
    if "failed: " in text:
        text = text.split("failed: ", 1)[1]
    return text or type(exc).__name__


@dataclass(frozen=True)
class Settings:
    """What a connection to the inventory is opened with, read from the conninfo file."""

    path: Path
    conninfo: str
    """The file's conninfo with ``connect_timeout``, ``application_name`` and the cut-link
    limits (:func:`link_settings`) set where it names none."""
    server: str
    """``host:port/dbname`` of each host, for messages (no password)."""
    patience: float
    """Seconds finding a server may take at most: ``connect_timeout`` × the hosts named."""


def link_settings(timeout_s: float) -> dict[str, str]:
    """libpq settings that end a connection whose link is cut within about ``timeout_s``:
    ``tcp_user_timeout`` for data the server never acknowledges, and keepalives probing an
    idle connection (one waiting for an answer whose question was acknowledged) every second
    after ``timeout_s`` of silence, where the system's default waits two hours."""
    seconds = max(1, round(timeout_s))
    return {
        "tcp_user_timeout": str(int(timeout_s * 1000)),
        "keepalives": "1",
        "keepalives_idle": str(seconds),
        "keepalives_interval": "1",
        "keepalives_count": str(seconds),
    }


def settings(path: Path) -> Settings:
    """The conninfo file ``path`` read and checked; InventoryError naming it otherwise."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    text = read_conninfo(path)
    server = server_name(text)
    try:
        params = conninfo_to_dict(text)
    except psycopg.Error:
        raise InventoryError(
            f"{path}: not a libpq conninfo (write key=value pairs or a postgresql:// URI)"
        ) from None
    params.setdefault("connect_timeout", str(CONNECT_TIMEOUT))
    params.setdefault("application_name", "meshtui")
    try:
        timeout = max(1.0, float(str(params["connect_timeout"])))
    except ValueError:
        raise InventoryError(
            f"{path}: connect_timeout is not a number of seconds (write connect_timeout=5)"
        ) from None
    for key, value in link_settings(timeout).items():  # a cut link ends in seconds, not hours
        params.setdefault(key, value)
    hosts = len(str(params.get("host") or params.get("hostaddr") or "").split(","))
    return Settings(Path(path), make_conninfo("", **params), server, timeout * hosts)


def opened(found: Settings, *, read_only: bool) -> psycopg.Connection[Any]:
    """A new connection as :func:`connect` describes it (not wrapped)."""
    import psycopg

    try:
        raw = psycopg.connect(found.conninfo, autocommit=True)
    except psycopg.Error as exc:
        raise InventoryError(
            f"inventory on PostgreSQL {found.server}: cannot connect ({reason(exc)}); "
            f"nothing was sent to any node (conninfo file {found.path})"
        ) from None
    try:
        prepare(raw, read_only=read_only)
        check(raw, found.server)
    except BaseException:
        raw.close()
        raise
    return raw


def prepare(raw: psycopg.Connection[Any], *, read_only: bool) -> None:
    """A new session made ready for the store: values written as ``sqlite3`` writes them, a
    bounded wait for other writers, no JIT compilation, (``read_only``) every transaction
    read-only, and its :func:`history` learnt. JIT pays off for long analytic queries only:
    the inventory's are short, and a planner without statistics (a new database) estimated the
    kept status read high enough to compile it, a second per statement."""
    _as_sqlite_stores(raw)
    raw.execute(f"SET lock_timeout = {LOCK_TIMEOUT_MS}")
    raw.execute("SET jit = off")
    if read_only:
        raw.execute("SET default_transaction_read_only = on")
    _learn_history(raw)


HISTORY_SQL = (
    "SELECT concat_ws(':', s.system_identifier, substr(pg_walfile_name(pg_current_wal_lsn()), "
    "1, 8), d.oid, d.xmin) FROM pg_database d, pg_control_system() s "
    "WHERE d.datname = current_database()"
)
"""Where in its database's history a session is: the cluster (its system identifier; a new
``initdb``, a dump restored into it, is another), the WAL timeline (a standby's promotion or a
point-in-time recovery starts a new one, and may lack what the old one wrote last) and the
database (its oid, and its catalog row's xmin: a database made again, even given the same oid,
is another). None of them changes under an open session: a primary's timeline changes only
through a restart, a session on a standby is refused (:func:`check`), a dropped database ends
its sessions."""

CATALOG_HISTORY_SQL = (
    "SELECT concat_ws(':', d.oid, d.xmin) FROM pg_database d WHERE d.datname = current_database()"
)
"""What of :data:`HISTORY_SQL` a server that refuses its functions still tells (one without a
WAL of its own to name, or a role denied them)."""

_histories: weakref.WeakKeyDictionary[psycopg.Connection[Any], int] = weakref.WeakKeyDictionary()


def _learn_history(raw: psycopg.Connection[Any]) -> None:
    """Read and keep the new session ``raw``'s :func:`history` (autocommit, nothing open: a
    refused statement leaves nothing behind)."""
    import psycopg

    for sql in (HISTORY_SQL, CATALOG_HISTORY_SQL):
        try:
            row = raw.execute(sql).fetchone()  # type: ignore[arg-type,unused-ignore]  # ours
        except psycopg.Error:
            continue
        if row is not None and row[0]:
            digest = hashlib.blake2b(str(row[0]).encode(), digest_size=8).digest()
            _histories[raw] = int.from_bytes(digest) >> 1
            return
    _histories[raw] = secrets.randbits(63)


def history(raw: psycopg.Connection[Any]) -> int:
    """A number (63 bits) for where in its database's history the session ``raw`` is
    (:data:`HISTORY_SQL`): the status read mixes it into its mark, so a status kept (in memory,
    or the status image) is never brought up to date on another history of the database, whose
    clock may have ticked past the mark through other writes. A session whose history could
    not be read has a number of its own, equal to no other's."""
    found = _histories.get(raw)
    if found is None:
        found = _histories.setdefault(raw, secrets.randbits(63))
    return found


def connect(path: Path, *, read_only: bool) -> PgConnection:
    """A connection of its own to the inventory's PostgreSQL named by the conninfo file
    ``path`` (one-shot commands; a process whose threads each open the inventory checks one
    out of a pool instead, :mod:`~meshtui.inventory.pg_pool`).

    InventoryError naming the server (never the password) when it cannot be reached, refuses
    the login, or cannot take writes (:func:`check`); ``read_only``: every transaction of this
    session is read-only.
    """
    found = settings(path)
    return PgConnection(
        opened(found, read_only=read_only),
        found.server,
        functools.partial(opened, found, read_only=read_only),
    )


READ_ONLY_SQL = (
    "SELECT pg_is_in_recovery() OR (SELECT reset_val = 'on' FROM pg_settings"
    " WHERE name = 'default_transaction_read_only')"
)
"""True when the server cannot take this session's writes: a standby, or read-only by default
(the server's, the database's or the role's; not a ``SET`` of the session's own)."""


def check(conn: psycopg.Connection[Any], server: str) -> None:
    """InventoryError unless ``conn`` answers and can take writes: a hot standby (or a server
    read-only by default) is refused even for a read, whose answer may be behind the primary's
    (psycopg's own checks do not notice a primary that became a read-only standby). A session
    this process made read-only itself (:func:`prepare`) is judged by the server's default,
    which a reload (``ALTER SYSTEM``) changes under an open session too."""
    import psycopg

    try:
        row = conn.execute(READ_ONLY_SQL).fetchone()
    except psycopg.Error as exc:
        raise InventoryError(
            f"inventory on PostgreSQL {server}: the server does not answer ({reason(exc)})"
        ) from None
    if row is not None and row[0]:
        raise InventoryError(
            f"inventory on PostgreSQL {server}: the server is read-only (a hot standby, or "
            "default_transaction_read_only); point the conninfo file at the primary, or add "
            "target_session_attrs=read-write with every host; nothing was sent to any node"
        )


def _as_sqlite_stores(conn: psycopg.Connection[Any]) -> None:
    """Values written as ``sqlite3`` writes them: a bool as 0 or 1 (the flag columns are
    integers on both engines), a str or int enum as its value (psycopg's default is its name)."""
    import enum

    from psycopg.types.numeric import Int8Dumper
    from psycopg.types.string import StrDumper

    class BoolAsInt(Int8Dumper):
        def dump(self, obj: Any) -> bytes:
            return b"1" if obj else b"0"

    conn.adapters.register_dumper(bool, BoolAsInt)
    conn.adapters.register_dumper(enum.StrEnum, StrDumper)
    conn.adapters.register_dumper(enum.IntEnum, Int8Dumper)


@functools.lru_cache(maxsize=512)
def _placeholders(sql: str) -> str:
    """``sql`` with SQLite's ``?`` placeholders as psycopg's ``%s`` (a literal ``%`` doubled)."""
    return sql.replace("%", "%%").replace("?", "%s")


class PgConnection:
    """A psycopg connection answering the calls the store makes of a ``sqlite3`` connection:
    ``execute``/``executemany`` with ``?`` placeholders, ``in_transaction``, ``rollback``, and
    ``with conn:`` committing (or rolling back) the transaction the store began."""

    dialect: Dialect = POSTGRES

    def __init__(
        self,
        raw: psycopg.Connection[Any],
        server: str,
        reopen: Callable[[], psycopg.Connection[Any]] | None = None,
        release: Callable[[psycopg.Connection[Any]], None] | None = None,
    ) -> None:
        self.raw = raw
        self.server = server
        self._reopen = reopen
        self._release = release
        """What gives a connection back (to its pool); None: it is closed."""

    def execute(self, sql: str, params: Sequence[object] | None = None) -> psycopg.Cursor[Any]:
        """Run one statement; a connection found broken between transactions (the server
        restarted, the link was cut and is back) is opened anew, once, and the statement sent
        again: nothing of a transaction is lost then, since none was open."""
        import psycopg

        idle = self._fresh_if_broken()
        try:
            return self._execute(sql, params)
        except psycopg.OperationalError:
            if not (idle and self.raw.broken and self._reopen is not None):
                raise
            self._replace()
            return self._execute(sql, params)

    @property
    def history(self) -> int:
        """:func:`history` of the session in use now."""
        return history(self.raw)

    def reads_generic(
        self, reads: Sequence[tuple[str, Sequence[object]]]
    ) -> list[list[tuple[Any, ...]]]:
        """The rows of each read, in one read-only transaction (one snapshot) and one round
        trip, each sent prepared and planned once for every parameter (a generic plan). For
        reads whose planning costs more than their run (the kept status read: planned in
        ~0.5 ms, run in ~0.2 ms), which PostgreSQL would otherwise plan anew at every run,
        finding its generic plan's estimate no better than a custom one's."""
        import psycopg

        self._open_if_closed()
        if self.in_transaction:  # inside the caller's transaction: its snapshot, as it is
            return [self._execute(sql, params).fetchall() for sql, params in reads]
        try:
            with self.raw.pipeline():
                self.raw.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                self.raw.execute("SET LOCAL plan_cache_mode = force_generic_plan")
                cursors = [
                    self.raw.execute(_placeholders(sql), list(params), prepare=True)
                    for sql, params in reads
                ]
                self.raw.execute("COMMIT")
            return [cur.fetchall() for cur in cursors]
        except psycopg.Error:
            self.rollback()
            raise

    @contextmanager
    def writing(self) -> Iterator[None]:
        """One write transaction (the writer lock first, as :data:`~meshtui.inventory.engine.
        POSTGRES`'s ``begin_write``), its statements sent without waiting for each answer
        (psycopg's pipeline mode): only a statement whose rows the writer reads waits, and the
        ``NOTIFY`` of :data:`~meshtui.inventory.engine.CHANGED_CHANNEL` and the ``COMMIT`` go
        with whatever is still unsent: a rotation's three transactions make five round trips
        to the server, where one statement at a time made sixteen. Committed when the block ends,
        rolled back when it raises (what was sent is undone with the transaction)."""
        self._open_if_closed()
        try:
            with self.raw.pipeline():
                for statement in BEGIN_WRITE_STATEMENTS:
                    self.raw.execute(statement)  # type: ignore[arg-type,unused-ignore]  # ours
                yield
                self.raw.execute(f"NOTIFY {CHANGED_CHANNEL}")  # type: ignore[arg-type,unused-ignore]
                self.raw.execute("COMMIT")
        except BaseException:
            try:
                self.rollback()
            except Exception:  # the connection is gone: the server rolled back
                pass
            raise

    def _open_if_closed(self) -> None:
        """Open anew, before a pipelined write, a connection the server closed while it was
        idle (a restart; a link cut and back): a pipeline learns that only at its first
        answer, after the writer's own work began, too late to send it again. The server's
        goodbye (or the end of the stream) makes the idle socket readable: looked at without
        waiting, and only then one statement sent the way :meth:`execute` sends it."""
        import select

        if self._reopen is None or not self._fresh_if_broken():
            return
        try:
            ready = bool(select.select([self.raw.fileno()], [], [], 0)[0])
        except (OSError, ValueError):
            ready = True
        if ready:
            self.execute("SELECT 1")

    def _execute(self, sql: str, params: Sequence[object] | None) -> psycopg.Cursor[Any]:
        if params:
            return self.raw.execute(_placeholders(sql), list(params))
        return self.raw.execute(sql)  # type: ignore[arg-type,unused-ignore]  # the store's text

    def _fresh_if_broken(self) -> bool:
        """Open anew a connection that broke (its transaction is gone with it); True when no
        transaction is open now."""
        if self.raw.broken and self._reopen is not None:
            self._replace()
        return not self.in_transaction

    def _replace(self) -> None:
        """A new connection in place of the broken one, which is given back (or closed)."""
        assert self._reopen is not None
        broken, self.raw = self.raw, self._reopen()
        self._give_back(broken)

    def _give_back(self, raw: psycopg.Connection[Any]) -> None:
        if self._release is not None:
            self._release(raw)
        else:
            raw.close()

    def executemany(self, sql: str, rows: Iterable[Sequence[object]]) -> None:
        rows = list(rows)
        if rows:
            with self.raw.cursor() as cur:
                cur.executemany(_placeholders(sql), rows)

    @property
    def in_transaction(self) -> bool:
        from psycopg.pq import TransactionStatus

        return self.raw.info.transaction_status != TransactionStatus.IDLE

    def commit(self) -> None:
        if self.in_transaction:
            self.raw.execute("COMMIT")

    def rollback(self) -> None:
        if self.in_transaction and not self.raw.closed:
            self.raw.execute("ROLLBACK")

    def close(self) -> None:
        self._give_back(self.raw)

    def __enter__(self) -> PgConnection:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if kind is None:
            self.commit()
        else:
            try:
                self.rollback()
            except Exception:  # the connection is gone: the server rolled back
                pass


def engine_errors() -> tuple[type[Exception], ...]:
    """The errors a PostgreSQL statement raises."""
    import psycopg

    return (psycopg.Error,)


def failed(where: str, action: str, exc: BaseException) -> InventoryError:
    """The one line a failed PostgreSQL statement becomes: names the server and what to do."""
    import psycopg
    from psycopg import errors

    why = reason(exc)
    if isinstance(exc, errors.ReadOnlySqlTransaction):
        return InventoryError(
            f"{where}: {action} failed: the server is read-only (a hot standby?); point the "
            "conninfo file at the primary; nothing was written"
        )
    if isinstance(exc, errors.LockNotAvailable):
        return InventoryError(
            f"{where}: {action} waited {LOCK_TIMEOUT_MS // 1000} s for another writer of the "
            "inventory and gave up; nothing was written (try again)"
        )
    if isinstance(exc, psycopg.IntegrityError):
        return InventoryError(
            f"{where}: {action} conflicts with what is stored ({why}); nothing was written "
            "(run meshtui push, then try again)"
        )
    if isinstance(exc, psycopg.OperationalError):
        return InventoryError(
            f"{where}: {action} failed: the server cannot be reached ({why}); nothing was written"
        )
    return InventoryError(f"{where}: {action} failed: {why}")
