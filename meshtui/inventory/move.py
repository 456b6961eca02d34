"""Moving a SQLite inventory into an empty PostgreSQL one: every row of every table, in one
PostgreSQL transaction, so an interrupted move leaves the target as empty as it was.

The tables the schema's triggers keep (``pair_ends``, ``status_ticks``, the status clock and
the pairs' stamp) are not copied: the triggers make them anew as the deliveries, probes and
pairs go in, which is what they would hold. Numbered rows keep their numbers (audit events,
probes, rotations, drills), and the sequences continue after the highest. The audit chain and
its signed head are copied as they are, so ``audit --verify`` and every node's anchor agree.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

from meshtui.errors import InventoryError
from meshtui.inventory import audit as audit_mod
from meshtui.inventory.store import Inventory

MADE_BY_TRIGGERS = ("pair_ends", "status_ticks", "status_clock", "pairs_stamp")
"""Tables the triggers fill as the others are copied."""

NUMBERED = ("probes", "rotations", "drills")
"""Tables whose ``id`` PostgreSQL numbers: after the copy, numbering goes on past the highest."""

ORDER = {"probes": "id", "rotations": "id", "drills": "id", "audit": "seq"}
"""Tables copied in their numbers' order (a pair's newest probe is the last one its trigger sees)."""


@dataclass(frozen=True)
class Moved:
    """What a move copied: rows per table, and the audit head both ends now hold."""

    rows: dict[str, int]
    head_seq: int
    head_hash: str
    already: bool = False
    """The target held this very inventory already (a move interrupted after its commit)."""


def _tables(lite: sqlite3.Connection) -> list[str]:
    names = [
        str(r[0])
        for r in lite.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
            "ORDER BY name"
        )
    ]
    return [n for n in names if n not in MADE_BY_TRIGGERS]


def to_postgres(source: Path, conninfo: Path) -> Moved:
    """Copy the SQLite inventory ``source`` into the empty PostgreSQL inventory ``conninfo``
    names (created there at this meshtui's schema when the database is empty). The source is
    held with SQLite's write lock throughout, so no writer changes it mid-copy; the target
    takes its writer lock, and is refused when any of its tables holds a row. (The store hands
    out its PostgreSQL connection typed as ``sqlite3``'s, whose calls it answers.)"""
    with Inventory.open(source) as lite_inv, Inventory.open(source, postgres=conninfo) as pg_inv:
        lite = lite_inv._conn
        target = pg_inv._conn
        where = pg_inv.where
        tables = _tables(lite)
        copied: dict[str, int] = {}
        with lite_inv.lock, lite:
            lite.execute("BEGIN IMMEDIATE")  # nobody writes the source while it is copied
            with pg_inv.lock, target:
                target.execute(pg_inv.dialect.begin_write)
                held = [
                    t for t in tables if target.execute(f'SELECT 1 FROM "{t}" LIMIT 1').fetchone()
                ]
                if held and _same_head(lite, target) and _same_counts(lite, target, tables):
                    tables = []  # moved before, then interrupted before the switch: nothing to copy
                elif held:
                    raise InventoryError(
                        f"{where}: the target inventory is not empty (table {held[0]} holds "
                        "rows); a move goes only into an empty one (nothing was copied)"
                    )
                for table in tables:
                    copied[table] = _copy(lite, target, table)
                for table in NUMBERED:
                    target.execute(
                        f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                        f"COALESCE((SELECT MAX(id) FROM {table}), 0) + 1, false)"
                    )
        head = audit_mod.head(lite)
    return Moved(
        rows=copied,
        head_seq=head["seq"] if head else 0,
        head_hash=head["hash"] if head else audit_mod.GENESIS,
        already=not copied,
    )


def _same_head(lite: sqlite3.Connection, target: sqlite3.Connection) -> bool:
    """Both hold the same signed audit head (an empty chain is no proof of anything)."""
    mine = audit_mod.head(lite)
    return mine is not None and mine == audit_mod.head(target)


def _same_counts(lite: sqlite3.Connection, target: sqlite3.Connection, tables: list[str]) -> bool:
    count = 'SELECT count(*) FROM "{}"'
    return all(
        lite.execute(count.format(t)).fetchone() == target.execute(count.format(t)).fetchone()
        for t in tables
    )


def _copy(lite: sqlite3.Connection, target: sqlite3.Connection, table: str) -> int:
    cursor = lite.execute(f'SELECT * FROM "{table}" ORDER BY {ORDER.get(table, "rowid")}')
    columns = [d[0] for d in cursor.description]
    names = ", ".join(f'"{c}"' for c in columns)
    marks = ", ".join("?" * len(columns))
    count = 0
    while batch := cursor.fetchmany(2000):
        target.executemany(f'INSERT INTO "{table}" ({names}) VALUES ({marks})', batch)
        count += len(batch)
    return count
