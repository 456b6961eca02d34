"""The SQLite inventory: nodes, modules, pairs, sealed generations, deliveries, probes, the
rotation journal and the hash-chained audit log.

It stores only sealed blobs and digests, never a plaintext credential. Opened read-only
(``mode=ro``) it refuses every write with a clear error before SQLite would.
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlite_utils

from meshtui import crypto
from meshtui.errors import CryptoError, InventoryError, ReadOnlyError
from meshtui.model import Policy, PolicySource
from meshtui.wire import SignedHead, head_message

SCHEMA_VERSION = 4
GENESIS = "0" * 64
Row = dict[str, Any]


def now() -> str:
    """UTC timestamp with microseconds, the inventory's one time format."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


def operator() -> tuple[str, str | None]:
    """Who is acting: the OS user, and the SSH client address when there is one."""
    try:
        user = pwd.getpwuid(os.getuid()).pw_name  # not getpass: $USER is anyone's to set
    except KeyError:
        user = str(os.getuid())
    ssh = os.environ.get("SSH_CLIENT") or os.environ.get("SSH_CONNECTION")
    return user, ssh.split()[0] if ssh else None


def _create_v1(db: sqlite_utils.Database) -> None:
    db.executescript(
        """
        CREATE TABLE nodes (name TEXT PRIMARY KEY, address TEXT NOT NULL, agent TEXT NOT NULL,
            seal_key TEXT NOT NULL, verify_key TEXT NOT NULL, declared INTEGER NOT NULL DEFAULT 1,
            updated_at TEXT NOT NULL);
        CREATE TABLE modules (id TEXT PRIMARY KEY, node TEXT NOT NULL, name TEXT NOT NULL,
            spec TEXT NOT NULL, declared INTEGER NOT NULL DEFAULT 1);
        CREATE TABLE pairs (id TEXT PRIMARY KEY, provision TEXT NOT NULL, consumer TEXT NOT NULL,
            provider TEXT NOT NULL, login TEXT NOT NULL, file TEXT NOT NULL, port INTEGER NOT NULL,
            "values" TEXT NOT NULL, reload TEXT NOT NULL, generation INTEGER NOT NULL,
            created_at TEXT NOT NULL, rotated_at TEXT, withdrawn_at TEXT);
        CREATE INDEX pairs_provider ON pairs(provider);
        CREATE INDEX pairs_consumer ON pairs(consumer);
        CREATE TABLE generations (pair TEXT NOT NULL, generation INTEGER NOT NULL,
            consumer_sealed BLOB, provider_sealed BLOB, digest TEXT NOT NULL,
            created_at TEXT NOT NULL, discarded_at TEXT, PRIMARY KEY (pair, generation));
        CREATE TABLE deliveries (pair TEXT NOT NULL, "end" TEXT NOT NULL, generation INTEGER,
            digest TEXT, since TEXT, attempted_at TEXT, error TEXT, PRIMARY KEY (pair, "end"));
        CREATE TABLE probes (id INTEGER PRIMARY KEY, pair TEXT NOT NULL, at TEXT NOT NULL,
            generation INTEGER, verdict TEXT NOT NULL, reason TEXT NOT NULL, latency_ms REAL,
            used_password INTEGER, loopback INTEGER NOT NULL DEFAULT 0, client_addr TEXT,
            control TEXT, withdrawn INTEGER NOT NULL DEFAULT 0);
        CREATE INDEX probes_pair ON probes(pair, id);
        CREATE TABLE rotations (id INTEGER PRIMARY KEY, started_at TEXT NOT NULL,
            finished_at TEXT, state TEXT NOT NULL, items TEXT NOT NULL, outcome TEXT,
            reason TEXT, owner_pid INTEGER);
        CREATE TABLE drills (id INTEGER PRIMARY KEY, pair TEXT NOT NULL, at TEXT NOT NULL,
            rotation INTEGER, ok INTEGER NOT NULL, window_ms REAL, evidence TEXT NOT NULL);
        CREATE INDEX drills_pair ON drills(pair, id);
        CREATE TABLE audit (seq INTEGER PRIMARY KEY, at TEXT NOT NULL, operator TEXT NOT NULL,
            ssh_client TEXT, kind TEXT NOT NULL, pairs TEXT NOT NULL, detail TEXT NOT NULL,
            outcome TEXT NOT NULL, prev TEXT NOT NULL, hash TEXT NOT NULL);
        CREATE TABLE audit_head (id INTEGER PRIMARY KEY CHECK (id = 1), seq INTEGER NOT NULL,
            hash TEXT NOT NULL);
        """
    )


def _signed_head_v2(db: sqlite_utils.Database) -> None:
    db.execute("ALTER TABLE audit_head ADD COLUMN sig TEXT")


def _file_access_v3(db: sqlite_utils.Database) -> None:
    """Who may read each consumer's credential file: owner, group (None: the agent's) and mode."""
    db.executescript(
        """
        ALTER TABLE pairs ADD COLUMN file_owner TEXT;
        ALTER TABLE pairs ADD COLUMN file_group TEXT;
        ALTER TABLE pairs ADD COLUMN file_mode TEXT NOT NULL DEFAULT '0600';
        """
    )


def _policies_v4(db: sqlite_utils.Database) -> None:
    db.execute(
        "CREATE TABLE policies (pair TEXT PRIMARY KEY, rotate_every REAL, probe_every REAL NOT "
        "NULL, rotate_source TEXT NOT NULL, probe_source TEXT NOT NULL)"
    )


MIGRATIONS: list[Callable[[sqlite_utils.Database], None]] = [
    _create_v1,
    _signed_head_v2,
    _file_access_v3,
    _policies_v4,
]
"""``MIGRATIONS[i]`` takes the schema from version i to i+1; append, never edit."""


def event_hash(prev: str, event: Row) -> str:
    """The chain link: SHA-256 over the previous hash and the event's canonical JSON."""
    body = {
        k: event[k]
        for k in ("seq", "at", "operator", "ssh_client", "kind", "pairs", "detail", "outcome")
    }
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256((prev + canonical).encode()).hexdigest()


@dataclass(frozen=True)
class ChainCheck:
    """The result of verifying the audit chain: ok, how many events, the first bad one."""

    ok: bool
    events: int
    bad_seq: int | None = None
    problem: str = ""


def _connect_read_only(path: Path) -> sqlite3.Connection:
    """``mode=ro``; where the folder cannot be written (a read-only mount, another user's state)
    and no ``-wal`` exists, SQLite cannot make the ``-shm`` index a WAL file needs, so the file
    is read as it stands (``immutable``): it was closed cleanly and holds every commit."""
    uri = path.resolve().as_uri()
    conn = sqlite3.connect(uri + "?mode=ro", uri=True, check_same_thread=False)
    try:
        conn.execute("PRAGMA busy_timeout = 10000")
        conn.execute("PRAGMA user_version").fetchone()
        return conn
    except sqlite3.OperationalError:
        conn.close()
        if path.with_name(path.name + "-wal").exists():
            raise
    return sqlite3.connect(uri + "?mode=ro&immutable=1", uri=True, check_same_thread=False)


class Inventory:
    """One inventory file. Use :meth:`open`; every write goes through :meth:`transaction`."""

    def __init__(self, path: Path, conn: sqlite3.Connection, *, read_only: bool) -> None:
        self.path = path
        self.read_only = read_only
        self.db = sqlite_utils.Database(conn)
        self.lock = threading.RLock()
        self.signer: Callable[[bytes], bytes] | None = None  # signs the audit head when set
        self.actor: str | None = None  # the audit's operator when not a person (``watch``)

    @classmethod
    def open(cls, path: Path | str, *, read_only: bool = False) -> Inventory:
        """Open (and when writable, create and migrate) the inventory at ``path``."""
        path = Path(path)
        if read_only and not path.exists():
            raise InventoryError(f"{path}: no inventory here (run meshtui declare first)")
        conn: sqlite3.Connection | None = None
        try:
            if read_only:
                conn = _connect_read_only(path)
                inv = cls(path, conn, read_only=True)
                inv._check_version()
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                conn = sqlite3.connect(path, check_same_thread=False)
                conn.execute("PRAGMA busy_timeout = 10000")
                os.chmod(path, 0o600)
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA synchronous = NORMAL")
                inv = cls(path, conn, read_only=False)
                inv._migrate()
        except (OSError, sqlite3.Error) as exc:
            if conn is not None:
                conn.close()
            if not read_only and (isinstance(exc, OSError) or "readonly" in str(exc)):
                why = exc.strerror if isinstance(exc, OSError) else str(exc)
                raise InventoryError(
                    f"{path}: cannot write the inventory ({why}); "
                    "use --read-only to look without changing anything"
                ) from exc
            raise InventoryError(f"{path}: cannot open inventory: {exc}") from exc
        except BaseException:
            if conn is not None:
                conn.close()
            raise
        return inv

    def close(self) -> None:
        """Close the connection."""
        self.db.conn.close()

    def __enter__(self) -> Inventory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- schema -------------------------------------------------------------------------
    def version(self) -> int:
        """The schema version the file is at (0 for a new file)."""
        return int(self.db.execute("PRAGMA user_version").fetchone()[0])

    def _check_version(self) -> None:
        found = self.version()
        if found > SCHEMA_VERSION:
            raise self._newer(found)
        if found != SCHEMA_VERSION:
            raise InventoryError(
                f"{self.path}: schema version {found}, this meshtui reads {SCHEMA_VERSION} "
                "(open it once without --read-only to migrate it)"
            )

    def _newer(self, found: int) -> InventoryError:
        return InventoryError(
            f"{self.path}: schema version {found} is newer than this meshtui "
            f"(which reads {SCHEMA_VERSION}); upgrade meshtui"
        )

    def _migrate(self) -> None:
        with self.lock, self.db.conn:
            self.db.execute("BEGIN IMMEDIATE")
            found = self.version()
            if found > SCHEMA_VERSION:
                raise self._newer(found)
            for step in MIGRATIONS[found:]:
                step(self.db)
            self.db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    # ---- writes -------------------------------------------------------------------------
    def require_writable(self, action: str) -> None:
        """Raise ReadOnlyError when this inventory was opened read-only."""
        if self.read_only:
            raise ReadOnlyError(action)

    @contextmanager
    def transaction(self, action: str) -> Iterator[sqlite_utils.Database]:
        """One atomic write; refused up front when read-only, SQLite errors made clear."""
        self.require_writable(action)
        with self.lock:
            try:
                with self.db.conn:
                    self.db.execute("BEGIN IMMEDIATE")
                    yield self.db
            except sqlite3.OperationalError as exc:
                if "readonly" in str(exc):
                    raise ReadOnlyError(action) from exc
                raise InventoryError(f"{self.path}: {action} failed: {exc}") from exc
            except sqlite3.IntegrityError as exc:
                raise InventoryError(
                    f"{self.path}: {action} conflicts with what is stored ({exc}); nothing was "
                    "written (run meshtui push, then try again)"
                ) from exc

    def audit(
        self,
        db: sqlite_utils.Database,
        kind: str,
        pairs: Iterable[str],
        detail: dict[str, Any],
        outcome: str,
    ) -> Row:
        """Append one event to the chain; call inside :meth:`transaction`."""
        last = db.execute("SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1").fetchone()
        seq, prev = (last[0] + 1, last[1]) if last else (1, GENESIS)
        user, ssh = operator()
        if self.actor is not None:
            user, ssh = self.actor, None
        event: Row = {
            "seq": seq,
            "at": now(),
            "operator": user,
            "ssh_client": ssh,
            "kind": kind,
            "pairs": json.dumps(sorted(pairs)),
            "detail": json.dumps(detail, sort_keys=True),
            "outcome": outcome,
            "prev": prev,
        }
        event["hash"] = event_hash(prev, event)
        db.table("audit").insert(event)
        sig = crypto.b64(self.signer(head_message(seq, event["hash"]))) if self.signer else None
        db.table("audit_head").upsert(
            {"id": 1, "seq": seq, "hash": event["hash"], "sig": sig}, pk="id"
        )
        return event

    def record(self, kind: str, pairs: Iterable[str], detail: dict[str, Any], outcome: str) -> Row:
        """A standalone audit event in its own transaction."""
        with self.transaction(kind) as db:
            return self.audit(db, kind, pairs, detail, outcome)

    # ---- reads --------------------------------------------------------------------------
    def query(self, sql: str, params: Iterable[Any] | dict[str, Any] = ()) -> list[Row]:
        """Rows as dicts."""
        with self.lock:
            return list(self.db.query(sql, params if isinstance(params, dict) else list(params)))

    def nodes(self) -> dict[str, Row]:
        """Every node by name."""
        return {r["name"]: r for r in self.query("SELECT * FROM nodes ORDER BY name")}

    def modules(self) -> dict[str, Row]:
        """Every module by id, with its spec decoded."""
        out = {}
        for r in self.query("SELECT * FROM modules ORDER BY id"):
            r["spec"] = json.loads(r["spec"])
            out[r["id"]] = r
        return out

    def pairs(self, ids: Iterable[str] | None = None) -> list[Row]:
        """Pairs (all, or the named ones) with values and reload decoded."""
        if ids is None:
            rows = self.query("SELECT * FROM pairs ORDER BY id")
        else:
            wanted = sorted(set(ids))
            rows = []
            for i in range(0, len(wanted), 500):  # stay under SQLite's variable limit
                chunk = wanted[i : i + 500]
                rows += self.query(
                    "SELECT * FROM pairs WHERE id IN (" + ",".join("?" * len(chunk)) + ")", chunk
                )
            rows.sort(key=lambda r: str(r["id"]))
        for r in rows:
            r["values"] = json.loads(r["values"])
            r["reload"] = json.loads(r["reload"])
        return rows

    def policies(self) -> dict[str, Policy]:
        """Every pair's effective policy as declare stored it (pairs without a row: default)."""
        return {
            pid: Policy(
                rotate_every=rotate,
                probe_every=probe,
                rotate_source=PolicySource(rsrc),
                probe_source=PolicySource(psrc),
            )
            for pid, rotate, probe, rsrc, psrc in self.db.conn.execute(
                "SELECT pair, rotate_every, probe_every, rotate_source, probe_source FROM policies"
            )
        }

    def generation(self, pair: str, generation: int) -> Row | None:
        """One sealed generation of a pair."""
        rows = self.query(
            "SELECT * FROM generations WHERE pair = ? AND generation = ?", [pair, generation]
        )
        return rows[0] if rows else None

    def generations(self, pair: str) -> list[Row]:
        """Every generation of a pair, oldest first."""
        return self.query("SELECT * FROM generations WHERE pair = ? ORDER BY generation", [pair])

    def deliveries(self, pair: str | None = None) -> dict[tuple[str, str], Row]:
        """Which generation each end holds, by (pair, end); all pairs or one."""
        if pair is None:
            rows = self.query("SELECT * FROM deliveries")
        else:
            rows = self.query("SELECT * FROM deliveries WHERE pair = ?", [pair])
        return {(r["pair"], r["end"]): r for r in rows}

    def latest_probes(self) -> dict[str, Row]:
        """The newest probe of every pair."""
        rows = self.query(
            "SELECT p.* FROM probes p JOIN (SELECT pair, MAX(id) AS id FROM probes GROUP BY pair)"
            " m ON p.id = m.id"
        )
        return {r["pair"]: r for r in rows}

    def probes(self, pair: str, limit: int = 50) -> list[Row]:
        """A pair's recent probes, newest first."""
        return self.query(
            "SELECT * FROM probes WHERE pair = ? ORDER BY id DESC LIMIT ?", [pair, limit]
        )

    def drills(self, pair: str | None = None, limit: int = 50) -> list[Row]:
        """Recent drills (of one pair, or all), newest first, evidence decoded."""
        if pair is None:
            rows = self.query("SELECT * FROM drills ORDER BY id DESC LIMIT ?", [limit])
        else:
            rows = self.query(
                "SELECT * FROM drills WHERE pair = ? ORDER BY id DESC LIMIT ?", [pair, limit]
            )
        for r in rows:
            r["evidence"] = json.loads(r["evidence"])
        return rows

    def open_rotations(self) -> list[Row]:
        """Rotations journaled but not finished (a controller may have died mid-way)."""
        rows = self.query("SELECT * FROM rotations WHERE finished_at IS NULL ORDER BY id")
        for r in rows:
            r["items"] = json.loads(r["items"])
        return rows

    def rotations(self, limit: int = 100) -> list[Row]:
        """Recent rotations, newest first."""
        rows = self.query("SELECT * FROM rotations ORDER BY id DESC LIMIT ?", [limit])
        for r in rows:
            r["items"] = json.loads(r["items"])
        return rows

    def events(self, limit: int | None = None) -> list[Row]:
        """Audit events, oldest first, with pairs and detail decoded."""
        sql = "SELECT * FROM audit ORDER BY seq"
        rows = (
            self.query(sql)
            if limit is None
            else self.query(
                "SELECT * FROM (SELECT * FROM audit ORDER BY seq DESC LIMIT ?) ORDER BY seq",
                [limit],
            )
        )
        for r in rows:
            r["pairs"] = json.loads(r["pairs"])
            r["detail"] = json.loads(r["detail"])
        return rows

    def signed_head(self) -> SignedHead | None:
        """The chain's head with the controller's signature (None: no events, or unsigned)."""
        rows = self.query("SELECT seq, hash, sig FROM audit_head")
        if not rows or not rows[0]["sig"]:
            return None
        return SignedHead(seq=int(rows[0]["seq"]), hash=str(rows[0]["hash"]), sig=rows[0]["sig"])

    def event_hash_at(self, seq: int) -> str | None:
        """The stored hash of audit event ``seq`` (None when there is no such event)."""
        rows = self.query("SELECT hash FROM audit WHERE seq = ?", [seq])
        return str(rows[0]["hash"]) if rows else None

    def verify_chain(self, verify_key: bytes | None = None) -> ChainCheck:
        """Walk the audit chain; name the first edited, deleted or reordered event.

        With the controller's ``verify_key`` the head must also carry its signature, so a chain
        rewritten by someone who can write the file but has no controller key is caught.
        """
        prev, expected_seq, count = GENESIS, 1, 0
        for row in self.query("SELECT * FROM audit ORDER BY rowid"):
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
        head = self.query("SELECT seq, hash FROM audit_head")
        if head and (head[0]["seq"], head[0]["hash"]) != (expected_seq - 1, prev):
            return ChainCheck(
                False,
                count,
                head[0]["seq"],
                "the newest events were deleted (the chain ends early)",
            )
        if not head and count:
            return ChainCheck(False, count, None, "the chain's head record is missing")
        if head and verify_key is not None:
            sig = self.query("SELECT sig FROM audit_head")[0]["sig"]
            try:
                if not sig:
                    raise CryptoError("unsigned")
                crypto.verify(
                    head_message(head[0]["seq"], head[0]["hash"]),
                    crypto.unb64(sig),
                    verify_key,
                    "controller",
                )
            except (CryptoError, ValueError):
                return ChainCheck(
                    False,
                    count,
                    head[0]["seq"],
                    "the newest event is not signed by the controller key "
                    "(the log was rewritten, or written without controller keys)",
                )
        return ChainCheck(True, count)
