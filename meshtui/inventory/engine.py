"""The statements whose form differs between the inventory's two engines, SQLite and PostgreSQL.

Every other statement of the inventory is written once, in the SQL both engines read alike
(``?`` placeholders, double-quoted names, ``ON CONFLICT ... DO UPDATE``, ``RETURNING``); these
are the few each engine says its own way, side by side. The store and the status read ask
:func:`dialect` for the connection in hand, so a SQLite connection stays ``sqlite3``'s own and
nothing of PostgreSQL is imported for it.

Several writers (two controllers on one PostgreSQL): every PostgreSQL write transaction first
takes one transaction-scoped advisory lock, the writer lock, as SQLite's ``BEGIN IMMEDIATE``
takes its file's. An audit append reads the newest event and writes the next one after it, so
under the lock two controllers never fork the chain, skip a number or use one twice (without
it, a test's second writer collides on a number). Chosen over SERIALIZABLE with retries: a
write transaction is the caller's block (a rotation's journal, the agents' answers recorded),
which the inventory cannot run again, so writers wait rather than fail; and no statement runs
SERIALIZABLE, so no serialization failure arises to retry. Chosen over a row lock on the audit
head: that row does not exist before the first event, and every write (deliveries, generations,
the provider bases), not only an append, reads and then writes as SQLite's one writer allowed.
A writer waits at most ``lock_timeout`` (10 s, SQLite's busy timeout) and then fails clearly.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Dialect:
    """One engine's form of each statement that differs."""

    name: str
    begin_write: str
    """Opens a write transaction that waits for, then excludes, every other writer."""
    begin_read: str
    """Opens a read transaction whose statements all see one snapshot."""
    json_values: str
    """The values of a JSON array of strings handed in as one parameter, as a one-column set."""
    no_limit: int | None
    """The ``LIMIT ?`` parameter that means no limit."""
    audit_order: str
    """The order the audit walk reads events in: the order they were written."""
    contains: str
    """``{}`` holds the text ``?`` (a position above 0 when it does)."""
    data_version: str
    """One number that changes whenever another connection commits."""


SQLITE = Dialect(
    name="sqlite",
    begin_write="BEGIN IMMEDIATE",
    begin_read="BEGIN",
    json_values="SELECT value FROM json_each(?)",
    no_limit=-1,
    audit_order="rowid",
    contains="instr({}, ?)",
    data_version="PRAGMA data_version",
)

WRITER_LOCK = 0x6D657368  # "mesh"
"""The advisory lock every PostgreSQL write transaction takes first (see :data:`POSTGRES`)."""

BEGIN_WRITE_STATEMENTS = (
    "BEGIN ISOLATION LEVEL READ COMMITTED",
    f"SELECT pg_advisory_xact_lock({WRITER_LOCK})",
)
"""PostgreSQL's ``begin_write`` one statement at a time, as a pipelined write sends it."""

CHANGED_CHANNEL = "meshtui_inventory"
"""What every PostgreSQL write transaction notifies at its commit (``NOTIFY``), so a reader
listening there (an open dashboard on any controller) reads again at once instead of polling."""

POSTGRES = Dialect(
    name="postgres",
    # SQLite's BEGIN IMMEDIATE: one writer at a time, each seeing every earlier commit. The lock
    # is the transaction's (released at COMMIT or ROLLBACK, or when the connection dies), and
    # READ COMMITTED takes each statement's snapshot after it was granted.
    begin_write="; ".join(BEGIN_WRITE_STATEMENTS),
    begin_read="BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
    json_values="SELECT json_array_elements_text(CAST(? AS json)) AS value",
    no_limit=None,
    # a table without rowids: the sequence numbers are the order (an edited, swapped or deleted
    # row still breaks the hash links)
    audit_order="seq",
    contains="strpos({}, ?)",
    # the next transaction id of the cluster: moves at every write anywhere in it (a superset of
    # this database's commits, so an idle reader may read once too often, never too seldom)
    data_version="SELECT CAST(CAST(pg_snapshot_xmax(pg_current_snapshot()) AS text) AS bigint)",
)


def dialect(conn: object) -> Dialect:
    """The dialect of ``conn``: a PostgreSQL connection says so, any other is ``sqlite3``'s."""
    found = getattr(conn, "dialect", SQLITE)
    return found if isinstance(found, Dialect) else SQLITE
