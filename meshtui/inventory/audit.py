"""The audit log's hash chain: each event's link, the signed head, and the walk that checks both.

Every event hashes the one before it, so an edit, a deletion or a reordering breaks the chain at
a named event; the head (newest number and hash) is signed by the key of the controller that
appended it (each event names its controller, and its hash covers the name), so a chain
rewritten by someone who can write the file but holds no controller key is caught too. The
statements that append to the chain and walk it are here; the store calls them under its lock
and inside its transactions.
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from meshtui import crypto
from meshtui.errors import CryptoError
from meshtui.inventory.engine import dialect
from meshtui.inventory.rows import AuditRecord, HeadRow
from meshtui.protocol.wire import SignedHead, head_message

GENESIS = "0" * 64
"""The ``prev`` of the first event."""

CHAINED = ("seq", "at", "operator", "ssh_client", "kind", "pairs", "detail", "outcome")
"""The columns an event's hash covers (and ``controller`` when the event names one)."""

COLUMNS = (*CHAINED, "prev", "hash", "controller")
"""Every column of an audit event, in the table's order."""

_SELECT = f"SELECT {', '.join(COLUMNS)} FROM audit"


def operator() -> tuple[str, str | None]:
    """Who is acting: the OS user, and the SSH client address when there is one."""
    try:
        user = pwd.getpwuid(os.getuid()).pw_name  # not getpass: $USER is anyone's to set
    except KeyError:
        user = str(os.getuid())
    ssh = os.environ.get("SSH_CLIENT") or os.environ.get("SSH_CONNECTION")
    return user, ssh.split()[0] if ssh else None


def event_hash(prev: str, event: Mapping[str, object]) -> str:
    """The chain link: SHA-256 over the previous hash and the event's canonical JSON."""
    body = {k: event[k] for k in CHAINED}
    if event.get("controller") is not None:  # events before controllers were named hash as then
        body["controller"] = event["controller"]
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256((prev + canonical).encode()).hexdigest()


def link(
    last: tuple[int, str] | None,
    *,
    at: str,
    user: str,
    ssh: str | None,
    kind: str,
    pairs: Iterable[str],
    detail: Mapping[str, object],
    outcome: str,
    controller: str | None = None,
) -> AuditRecord:
    """The next event after ``last`` (its seq and hash; None for the first), hashed."""
    seq, prev = (last[0] + 1, last[1]) if last else (1, GENESIS)
    event = AuditRecord(
        seq=seq,
        at=at,
        operator=user,
        ssh_client=ssh,
        kind=kind,
        pairs=json.dumps(sorted(pairs)),
        detail=json.dumps(detail, sort_keys=True),
        outcome=outcome,
        prev=prev,
        hash="",
        controller=controller,
    )
    event["hash"] = event_hash(prev, event)
    return event


@dataclass(frozen=True)
class ChainCheck:
    """The result of verifying the audit chain: ok, how many events, the first bad one."""

    ok: bool
    events: int
    bad_seq: int | None = None
    problem: str = ""


KeyOf = Callable[[str | None], bytes | None]
"""The verify key of a named controller (None: its key is not known here)."""


def verify(
    events: Iterable[AuditRecord], head: HeadRow | None, verify_key: bytes | KeyOf | None
) -> ChainCheck:
    """Walk the stored events (in rowid order); name the first edited, deleted or reordered one.

    With ``verify_key`` (the controller's key, or each controller's by name) the head must also
    carry the signature of the controller that appended it.
    """
    prev, expected_seq, count = GENESIS, 1, 0
    for row in events:
        count += 1
        if row["seq"] != expected_seq:
            why = "deleted or reordered" if row["seq"] > expected_seq else "reordered"
            return ChainCheck(
                False,
                count,
                row["seq"],
                f"expected event {expected_seq} here, found {row['seq']} ({why})",
            )
        if row["prev"] != prev:
            return ChainCheck(
                False,
                count,
                row["seq"],
                "does not link to the event before it (an event was deleted or swapped)",
            )
        if event_hash(prev, row) != row["hash"]:
            return ChainCheck(
                False, count, row["seq"], "its content was edited after it was written"
            )
        prev, expected_seq = row["hash"], expected_seq + 1
    if head is not None and (head["seq"], head["hash"]) != (expected_seq - 1, prev):
        return ChainCheck(
            False,
            count,
            head["seq"],
            "the newest events were deleted (the chain ends early)",
        )
    if head is None and count:
        return ChainCheck(False, count, None, "the chain's head record is missing")
    if head is not None and verify_key is not None:
        signer = head.get("controller")
        key = verify_key(signer) if callable(verify_key) else verify_key
        own = verify_key(None) if callable(verify_key) else None
        # a name this controller does not know may still be its own key under an older name
        # (the controller was renamed): the signature decides
        if key is None and not (own is not None and _signed(head, own)):
            return ChainCheck(
                False,
                count,
                head["seq"],
                f"the newest event is signed by controller {signer}, whose key this controller "
                f"does not know (copy that controller's controller.pub to "
                f"controllers/{signer}.pub in this state folder)",
            )
        if key is not None and not _signed(head, key):
            return ChainCheck(
                False,
                count,
                head["seq"],
                "the newest event is not signed by the controller key"
                + (f" of controller {signer}" if signer else "")
                + " (the log was rewritten, or written without controller keys)",
            )
    return ChainCheck(True, count)


def _signed(head: HeadRow, key: bytes) -> bool:
    """Whether ``key`` signed ``head``."""
    try:
        if not head["sig"]:
            return False
        crypto.verify(
            head_message(head["seq"], head["hash"]), crypto.unb64(head["sig"]), key, "controller"
        )
    except (CryptoError, ValueError):
        return False
    return True


StoredEvent = tuple[int, str, str, str | None, str, str, str, str, str, str, str | None]
"""One audit row as SQLite returns it, in :data:`COLUMNS` order."""


def _record(row: StoredEvent) -> AuditRecord:
    seq, at, user, ssh, kind, pairs, detail, outcome, prev, digest, controller = row
    return AuditRecord(
        seq=seq,
        at=at,
        operator=user,
        ssh_client=ssh,
        kind=kind,
        pairs=pairs,
        detail=detail,
        outcome=outcome,
        prev=prev,
        hash=digest,
        controller=controller,
    )


NEWEST_SQL = "SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1"
"""The newest event's number and hash: what the next one links to."""


def append(
    conn: sqlite3.Connection,
    *,
    at: str,
    actor: str | None,
    signer: Callable[[bytes], bytes] | None,
    kind: str,
    pairs: Iterable[str],
    detail: Mapping[str, object],
    outcome: str,
    controller: str | None = None,
    newest: Callable[[], Sequence[Any] | None] | None = None,
) -> AuditRecord:
    """Append one event after the newest and move the head (signed when ``signer`` is set, by
    ``controller``, whose name the event and the head carry).

    ``actor`` names the operator when it is not a person (``watch``); else the OS user and SSH
    client are recorded. Runs inside the caller's transaction. ``newest``: the newest event's
    (seq, hash) as :data:`NEWEST_SQL` reads it in this transaction, when the caller has it
    (sent ahead, or the event it appended last); read here otherwise.
    """
    last = newest() if newest is not None else conn.execute(NEWEST_SQL).fetchone()
    user, ssh = operator() if actor is None else (actor, None)
    event = link(
        (int(last[0]), str(last[1])) if last else None,
        at=at,
        user=user,
        ssh=ssh,
        kind=kind,
        pairs=pairs,
        detail=detail,
        outcome=outcome,
        controller=controller,
    )
    values = cast(Mapping[str, object], event)
    conn.execute(
        f"INSERT INTO audit ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})",
        tuple(values[c] for c in COLUMNS),
    )
    sig = crypto.b64(signer(head_message(event["seq"], event["hash"]))) if signer else None
    conn.execute(
        "INSERT INTO audit_head (id, seq, hash, sig, controller) VALUES (1, ?, ?, ?, ?) "
        "ON CONFLICT(id) DO UPDATE SET seq = excluded.seq, hash = excluded.hash, "
        "sig = excluded.sig, controller = excluded.controller",
        (event["seq"], event["hash"], sig, controller),
    )
    return event


def head(conn: sqlite3.Connection) -> HeadRow | None:
    """The chain's head record as stored (None: no event was ever written)."""
    row = conn.execute("SELECT seq, hash, sig, controller FROM audit_head").fetchone()
    if row is None:
        return None
    return HeadRow(
        seq=int(row[0]),
        hash=str(row[1]),
        sig=None if row[2] is None else str(row[2]),
        controller=None if row[3] is None else str(row[3]),
    )


def signed_head(conn: sqlite3.Connection) -> SignedHead | None:
    """The head with the controller's signature (None: no events, or unsigned)."""
    got = head(conn)
    if got is None or not got["sig"]:
        return None
    return SignedHead(
        seq=got["seq"], hash=got["hash"], sig=got["sig"], controller=got["controller"]
    )


def last_seq(conn: sqlite3.Connection) -> int:
    """The number of the newest event (0: none yet)."""
    return int(conn.execute("SELECT MAX(seq) FROM audit").fetchone()[0] or 0)


def hash_at(conn: sqlite3.Connection, seq: int) -> str | None:
    """The stored hash of event ``seq`` (None when there is no such event)."""
    row = conn.execute("SELECT hash FROM audit WHERE seq = ?", [seq]).fetchone()
    return None if row is None else str(row[0])


def stored(
    conn: sqlite3.Connection, *, limit: int | None = None, kind: str | None = None
) -> list[StoredEvent]:
    """Stored events, oldest first: all, the newest ``limit``, of one ``kind`` when named."""
    where, params = ("WHERE kind = ?", [kind]) if kind is not None else ("", [])
    sql = f"{_SELECT} {where} ORDER BY seq DESC LIMIT ?"
    rows: list[StoredEvent] = conn.execute(
        sql, [*params, dialect(conn).no_limit if limit is None else limit]
    ).fetchall()
    rows.reverse()
    return rows


def walk(conn: sqlite3.Connection, verify_key: bytes | KeyOf | None) -> ChainCheck:
    """Read every event in the order it was written (SQLite's rowid; PostgreSQL's tables keep
    none, so their numbers) and the head, and :func:`verify`."""
    order = dialect(conn).audit_order
    events = (_record(row) for row in conn.execute(f"{_SELECT} ORDER BY {order}"))
    return verify(events, head(conn), verify_key)
