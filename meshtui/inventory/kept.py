"""Status's read of every pair, and the pairs' static columns kept between reads.

Status reads every pair on every refresh, and most of that read is the ``sqlite3`` module making
Python values (~240,000 at 10,000 pairs). Seven of a pair's columns (id, provision, consumer,
provider, login, file, created_at: seven of its ten strings) change only when declare writes
the pairs table, which draws a new random stamp in the same statement (the schema's
``pairs_stamp``). A reader that read them at a stamp keeps them and, while the file holds that
stamp, re-reads only what changes: the generation, both ends, the newest probe. Each pair's
rowid comes with what changes and must match the kept ones, place for place, or the static
columns are read again too.
"""

from __future__ import annotations

import operator
import sqlite3
from dataclasses import dataclass

from meshtui.inventory.rows import ID, ROWID, PairColumns, StatusRow, StatusRows
from meshtui.inventory.schema import STATIC_PAIR_COLUMNS

PAIRS_SQL = f"SELECT p.rowid, {', '.join(f'p.{c}' for c in STATIC_PAIR_COLUMNS)} FROM pairs p"
"""Every pair's static columns, in :data:`~meshtui.inventory.rows.PairColumns`' order."""

CHANGING_SQL = """
SELECT p.rowid, p.generation, p.rotated_at, p.withdrawn_at,
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

STAMP_SQL = "SELECT stamp FROM pairs_stamp"

_rowid = operator.itemgetter(ROWID)
_id = operator.itemgetter(ID)


@dataclass(frozen=True)
class KeptPairs:
    """The pairs' static columns as read at ``stamp``, sorted by id; ``order[i]``: where the
    changing row of ``pairs[i]`` is in a read whose rowids are ``rowids``."""

    stamp: int
    pairs: list[PairColumns]
    order: list[int]
    rowids: list[int]


class StatusRead:
    """Every pair's status, keeping the static columns between reads (one per inventory
    connection; the caller holds the inventory's lock)."""

    def __init__(self) -> None:
        self._kept: KeptPairs | None = None

    def forget(self) -> None:
        """Drop what is kept: the next read reads the static columns again."""
        self._kept = None

    def every(self, conn: sqlite3.Connection) -> StatusRows:
        """Every pair, sorted by id, read in one transaction (the stamp, what changes and,
        when not kept, the static columns: one snapshot of the file)."""
        began = not conn.in_transaction
        if began:
            conn.execute("BEGIN")
        try:
            (stamp,) = conn.execute(STAMP_SQL).fetchone()
            changing: list[StatusRow] = conn.execute(CHANGING_SQL).fetchall()
            rowids = list(map(_rowid, changing))
            kept = self._kept
            if kept is None or kept.stamp != stamp or kept.rowids != rowids:
                kept = self._kept = _keep(stamp, conn.execute(PAIRS_SQL).fetchall(), rowids)
        finally:
            if began:
                conn.rollback()
        return StatusRows(kept.pairs, [changing[i] for i in kept.order])


def _keep(stamp: int, pairs: list[PairColumns], rowids: list[int]) -> KeptPairs:
    """``pairs`` sorted by id (SQLite's BINARY order of UTF-8 text is Python's order of str),
    each with its changing row's place among ``rowids`` (the same snapshot: the same pairs)."""
    pairs.sort(key=_id)
    place = {rowid: i for i, rowid in enumerate(rowids)}
    return KeptPairs(stamp, pairs, [place[p[ROWID]] for p in pairs], rowids)
