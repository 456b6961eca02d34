"""Status's read of every pair, and the pairs' static columns kept between reads.

Status reads every pair on every refresh, and most of that read is the ``sqlite3`` module making
Python values (~240,000 at 10,000 pairs). Seven of a pair's columns (id, provision, consumer,
provider, login, file, created_at: seven of its ten strings) change only when declare writes
the pairs table, which draws a new random stamp in the same statement (the schema's
``pairs_stamp``). A reader that read them at a stamp keeps them and, while the file holds that
stamp, re-reads only the rest: the generation, both ends, the newest probe. Each pair's rowid
comes with the rest and must match the kept one, place for place, or everything is read again.
"""

from __future__ import annotations

import operator
import sqlite3
from dataclasses import dataclass
from typing import Any, cast

from meshtui.inventory.rows import ROWID, STATIC_STATUS_COLUMNS, StatusRow
from meshtui.inventory.schema import STATIC_PAIR_COLUMNS

_STATIC = ", ".join(f"p.{c}" for c in STATIC_PAIR_COLUMNS)

_CHANGING = """p.rowid, p.generation, p.rotated_at, p.withdrawn_at,
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

STATUS_SQL = f"SELECT {_STATIC},\n       {_CHANGING}"
"""One row per pair, in :data:`~meshtui.inventory.rows.StatusRow`'s column order: its ends and
newest probe found through ``pair_ends``, which the schema's triggers keep in step with
``deliveries`` and ``probes`` (one lookup per pair instead of three searches). Two columns are
read only where a state can use them, so the common row makes no string for them: a probe's
reason when it did not log in, and the provider end's last attempt when it holds an error."""

CHANGING_SQL = f"SELECT {_CHANGING}"
""":data:`STATUS_SQL` without the static columns: the row from ``rowid`` on."""

STAMP_SQL = "SELECT stamp FROM pairs_stamp"

_first = operator.itemgetter(0)
_rowid = operator.itemgetter(ROWID)


@dataclass(frozen=True)
class KeptPairs:
    """The pairs' static columns as read at ``stamp``: in id order, each with its place in the
    table's own order (``order``), and the table's rowids in that order (``rowids``)."""

    stamp: int
    static: list[tuple[Any, ...]]
    order: list[int]
    rowids: list[int]


class StatusRead:
    """Every pair's status row, keeping the static columns between reads (one per inventory
    connection; the caller holds the inventory's lock)."""

    def __init__(self) -> None:
        self._kept: KeptPairs | None = None

    def forget(self) -> None:
        """Drop what is kept: the next read reads every column."""
        self._kept = None

    def every(self, conn: sqlite3.Connection) -> list[StatusRow]:
        """Every pair's row, sorted by id, in one read transaction (the stamp and the rows
        from one snapshot of the file)."""
        began = not conn.in_transaction
        if began:
            conn.execute("BEGIN")
        try:
            (stamp,) = conn.execute(STAMP_SQL).fetchone()
            kept = self._kept
            if kept is not None and kept.stamp == stamp:
                changing = conn.execute(CHANGING_SQL).fetchall()
                if list(map(_first, changing)) == kept.rowids:
                    return cast(
                        list[StatusRow],
                        [s + changing[i] for s, i in zip(kept.static, kept.order, strict=True)],
                    )
            every = conn.execute(STATUS_SQL).fetchall()
        finally:
            if began:
                conn.rollback()
        self._kept = _keep(stamp, every)
        return cast(list[StatusRow], every)


def _keep(stamp: int, rows: list[tuple[Any, ...]]) -> KeptPairs:
    """Sort ``rows`` (in the table's order) by id, in place (SQLite's BINARY order of UTF-8
    text is Python's order of str), and keep their static columns."""
    rowids = list(map(_rowid, rows))
    place = {rowid: i for i, rowid in enumerate(rowids)}
    rows.sort(key=_first)
    return KeptPairs(
        stamp=stamp,
        static=[r[:STATIC_STATUS_COLUMNS] for r in rows],
        order=[place[r[ROWID]] for r in rows],
        rowids=rowids,
    )
