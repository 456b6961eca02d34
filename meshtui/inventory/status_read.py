"""Status's read of the pairs: every pair, the named ones, or only those written since a mark.

Status reads every pair on every refresh, and most of that read is the ``sqlite3`` module making
Python values (~240,000 at 10,000 pairs) and status making a state of each. A reader that read
every pair keeps what it made and a :class:`~meshtui.inventory.rows.StatusMark`; its next read
asks for the pairs the schema's status clock ticked since (``status_ticks``, set by triggers in
the statement that writes a pair, a delivery or a probe, in whichever process), an index range:
one delivery recorded, one pair read. A pair added or deleted, or a static column written (the
pairs' stamp), another file (the epoch), a clock behind the mark, or a read inside a write
transaction (what it sees may yet be rolled back) reads every pair again. On PostgreSQL the
mark also names where in the database's history the session read it
(:func:`~meshtui.inventory.pg_connection.history`): a promoted standby that lacks the old
primary's last writes, a point-in-time recovery, a restore into a new cluster or a database made
again from a copy (even given its oid back) is another history, whose clock may tick past the
mark through other writes. Not seen: an older image of this same SQLite file copied over it in
place, then written past the mark before the next read (no meshtui command writes a file in
place: restore fills an empty folder).
"""

from __future__ import annotations

import json
import operator
import sqlite3
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, cast

from meshtui.inventory.engine import POSTGRES, dialect
from meshtui.inventory.rows import StatusChanges, StatusMark, StatusRow

if TYPE_CHECKING:
    from meshtui.inventory.pg_connection import PgConnection

STATUS_SQL = """
SELECT p.id, p.provision, p.consumer, p.provider, p.login, p.file, p.generation, p.created_at,
       p.rotated_at, p.withdrawn_at,
       e.consumer_generation, e.consumer_error, e.provider_generation, e.provider_error,
       pr.verdict, CASE WHEN pr.verdict = 'accepted' THEN NULL ELSE pr.reason END AS reason,
       pr.at AS probed_at, pr.generation AS probe_generation, pr.loopback,
       pr.client_addr, pr.withdrawn AS probe_withdrawn, pr.latency_ms, pr.used_password,
       CASE WHEN e.provider_error IS NOT NULL THEN e.provider_attempted_at END
         AS provider_attempted_at
FROM pairs p
LEFT JOIN pair_ends e ON e.pair = p.id
LEFT JOIN probes pr ON pr.id = e.probe
"""
"""One row per pair, in :data:`~meshtui.inventory.rows.StatusRow`'s column order: its ends and
newest probe found through ``pair_ends``, which the schema's triggers keep in step with
``deliveries`` and ``probes`` (one lookup per pair instead of three searches). Two columns are
read only where a state can use them, so the common row makes no string for them: a probe's
reason when it did not log in, and the provider end's last attempt when it holds an error."""

MARK_SQL = "SELECT c.epoch, s.stamp, c.tick FROM status_clock c, pairs_stamp s"

TICKED_COUNT_SQL = "SELECT count(*) FROM status_ticks WHERE tick > ?"

CHANGED_SQL = (
    STATUS_SQL + "WHERE p.id IN (SELECT pair FROM status_ticks WHERE tick > ? UNION {named})"
)
"""The pairs ticked since a mark and those named (a JSON array, read as the engine's
:attr:`~meshtui.inventory.engine.Dialect.json_values`), through the tick index."""

AT_ONCE_SQL = f"""
WITH m AS ({MARK_SQL}),
     ch AS (SELECT pair FROM status_ticks WHERE tick > ? UNION {{named}}),
     n AS (SELECT count(*) AS n FROM ch)
SELECT m.epoch, m.stamp, m.tick, n.n, r.*
FROM m CROSS JOIN n
LEFT JOIN LATERAL (SELECT r1.* FROM ch CROSS JOIN LATERAL ({STATUS_SQL} WHERE p.id = ch.pair
                                                             OFFSET 0) r1
                   WHERE m.epoch = ? AND m.stamp = ? AND m.tick >= ? AND n.n <= ?) r ON true
"""
"""PostgreSQL's kept read in one statement (one round trip, one snapshot): the mark, how many
pairs changed since the reader's mark (with those named), and, while that mark holds and at
most :data:`FEW_CHANGED` changed, their rows; one row of the mark alone (its status columns
empty) otherwise. Every statement a reader waits for is a round trip to the server, where
SQLite answers in microseconds: the five of the general path cost more than the rows. Each
changed pair is one lookup (``OFFSET 0`` keeps the planner from joining the changed set, whose
size it cannot know, to every pair by a hash: a scan of the whole table)."""

FEW_CHANGED = 64
MOST_CHANGED = 4
"""Up to :data:`FEW_CHANGED` pairs changed since the mark, or up to one in
:data:`MOST_CHANGED`, only those are read (a lookup each); past that, every pair (in table order,
no lookup per pair)."""

_id = operator.itemgetter(0)


def every(conn: sqlite3.Connection) -> list[StatusRow]:
    """Every pair, sorted by id: the table read in its own order and sorted here (SQLite's
    BINARY order of UTF-8 text is Python's order of str), instead of the id index walked with a
    seek into the table per pair (~10 % of the read at 10,000 pairs)."""
    rows: list[StatusRow] = conn.execute(STATUS_SQL).fetchall()
    rows.sort(key=_id)
    return rows


def named(
    conn: sqlite3.Connection, ids: Sequence[str] | None, limit: int | None
) -> list[StatusRow]:
    """The pairs among ``ids`` (None: every pair), sorted by id; ``limit``: only the first that
    many (the id index walked, so the first screenful reads only its rows)."""
    sql = STATUS_SQL
    if ids is not None:
        sql += f"WHERE p.id IN ({dialect(conn).json_values}) "
    sql += "ORDER BY p.id"
    if limit is not None:
        sql += f" LIMIT {max(0, int(limit))}"
    return conn.execute(sql, [] if ids is None else [json.dumps(list(ids))]).fetchall()


def changes(
    conn: sqlite3.Connection, since: StatusMark | None, also: Collection[str] = ()
) -> StatusChanges:
    """Every pair, or (when ``since`` still holds for this file) only the pairs written since
    it and those in ``also``: the mark and the rows read in one transaction (one snapshot)."""
    began = not conn.in_transaction
    if began and since is not None and dialect(conn) is POSTGRES:
        found = _at_once(conn, since, also)
        if found is not None:
            return found
    if began:
        conn.execute(dialect(conn).begin_read)
    try:
        mark = _of_session(conn, StatusMark(*conn.execute(MARK_SQL).fetchone()))
        if (
            began
            and since is not None
            and (since.epoch, since.stamp) == (mark.epoch, mark.stamp)
            and since.tick <= mark.tick
        ):
            (ticked,) = conn.execute(TICKED_COUNT_SQL, [since.tick]).fetchone()
            changed = ticked + len(also)
            if not changed:
                return StatusChanges(mark, False, [])
            if changed <= FEW_CHANGED or changed * MOST_CHANGED <= _count(conn):
                sql = CHANGED_SQL.format(named=dialect(conn).json_values)
                rows = conn.execute(sql, [since.tick, json.dumps(sorted(also))])
                return StatusChanges(mark, False, rows.fetchall())
        return StatusChanges(mark if began else None, True, every(conn))
    finally:
        if began:
            conn.rollback()


def _at_once(
    conn: sqlite3.Connection, since: StatusMark, also: Collection[str]
) -> StatusChanges | None:
    """The pairs changed since ``since`` in one statement (:data:`AT_ONCE_SQL`); None when
    the mark no longer holds or more than :data:`FEW_CHANGED` changed (the general path
    decides then)."""
    sql = AT_ONCE_SQL.format(named=dialect(conn).json_values)
    params = [since.tick, json.dumps(sorted(also)), *_asked(conn, since)]
    (found,) = cast("PgConnection", conn).reads_generic([(sql, [*params, FEW_CHANGED])])
    return _changes_of(since, found, conn)


def _of_session(conn: sqlite3.Connection, mark: StatusMark) -> StatusMark:
    """``mark`` as read on ``conn``, its epoch mixed with where in the database's history the
    session is (PostgreSQL: :func:`~meshtui.inventory.pg_connection.history`), so that a mark
    read on another history (a promoted standby that lacks the old primary's last writes, a
    restore, a database made again) never holds, whatever its clock says since."""
    if dialect(conn) is not POSTGRES:
        return mark
    return StatusMark(mark.epoch ^ cast("PgConnection", conn).history, mark.stamp, mark.tick)


def _asked(conn: sqlite3.Connection, since: StatusMark) -> list[int]:
    """The epoch, stamp and tick :data:`AT_ONCE_SQL` compares with the database's mark:
    ``since`` with this session's history taken out of its epoch (:func:`_of_session`)."""
    return [_of_session(conn, since).epoch, since.stamp, since.tick]


def _changes_of(
    since: StatusMark, found: Sequence[Sequence[object]], conn: sqlite3.Connection
) -> StatusChanges | None:
    """:data:`AT_ONCE_SQL`'s rows (read on ``conn``) as the changes since ``since``, or None
    (see :func:`_at_once`)."""
    epoch, stamp, tick, changed = cast("tuple[int, int, int, int]", found[0][:4])
    mark = _of_session(conn, StatusMark(epoch, stamp, tick))
    if (
        (since.epoch, since.stamp) != (mark.epoch, stamp)
        or since.tick > tick
        or changed > FEW_CHANGED
    ):
        return None
    rows = [cast(StatusRow, tuple(row[4:])) for row in found if row[4] is not None]
    return StatusChanges(mark, False, rows)


ROTATION_COLUMNS = (
    "id", "started_at", "finished_at", "state", "items", "outcome", "reason", "owner_pid"
)  # fmt: skip
"""A rotation's row: :class:`~meshtui.inventory.rows.RotationRow`'s keys."""

OPEN_ROTATIONS_SQL = (
    f"SELECT {', '.join(ROTATION_COLUMNS)} FROM rotations WHERE finished_at IS NULL ORDER BY id"
)

ROTATING_PAIRS = """
UNION SELECT CAST(json_array_elements(CAST(items AS json)) ->> 'pair' AS text) COLLATE "C"
FROM rotations WHERE finished_at IS NULL"""
"""PostgreSQL: the pairs of every open rotation, added to those a kept read reads again (a
rotation begun or ended changes its pairs' state; the reader cannot yet know which did)."""


def kept_at_once(
    conn: sqlite3.Connection, since: StatusMark, also: Collection[str], kinds_sql: str
) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]], StatusChanges | None]:
    """PostgreSQL's kept read in one round trip and one snapshot: the open rotations' rows
    (:data:`OPEN_ROTATIONS_SQL`), the provider specs (``kinds_sql``) and :func:`_at_once`'s
    changes since ``since`` with ``also`` and every pair of an open rotation (None when the
    mark no longer holds or too many changed)."""
    sql = AT_ONCE_SQL.format(named=dialect(conn).json_values + ROTATING_PAIRS)
    params = [since.tick, json.dumps(sorted(also)), *_asked(conn, since)]
    rotations, kinds, found = cast("PgConnection", conn).reads_generic(
        [(OPEN_ROTATIONS_SQL, []), (kinds_sql, []), (sql, [*params, FEW_CHANGED])]
    )
    return rotations, kinds, _changes_of(since, found, conn)


def _count(conn: sqlite3.Connection) -> int:
    """How many pairs there are."""
    return int(conn.execute("SELECT count(*) FROM pairs").fetchone()[0])
