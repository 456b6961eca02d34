"""The SQLite inventory: nodes, modules, pairs, sealed generations, deliveries, probes, the
rotation journal and the hash-chained audit log, and every SQL statement that reads or writes
them. Callers get typed rows (:mod:`meshtui.inventory.rows`) and never see SQL.

It stores only sealed blobs and digests, never a plaintext credential. Opened read-only
(``mode=ro``) it refuses every write with a clear error before SQLite would.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import sqlite3
import threading
import zlib
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from meshtui.errors import InventoryError, ReadOnlyError
from meshtui.inventory import audit as audit_mod
from meshtui.inventory import image as image_mod
from meshtui.inventory import pg_connection, pg_pool, pg_schema, schema, status_read
from meshtui.inventory.audit import ChainCheck
from meshtui.inventory.engine import SQLITE, Dialect, dialect
from meshtui.inventory.rows import (
    AuditRecord,
    ClaimRecord,
    DeliveryRow,
    DigestKeyRow,
    DrainRecord,
    DrillEvidence,
    DrillRecord,
    DrillRow,
    DrillStepEvidence,
    EventRow,
    FileAccess,
    GenerationRow,
    HeldEnd,
    HeldSealed,
    Identity,
    KeptStatus,
    ModuleRecord,
    ModuleRow,
    NodeRow,
    OwnSecretRow,
    PairRecord,
    PairRow,
    PolicyRecord,
    ProbeRecord,
    ProbeRow,
    Provision,
    RotationItem,
    RotationRow,
    RotationUpdate,
    ScheduleRow,
    StatusChanges,
    StatusMark,
    StatusRow,
    decode_spec,
)
from meshtui.model import OVERLAP, SWAP, Policy, PolicySource, RotationMode, RotationState
from meshtui.protocol.wire import RestoreProof, SignedHead

if TYPE_CHECKING:  # imported when a migration runs: a read never pays for it (~80 ms)
    import sqlite_utils

    from meshtui.inventory.lease import Claimant

RawRow = dict[str, Any]  # open: a row as the engine returns it, before it is cast to its row
"""A row by column name as either engine returns it, before it is cast to its TypedDict in
:mod:`meshtui.inventory.rows` (the schema gives each column its type; no caller sees this)."""

CHUNK = 500
"""Ids per ``IN (...)``: stays under SQLite's variable limit."""


def now() -> str:
    """UTC timestamp with microseconds, the inventory's one time format."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


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


def _decoded_modules(rows: Iterable[RawRow]) -> dict[str, ModuleRow]:
    """Modules' rows by id, each spec decoded from its stored JSON."""
    out: dict[str, ModuleRow] = {}
    for r in rows:
        r["spec"] = decode_spec(r["id"], r["spec"])
        out[r["id"]] = cast(ModuleRow, r)
    return out


def _chunks(values: Iterable[str]) -> Iterator[list[str]]:
    """``values`` sorted, without repeats, in lists that stay under SQLite's parameter limit."""
    wanted = sorted(set(values))
    for i in range(0, len(wanted), CHUNK):
        yield wanted[i : i + CHUNK]


def _marks(n: int) -> str:
    return ",".join("?" * n)


def _columns(table: str, rows: Sequence[Mapping[str, object]]) -> list[str]:
    cols = list(rows[0])
    if any(r.keys() != rows[0].keys() for r in rows):
        raise ValueError(f"rows for {table} differ in their columns")
    return cols


def _insert(conn: sqlite3.Connection, table: str, rows: Sequence[Mapping[str, object]]) -> None:
    """Plain INSERT of many rows (sqlite-utils' insert_all costs more than the sealing)."""
    if rows:
        cols = _columns(table, rows)
        names = ", ".join(f'"{c}"' for c in cols)
        conn.executemany(
            f'INSERT INTO "{table}" ({names}) VALUES ({_marks(len(cols))})',
            [tuple(r[c] for c in cols) for r in rows],
        )


def _upsert(
    conn: sqlite3.Connection, table: str, rows: Sequence[Mapping[str, object]], *pk: str
) -> None:
    """Insert rows, or update every given column of the row already there (rowid kept)."""
    if rows:
        cols = _columns(table, rows)
        names = ", ".join(f'"{c}"' for c in cols)
        sets = ", ".join(f'"{c}" = excluded."{c}"' for c in cols if c not in pk)
        keys = ", ".join(f'"{k}"' for k in pk)
        conn.executemany(
            f'INSERT INTO "{table}" ({names}) VALUES ({_marks(len(cols))}) '
            f"ON CONFLICT({keys}) DO UPDATE SET {sets}",
            [tuple(r[c] for c in cols) for r in rows],
        )


class Transaction:
    """The writes of one :meth:`Inventory.transaction`: every statement that changes the file."""

    def __init__(self, inv: Inventory) -> None:
        self._inv = inv
        self._conn = inv._conn
        self._newest: Callable[[], Sequence[Any] | None] | None = None
        """The audit chain's newest (seq, hash) in this transaction, when known without a
        read of its own: on PostgreSQL sent with the transaction's first statements (its answer
        comes with the first one waited for), then the event this transaction appended."""
        if inv.dialect is not SQLITE:
            self._newest = self._conn.execute(audit_mod.NEWEST_SQL).fetchone

    # ---- the lease -------------------------------------------------------------------------
    def check_lease(self, turn: str, holder: Claimant, epoch: int) -> None:
        """On PostgreSQL: the holding (``holder``, ``epoch``) of ``turn`` still holds, its row
        locked until this transaction ends (:func:`meshtui.inventory.lease.check`);
        LeaseLostError otherwise. SQLite has no lease: nothing to check."""
        raw = getattr(self._conn, "raw", None)
        if raw is not None:
            from meshtui.inventory import lease

            lease.check(raw, turn, holder, epoch)

    # ---- audit ----------------------------------------------------------------------------
    def audit(
        self, kind: str, pairs: Iterable[str], detail: Mapping[str, object], outcome: str
    ) -> AuditRecord:
        """Append one event to the chain and move its (signed) head."""
        event = audit_mod.append(
            self._conn,
            at=now(),
            actor=self._inv.actor,
            signer=self._inv.signer,
            controller=self._inv.controller,
            kind=kind,
            pairs=pairs,
            detail=detail,
            outcome=outcome,
            newest=self._newest,
        )
        if self._newest is not None:  # under the writer lock: no other writer appended since
            self._newest = functools.partial(_newest_of, event)
        return event

    # ---- declare --------------------------------------------------------------------------
    def put_nodes(self, rows: Sequence[NodeRow]) -> None:
        """Insert or update nodes; a node whose address changed changes every manifest line of
        its consumers, so every kept provider base is dropped then."""
        known = dict(self._conn.execute("SELECT name, address FROM nodes").fetchall())
        if any(r["name"] in known and known[r["name"]] != r["address"] for r in rows):
            self._conn.execute("DELETE FROM provider_bases")
        _upsert(self._conn, "nodes", rows, "name")

    def undeclare_nodes(self, names: Iterable[str], stamp: str) -> None:
        """Mark nodes that left the declaration (kept: their history stays readable)."""
        self._conn.executemany(
            "UPDATE nodes SET declared = 0, updated_at = ? WHERE name = ?",
            [(stamp, name) for name in names],
        )

    def put_modules(self, rows: Sequence[ModuleRecord]) -> None:
        """Insert or update modules."""
        _upsert(self._conn, "modules", rows, "id")

    def undeclare_modules(self, ids: Iterable[str]) -> None:
        """Mark modules that left the declaration."""
        self._conn.executemany(
            "UPDATE modules SET declared = 0 WHERE id = ?", [(mid,) for mid in ids]
        )

    def put_pairs(self, rows: Sequence[PairRecord]) -> None:
        """Insert or update pairs (their provisions' kept bases are dropped: a new, moved or
        changed pair is a manifest line the node does not hold yet)."""
        self._drop_bases_of([r["id"] for r in rows])
        self.drop_bases({(r["provider"], r["provision"]) for r in rows})
        _upsert(self._conn, "pairs", rows, "id")

    def withdraw_pairs(self, ids: Iterable[str], stamp: str) -> None:
        """Mark pairs that left the declaration withdrawn (a pair is never deleted)."""
        ids = list(ids)
        self._drop_bases_of(ids)
        self._conn.executemany(
            "UPDATE pairs SET withdrawn_at = ? WHERE id = ?", [(stamp, pid) for pid in ids]
        )

    # ---- provider bases -------------------------------------------------------------------
    def put_bases(self, bases: Mapping[Provision, str | None]) -> None:
        """Keep (or, for None, forget) the consumer-set digest each provision's manifest holds
        as just delivered. Call after :meth:`put_deliveries` in the same transaction."""
        keep = [(prov, name, digest) for (prov, name), digest in bases.items() if digest]
        self.drop_bases([key for key, digest in bases.items() if not digest])
        self._conn.executemany(
            "INSERT INTO provider_bases (provider, provision, digest) VALUES (?, ?, ?) "
            "ON CONFLICT(provider, provision) DO UPDATE SET digest = excluded.digest",
            keep,
        )

    def drop_bases(self, provisions: Iterable[Provision]) -> None:
        """Forget the kept bases of ``provisions``: their next delivery is whole."""
        self._conn.executemany(
            "DELETE FROM provider_bases WHERE provider = ? AND provision = ?", list(provisions)
        )

    def _drop_bases_of(self, pairs: Sequence[str]) -> None:
        """Forget the kept bases of the provisions ``pairs`` (as stored now) belong to."""
        for i in range(0, len(pairs), CHUNK):
            chunk = pairs[i : i + CHUNK]
            self._conn.execute(
                "DELETE FROM provider_bases WHERE (provider, provision) IN (SELECT provider, "
                f"provision FROM pairs WHERE id IN ({_marks(len(chunk))}))",
                chunk,
            )

    def put_policies(self, rows: Sequence[PolicyRecord]) -> None:
        """Insert or update pairs' effective policies."""
        _upsert(self._conn, "policies", rows, "pair")

    def put_claims(self, rows: Sequence[ClaimRecord]) -> None:
        """Record whose each claim at a provider is now."""
        _upsert(self._conn, "claims", rows, "provider", "claim")

    def put_drains(self, rows: Sequence[DrainRecord]) -> None:
        """Record (or count again) pairs' sessions left to drain."""
        _upsert(self._conn, "drains", rows, "pair")

    def forget_drains(self, pairs: Iterable[str]) -> None:
        """Pairs whose sessions left to drain are gone (ended, closed, or the pair withdrawn)."""
        self._conn.executemany("DELETE FROM drains WHERE pair = ?", [(p,) for p in pairs])

    # ---- generations and rotations --------------------------------------------------------
    def add_generations(self, rows: Sequence[GenerationRow]) -> None:
        """Store newly minted, sealed generations."""
        _insert(self._conn, "generations", rows)

    def set_generation(self, pair: str, generation: int, rotated_at: str) -> None:
        """Move a pair to the generation a rotation made current."""
        self._conn.execute(
            "UPDATE pairs SET generation = ?, rotated_at = ? WHERE id = ?",
            (generation, rotated_at, pair),
        )

    def discard_generation(self, pair: str, generation: int, stamp: str) -> None:
        """Drop a generation's sealed blobs once no end may need it again (its digest stays)."""
        self._conn.execute(
            "UPDATE generations SET consumer_sealed = NULL, provider_sealed = NULL, "
            "discarded_at = ? WHERE pair = ? AND generation = ?",
            (stamp, pair, generation),
        )

    def journal_rotation(
        self,
        items: Sequence[RotationItem],
        owner_pid: int,
        state: RotationState = RotationState.JOURNALED,
    ) -> int:
        """Journal a rotation before anything is sent; returns its number. ``state``: where it
        starts (a rotation about to deliver journals itself as delivering, in one commit)."""
        cur = self._conn.execute(
            "INSERT INTO rotations (started_at, state, items, owner_pid) VALUES (?, ?, ?, ?) "
            "RETURNING id",
            (now(), str(state), _compact(items), owner_pid),
        )
        return int(cur.fetchone()[0])

    def update_rotation(self, rotation: int, fields: RotationUpdate) -> None:
        """Record a rotation's progress (state, owner, reason, end)."""
        cols = list(fields)
        if cols:
            sets = ", ".join(f'"{c}" = ?' for c in cols)
            values = cast(Mapping[str, object], fields)
            self._conn.execute(
                f"UPDATE rotations SET {sets} WHERE id = ?",
                (*(values[c] for c in cols), rotation),
            )

    # ---- deliveries, probes, drills -------------------------------------------------------
    def put_deliveries(self, rows: Sequence[DeliveryRow]) -> None:
        """Record which generation each end holds. A provider end recorded anew makes its
        provision's kept base unknown until :meth:`put_bases` says what was delivered."""
        self._drop_bases_of([r["pair"] for r in rows if r["end"] == "provider"])
        _upsert(self._conn, "deliveries", rows, "pair", "end")

    def redeliver(self, ends: Sequence[tuple[str, str, str]]) -> None:
        """(pair, end, why): an end holding its generation is behind until its next delivery
        (what the declaration says it holds changed); a provider end's kept base goes, so that
        delivery is its whole manifest. An end never delivered, or holding nothing, is left."""
        self._drop_bases_of([pair for pair, end, _ in ends if end == "provider"])
        self._conn.executemany(
            'UPDATE deliveries SET error = ? WHERE pair = ? AND "end" = ? AND generation > 0',
            [(why, pair, end) for pair, end, why in ends],
        )

    def touch_deliveries(self, ends: Sequence[tuple[str, str]], stamp: str) -> None:
        """Record a new attempt on (pair, end) rows that nothing else changed: one statement."""
        self._conn.executemany(
            'UPDATE deliveries SET attempted_at = ? WHERE pair = ? AND "end" = ?',
            [(stamp, pair, end) for pair, end in ends],
        )

    def forget_consumer_ends(self, pairs: Sequence[str]) -> None:
        """Forget the consumer ends of revoked pairs (their credential is gone)."""
        for i in range(0, len(pairs), CHUNK):
            chunk = pairs[i : i + CHUNK]
            self._conn.execute(
                f"DELETE FROM deliveries WHERE pair IN ({_marks(len(chunk))}) "
                "AND \"end\" = 'consumer'",
                chunk,
            )

    def add_probes(self, rows: Sequence[ProbeRecord]) -> None:
        """Store probe results."""
        _insert(self._conn, "probes", rows)

    def add_drill(self, row: DrillRecord) -> None:
        """Store a drill's outcome and evidence."""
        _insert(self._conn, "drills", [row])

    def put_own_secrets(self, rows: Sequence[OwnSecretRow]) -> None:
        """Insert or replace the state of modules' own secrets."""
        _upsert(self._conn, "own_secrets", rows, "module", "name")

    def has_digest_key(self) -> bool:
        """Whether any controller holds the mesh's digest key (read under this writer's lock,
        so two controllers never both make one)."""
        return self._conn.execute("SELECT 1 FROM digest_keys LIMIT 1").fetchone() is not None

    def drop_digest_keys(self) -> None:
        """Forget every copy of the mesh's digest key, and each secret's earlier key boxed
        under it (a new key is made in the same transaction)."""
        self._conn.execute("DELETE FROM digest_keys")
        self._conn.execute("UPDATE own_secrets SET digest_key = NULL WHERE digest_key IS NOT NULL")

    def put_digest_keys(self, rows: Sequence[DigestKeyRow]) -> None:
        """Keep the mesh's digest key sealed to each of these controllers."""
        _upsert(self._conn, "digest_keys", rows, "controller")


def _rotation_rows(rows: list[RawRow]) -> list[RotationRow]:
    """Rotations' rows with their items decoded."""
    for r in rows:
        r["items"] = json.loads(r["items"])
    return cast(list[RotationRow], rows)


def _kinds_of(rows: Iterable[Sequence[Any]]) -> dict[tuple[str, str], str]:
    """(provider module, provision) -> kind, from :data:`PROVIDER_SPECS_SQL`'s rows."""
    out: dict[tuple[str, str], str] = {}
    for mid, spec in rows:
        if spec is None:
            continue
        for offer in decode_spec(mid, spec).provides:
            if offer.kind:
                out[(mid, offer.name)] = offer.kind
    return out


def _column_names(cursor: Any) -> list[str]:
    """The names of a read's columns. psycopg's ``description`` makes an object per column at
    every call (16 columns: ~50 µs, a third of a read of one pair); its result's names are
    read directly instead."""
    result = getattr(cursor, "pgresult", None)
    if result is None:
        return [d[0] for d in cursor.description]
    return [bytes(result.fname(i) or b"").decode() for i in range(result.nfields)]


def _newest_of(event: AuditRecord) -> tuple[int, str]:
    return event["seq"], event["hash"]


def _server(conn: object) -> str:
    return str(getattr(conn, "server", "?"))


def _compact(data: object) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _whole(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _drill_evidence(text: str, pair: str) -> DrillEvidence:
    """A drill's stored evidence as its typed shape; a key it lacks (an older row, a row written
    by hand) reads as unknown rather than failing the pair's whole detail."""
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        data = {}
    steps = data.get("steps")
    evidence = DrillEvidence(
        pair=str(data.get("pair") or pair),
        ok=data.get("ok") is True,
        steps=[
            DrillStepEvidence(
                name=str(s.get("name", "?")),
                expected=str(s.get("expected", "?")),
                verdict=str(s.get("verdict", "?")),
                latency_ms=_number(s.get("latency_ms")),
                reason=str(s.get("reason") or ""),
            )
            for s in (steps if isinstance(steps, list) else [])
            if isinstance(s, dict)
        ],
        window_ms=_number(data.get("window_ms")),
        rotation=_whole(data.get("rotation")),
        reason=str(data.get("reason") or ""),
        sessions=str(data.get("sessions")) if data.get("sessions") in ("end", "drain") else "",
        sessions_before=_whole(data.get("sessions_before")),
        sessions_after=_whole(data.get("sessions_after")),
        rotation_kind=OVERLAP if data.get("rotation_kind") == OVERLAP else SWAP,
        both_accepted_ms=_number(data.get("both_accepted_ms")),
        refused=_whole(data.get("refused")),
    )
    return evidence


def _decoded(row: audit_mod.StoredEvent) -> EventRow:
    """A stored audit event with its ``pairs`` and ``detail`` JSON decoded."""
    seq, at, user, ssh, kind, pairs, detail, outcome, prev, digest, controller = row
    return EventRow(
        seq=seq,
        at=at,
        operator=user,
        ssh_client=ssh,
        kind=kind,
        pairs=json.loads(pairs),
        detail=json.loads(detail),
        outcome=outcome,
        prev=prev,
        hash=digest,
        controller=controller,
    )


FenceCheck = Callable[["Transaction"], None]
"""Run first inside a delivering write's transaction: raises when its controller lost its turn
(the lease's check; see :meth:`Inventory.transaction`)."""


class Inventory:
    """One inventory: a SQLite file, or a PostgreSQL database named by a conninfo file. Use
    :meth:`open`; every write goes through :meth:`transaction`."""

    def __init__(
        self, path: Path, conn: sqlite3.Connection | pg_connection.PgConnection, *, read_only: bool
    ) -> None:
        self.path = path
        self.read_only = read_only
        self._conn = cast(sqlite3.Connection, conn)  # a PgConnection answers the same calls
        self.dialect: Dialect = dialect(conn)
        self.where = str(path) if self.dialect is SQLITE else f"PostgreSQL {_server(conn)}"
        """What messages name: the file, or the server (``host:port/dbname``, no password)."""
        self._engine_errors: tuple[type[Exception], ...] = ()
        if self.dialect is SQLITE:
            # as sqlite_utils.Database sets it for the migrations: one behaviour either way
            conn.execute("PRAGMA recursive_triggers = on")
        else:
            import psycopg

            self._engine_errors = (psycopg.Error,)
        self.lock = threading.RLock()
        self.signer: Callable[[bytes], bytes] | None = None  # signs the audit head when set
        self.controller: str | None = None  # the controller whose events these are (signer's)
        self.actor: str | None = None  # the audit's operator when not a person (``watch``)
        self.restore_proof: RestoreProof | None = None  # shown with the head after a restore
        self.fence: FenceCheck | None = None
        """The lease's check of every write while this controller delivers (set by the
        controller's turn; :meth:`transaction` runs it when given none); None otherwise."""
        self._database_oid: int | None = None  # PostgreSQL: read once, by identity()

    @classmethod
    def open(
        cls, path: Path | str, *, read_only: bool = False, postgres: Path | None = None
    ) -> Inventory:
        """Open (and when writable, create and migrate) the inventory at ``path``, or, with
        ``postgres`` (a conninfo file), the PostgreSQL database it names (``path`` then only
        names where the state folder's own files are)."""
        path = Path(path)
        if postgres is not None:
            return cls._open_postgres(path, postgres, read_only=read_only)
        if read_only and not path.exists():
            raise InventoryError(f"{path}: no inventory here (run meshtui declare first)")
        image_mod.check_file(path)  # a truncated or overwritten file: said before SQLite writes
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
                # FULL: every commit's WAL is fsynced before it returns. A rotation's journal
                # must be on disk before anything is sent, and every request shows the nodes
                # the audit head just committed; NORMAL would lose both to a power cut.
                conn.execute("PRAGMA synchronous = FULL")
                inv = cls(path, conn, read_only=False)
                inv._migrate()
        except (OSError, sqlite3.Error) as exc:
            if conn is not None:
                conn.close()
            if isinstance(exc, sqlite3.DatabaseError) and image_mod.is_damage(exc):
                raise image_mod.damaged(path, str(exc)) from exc
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

    @classmethod
    def _open_postgres(cls, path: Path, conninfo: Path, *, read_only: bool) -> Inventory:
        if pg_pool.sharing():
            conn = pg_pool.checkout(conninfo, read_only=read_only)
        else:
            conn = pg_connection.connect(conninfo, read_only=read_only)
        try:
            inv = cls(path, conn, read_only=read_only)
            if read_only:
                inv._check_version()
            else:
                inv._migrate()
        except BaseException as exc:
            conn.close()
            if isinstance(exc, pg_connection.engine_errors()):
                raise InventoryError(
                    f"inventory on PostgreSQL {conn.server}: cannot open it "
                    f"({pg_connection.reason(exc)})"
                ) from None
            raise
        return inv

    @functools.cached_property
    def _db(self) -> sqlite_utils.Database:
        """The connection as sqlite_utils sees it, for the migrations (imported only then)."""
        import sqlite_utils

        return sqlite_utils.Database(self._conn)

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()

    def identity(self) -> Identity | None:
        """Which inventory this is (:class:`~meshtui.inventory.rows.Identity`); None when the
        file is gone. A PostgreSQL database is known by its server and its oid, read once;
        a copy given the same oid (a restore into a new cluster, a promoted standby) is told
        apart by the status mark, which names the session's history
        (:func:`~meshtui.inventory.pg_connection.history`)."""
        try:
            st = os.stat(self.path if self.dialect is SQLITE else self.path.parent)
        except OSError:
            return None
        if self.dialect is SQLITE:
            return Identity(st.st_uid, st.st_gid, st.st_dev, st.st_ino)
        if self._database_oid is None:
            (row,) = self._tuples(DATABASE_OID_SQL)
            self._database_oid = int(row[0])
        server = zlib.crc32(self.where.encode())
        return Identity(st.st_uid, st.st_gid, server, self._database_oid)

    def __enter__(self) -> Inventory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- schema -------------------------------------------------------------------------
    def version(self) -> int:
        """The schema version the file is at (0 for a new file)."""
        if self.dialect is not SQLITE:
            if not self._conn.execute(pg_schema.HAS_VERSION).fetchone()[0]:
                return 0
            row = self._conn.execute(pg_schema.READ_VERSION).fetchone()
            return int(row[0]) if row else 0
        return int(self._conn.execute("PRAGMA user_version").fetchone()[0])

    def data_version(self) -> int:
        """A number that changes whenever another connection commits (an idle check is cheap)."""
        with self.lock, self._reading():
            return int(self._conn.execute(self.dialect.data_version).fetchone()[0])

    def _check_version(self) -> None:
        found = self.version()
        if found > schema.SCHEMA_VERSION:
            raise self._newer(found)
        if found != schema.SCHEMA_VERSION:
            raise InventoryError(
                f"{self.where}: schema version {found}, this meshtui reads "
                f"{schema.SCHEMA_VERSION} (open it once without --read-only to migrate it)"
            )

    def _newer(self, found: int) -> InventoryError:
        return InventoryError(
            f"{self.where}: schema version {found} is newer than this meshtui "
            f"(which reads {schema.SCHEMA_VERSION}); upgrade meshtui"
        )

    def _migrate(self) -> None:
        with self.lock, self._conn:
            self._conn.execute(self.dialect.begin_write)
            if self.dialect is not SQLITE:
                self._migrate_postgres()
                return
            found = self.version()
            if found > schema.SCHEMA_VERSION:
                raise self._newer(found)
            for step in schema.MIGRATIONS[found:]:
                step(self._db)
            self._conn.execute(f"PRAGMA user_version = {int(schema.SCHEMA_VERSION)}")

    def _migrate_postgres(self) -> None:
        """PostgreSQL's steps to :data:`~meshtui.inventory.schema.SCHEMA_VERSION`, in the
        transaction (and under the writer lock) :meth:`_migrate` began: all or none."""
        found = self.version()
        if found > schema.SCHEMA_VERSION:
            raise self._newer(found)
        if found == schema.SCHEMA_VERSION:
            return
        self._conn.execute(pg_schema.VERSION_TABLE)
        for step in pg_schema.PG_MIGRATIONS[found:]:
            step(self._conn)
        self._conn.execute(pg_schema.WRITE_VERSION, [schema.SCHEMA_VERSION])

    # ---- writes -------------------------------------------------------------------------
    def require_writable(self, action: str) -> None:
        """Raise ReadOnlyError when this inventory was opened read-only."""
        if self.read_only:
            raise ReadOnlyError(action)

    @contextmanager
    def transaction(self, action: str, fence: FenceCheck | None = None) -> Iterator[Transaction]:
        """One atomic write; refused up front when read-only, the engine's errors made clear.

        It waits for every other writer (SQLite's ``BEGIN IMMEDIATE``; on PostgreSQL the
        writer lock of :data:`~meshtui.inventory.engine.POSTGRES`). ``fence``, when given, runs
        first inside it and raises when the writer lost its turn: nothing is written then.
        """
        self.require_writable(action)
        fence = fence if fence is not None else self.fence
        with self.lock:
            try:
                with self._writing():
                    tx = Transaction(self)
                    if fence is not None:
                        fence(tx)
                    yield tx
            except self._engine_errors as exc:
                raise pg_connection.failed(self.where, action, exc) from None
            except sqlite3.OperationalError as exc:
                if "readonly" in str(exc):
                    raise ReadOnlyError(action) from exc
                if image_mod.is_damage(exc):
                    raise image_mod.damaged(self.path, str(exc)) from exc
                raise InventoryError(f"{self.path}: {action} failed: {exc}") from exc
            except sqlite3.IntegrityError as exc:
                raise InventoryError(
                    f"{self.path}: {action} conflicts with what is stored ({exc}); nothing was "
                    "written (run meshtui push, then try again)"
                ) from exc
            except sqlite3.DatabaseError as exc:
                if image_mod.is_damage(exc):
                    raise image_mod.damaged(self.path, str(exc)) from exc
                raise InventoryError(f"{self.path}: {action} failed: {exc}") from exc

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """A write transaction begun, committed at the end, rolled back on an error: SQLite's
        own, or PostgreSQL's pipelined one (:meth:`~meshtui.inventory.pg_connection.
        PgConnection.writing`)."""
        if self.dialect is SQLITE:
            with self._conn:
                self._conn.execute(self.dialect.begin_write)
                yield
        else:
            with cast(pg_connection.PgConnection, self._conn).writing():
                yield

    def record(
        self, kind: str, pairs: Iterable[str], detail: Mapping[str, object], outcome: str
    ) -> AuditRecord:
        """A standalone audit event in its own transaction."""
        with self.transaction(kind) as tx:
            return tx.audit(kind, pairs, detail, outcome)

    # ---- reads --------------------------------------------------------------------------
    def _query(self, sql: str, params: Sequence[object] = ()) -> list[RawRow]:
        """Rows as plain dicts, for the typed reads below to cast (open: any table's
        columns; no row leaves the store in this shape)."""
        with self.lock, self._reading():
            cursor = self._conn.execute(sql, list(params))
            rows = cursor.fetchall()  # first: a pipelined write describes its rows once read
            keys = _column_names(cursor)
            if len(set(keys)) != len(keys):  # a join naming a column twice: as sqlite_utils does
                from sqlite_utils.utils import dedupe_keys

                keys = dedupe_keys(keys)
            return [dict(zip(keys, row, strict=True)) for row in rows]

    def _tuples(self, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        with self.lock, self._reading():
            return self._conn.execute(sql, params).fetchall()

    @contextmanager
    def _reading(self) -> Iterator[None]:
        """A read whose pages turn out damaged raises the damaged-inventory error (names the
        file, points to restore) instead of SQLite's bare message; a PostgreSQL read that fails
        names the server."""
        try:
            yield
        except self._engine_errors as exc:
            raise pg_connection.failed(self.where, "reading", exc) from None
        except sqlite3.DatabaseError as exc:
            if image_mod.is_damage(exc):
                raise image_mod.damaged(self.path, str(exc)) from exc
            raise

    def image(self) -> image_mod.Image:
        """A consistent image of the whole file (SQLite's online backup, safe while another
        process writes) and what it holds: what ``meshtui backup`` saves."""
        if self.dialect is not SQLITE:
            raise InventoryError(
                f"{self.where}: meshtui backup saves a SQLite inventory; back up a PostgreSQL "
                "inventory with pg_dump beside the state folder (docs/inventory-postgres.md)"
            )
        with self.lock, self._reading():
            return image_mod.take(self._conn, self.path)

    def nodes(self) -> dict[str, NodeRow]:
        """Every node by name."""
        rows = cast(list[NodeRow], self._query("SELECT * FROM nodes ORDER BY name"))
        return {r["name"]: r for r in rows}

    def _where_in(self, sql: str, column: str, values: Iterable[str]) -> list[RawRow]:
        """``sql`` (a SELECT without WHERE) for the rows whose ``column`` is one of ``values``,
        in chunks that stay under SQLite's parameter limit."""
        rows: list[RawRow] = []
        for chunk in _chunks(values):
            rows += self._query(f"{sql} WHERE {column} IN ({_marks(len(chunk))})", chunk)
        return rows

    def _tuples_in(
        self, sql: str, column: str, values: Iterable[str] | None, *, joiner: str = "WHERE"
    ) -> list[tuple[Any, ...]]:
        """:meth:`_where_in` as plain tuples (``joiner`` is ``AND`` when ``sql`` has its own
        WHERE); every row when ``values`` is None."""
        if values is None:
            return self._tuples(sql)
        rows: list[tuple[Any, ...]] = []
        for chunk in _chunks(values):
            rows += self._tuples(f"{sql} {joiner} {column} IN ({_marks(len(chunk))})", chunk)
        return rows

    def modules(self, ids: Iterable[str] | None = None) -> dict[str, ModuleRow]:
        """Every module by id (or the named ones), with its spec decoded."""
        rows = (
            self._query("SELECT * FROM modules ORDER BY id")
            if ids is None
            else self._where_in("SELECT * FROM modules", "id", ids)
        )
        return _decoded_modules(rows)

    def modules_naming(self, key: str) -> dict[str, ModuleRow]:
        """The declared modules whose spec may hold ``key`` (its JSON text names it), by id,
        with their spec decoded: the few a reader of a rare key needs (``status`` reads the
        modules' own secrets on every read; decoding every module's spec at 10,000 pairs
        was 80 ms of it)."""
        return _decoded_modules(
            self._query(
                "SELECT * FROM modules WHERE declared <> 0 AND "
                + self.dialect.contains.format("spec")
                + " > 0 ORDER BY id",
                [json.dumps(key)],
            )
        )

    def module_specs(self, ids: Iterable[str] | None = None) -> ModuleSpecs:
        """Every module (or the named ones) by id, each spec decoded only when that module is
        asked for (a push's planner at 10,000 pairs held 17.7 MiB of decoded consumer specs it
        reads once each; rotate all's focused planner 17.4 MiB)."""
        sql = "SELECT id, node, name, spec, declared FROM modules"
        if ids is None:
            return ModuleSpecs(self._tuples(f"{sql} ORDER BY id"))
        return ModuleSpecs(self._tuples_in(sql, "id", ids))

    def module_records(self) -> dict[str, ModuleRecord]:
        """Every module by id, its spec as stored (declare compares the canonical JSON)."""
        rows = cast(list[ModuleRecord], self._query("SELECT * FROM modules"))
        return {r["id"]: r for r in rows}

    def pairs(
        self, ids: Iterable[str] | None = None, *, providers: Iterable[str] | None = None
    ) -> list[PairRow]:
        """Pairs (all, the named ones, or every pair of the named provider modules) with values
        and reload decoded, by id. ``providers`` wins over ``ids``."""
        if providers is not None:
            rows = self._where_in("SELECT * FROM pairs", "provider", providers)
            rows.sort(key=lambda r: str(r["id"]))
        elif ids is not None:
            rows = self._where_in("SELECT * FROM pairs", "id", ids)
            rows.sort(key=lambda r: str(r["id"]))
        else:
            rows = self._query("SELECT * FROM pairs ORDER BY id")
        for r in rows:
            r["values"] = json.loads(r["values"])
            r["reload"] = json.loads(r["reload"])
        return cast(list[PairRow], rows)

    def pair_records(self) -> dict[str, PairRecord]:
        """Every pair by id as stored (values and reload still JSON)."""
        rows = cast(list[PairRecord], self._query("SELECT * FROM pairs"))
        return {r["id"]: r for r in rows}

    def consumer_files(self) -> dict[str, FileAccess]:
        """Every pair's declared credential file: path, owner, group and mode."""
        rows = self._tuples("SELECT id, file, file_owner, file_group, file_mode FROM pairs")
        return {
            pid: FileAccess(file=file, file_owner=owner, file_group=group, file_mode=mode)
            for pid, file, owner, group, mode in rows
        }

    def live_pair_ids(self, provider: str | None = None) -> list[str]:
        """The ids of every pair that is not withdrawn (of one provider module, when named)."""
        if provider is None:
            rows = self._tuples("SELECT id FROM pairs WHERE withdrawn_at IS NULL ORDER BY id")
        else:
            rows = self._tuples(
                "SELECT id FROM pairs WHERE provider = ? AND withdrawn_at IS NULL ORDER BY id",
                [provider],
            )
        return [str(r[0]) for r in rows]

    def policies(self) -> dict[str, Policy]:
        """Every pair's effective policy as declare stored it (pairs without a row: default)."""
        return {
            r["pair"]: Policy(
                rotate_every=r["rotate_every"],
                probe_every=r["probe_every"],
                rotate_source=PolicySource(r["rotate_source"]),
                probe_source=PolicySource(r["probe_source"]),
            )
            for r in self.policy_records().values()
        }

    def policy_records(self) -> dict[str, PolicyRecord]:
        """Every stored policy row by pair."""
        rows = self._tuples(
            "SELECT pair, rotate_every, probe_every, rotate_source, probe_source, rotation, "
            "grace FROM policies"
        )
        return {
            pid: PolicyRecord(
                pair=pid,
                rotate_every=rotate,
                probe_every=probe,
                rotate_source=rsrc,
                probe_source=psrc,
                rotation=rotation,
                grace=grace,
            )
            for pid, rotate, probe, rsrc, psrc, rotation, grace in rows
        }

    def rotation_modes(self, pairs: Iterable[str]) -> dict[str, RotationMode]:
        """How each of ``pairs`` rotates, as declared (a pair without a policy row: a swap)."""
        wanted = list(pairs)
        out = {pid: RotationMode() for pid in wanted}
        for i in range(0, len(wanted), CHUNK):
            chunk = wanted[i : i + CHUNK]
            for pid, rotation, grace in self._tuples(
                f"SELECT pair, rotation, grace FROM policies WHERE pair IN ({_marks(len(chunk))})",
                chunk,
            ):
                out[pid] = RotationMode(rotation, grace)
        return out

    def overlapping(self) -> dict[str, RotationMode]:
        """Every pair declared ``rotation = "overlap"``, with its mode: one read of the few,
        for ``status``, which must not look up every pair's mode to find them."""
        rows = self._tuples(
            "SELECT pair, rotation, grace FROM policies WHERE rotation = ?", [OVERLAP]
        )
        return {pid: RotationMode(rotation, grace) for pid, rotation, grace in rows}

    def drains(self) -> dict[str, DrainRecord]:
        """Every pair's sessions left to drain, by pair."""
        rows = self._tuples(
            "SELECT pair, rotation, mark, until, sessions, counted_at FROM drains ORDER BY pair"
        )
        return {
            pair: DrainRecord(
                pair=pair,
                rotation=rotation,
                mark=mark,
                until=until,
                sessions=sessions,
                counted_at=counted_at,
            )
            for pair, rotation, mark, until, sessions, counted_at in rows
        }

    def claims(self) -> dict[tuple[str, str], ClaimRecord]:
        """Every recorded claim by (provider, claim): whose it is, or was last."""
        rows = self._tuples("SELECT provider, claim, module, since FROM claims")
        return {
            (provider, claim): ClaimRecord(provider=provider, claim=claim, module=m, since=since)
            for provider, claim, m, since in rows
        }

    def generation(self, pair: str, generation: int) -> GenerationRow | None:
        """One sealed generation of a pair."""
        rows = self._query(
            "SELECT * FROM generations WHERE pair = ? AND generation = ?", [pair, generation]
        )
        return cast(GenerationRow, rows[0]) if rows else None

    def generations(self, pair: str) -> list[GenerationRow]:
        """Every generation of a pair, oldest first."""
        rows = self._query("SELECT * FROM generations WHERE pair = ? ORDER BY generation", [pair])
        return cast(list[GenerationRow], rows)

    def held_generations(
        self, pairs: Iterable[str] | None = None
    ) -> dict[tuple[str, int], HeldSealed]:
        """Every generation still held sealed (of every pair, or the named ones), by (pair,
        generation): its digest and two blobs, as plain tuples (a push's planner at 10,000
        pairs held 7.6 MiB of them as rows)."""
        sql = (
            "SELECT pair, generation, digest, consumer_sealed, provider_sealed FROM generations "
            "WHERE discarded_at IS NULL"
        )
        rows = self._tuples_in(sql, "pair", pairs, joiner="AND")
        return {(r[0], int(r[1])): (r[2], r[3], r[4]) for r in rows}

    def minted(self, pairs: Iterable[str] | None = None) -> dict[str, list[int]]:
        """Every pair's (or the named pairs') minted generation numbers, ascending."""
        out: dict[str, list[int]] = {}
        if pairs is None:
            found = self._tuples("SELECT pair, generation FROM generations ORDER BY generation")
        else:
            rows = self._where_in("SELECT pair, generation FROM generations", "pair", pairs)
            found = sorted(((r["pair"], r["generation"]) for r in rows), key=lambda t: t[1])
        for pair, generation in found:
            out.setdefault(pair, []).append(int(generation))
        return out

    def generation_by_digest(self) -> dict[tuple[str, str], int]:
        """(pair, digest) -> the generation with that digest (what an end holds, by digest)."""
        rows = self._tuples("SELECT pair, generation, digest FROM generations")
        return {(pair, digest): int(generation) for pair, generation, digest in rows}

    def deliveries(
        self, pair: str | None = None, *, pairs: Iterable[str] | None = None
    ) -> dict[tuple[str, str], DeliveryRow]:
        """Which generation each end holds, by (pair, end); all pairs, one, or the named ones."""
        if pairs is not None:
            rows = self._where_in("SELECT * FROM deliveries", "pair", pairs)
        elif pair is None:
            rows = self._query("SELECT * FROM deliveries")
        else:
            rows = self._query("SELECT * FROM deliveries WHERE pair = ?", [pair])
        return {(r["pair"], r["end"]): cast(DeliveryRow, r) for r in rows}

    def held_ends(self, pairs: Iterable[str] | None = None) -> dict[tuple[str, str], HeldEnd]:
        """What each end holds, by (pair, end), as plain tuples (generation, digest, since,
        error): all pairs, or the named ones. Recording a rotation of 10,000 pairs compares
        20,000 ends; as :meth:`deliveries`' dicts they held 13 MiB."""
        sql = 'SELECT pair, "end", generation, digest, since, error FROM deliveries'
        rows = self._tuples_in(sql, "pair", pairs)
        return {(r[0], r[1]): (r[2], r[3], r[4], r[5]) for r in rows}

    def bases(self, provisions: Iterable[Provision]) -> dict[Provision, str]:
        """The kept consumer-set digest of each named provision that has one."""
        out: dict[Provision, str] = {}
        for provider, provision in set(provisions):
            for (digest,) in self._tuples(
                "SELECT digest FROM provider_bases WHERE provider = ? AND provision = ?",
                (provider, provision),
            ):
                out[(provider, provision)] = str(digest)
        return out

    def latest_probes(self) -> dict[str, ProbeRow]:
        """The newest probe of every pair."""
        rows = self._query("SELECT p.* FROM pair_ends e JOIN probes p ON p.id = e.probe")
        return {r["pair"]: cast(ProbeRow, r) for r in rows}

    def probes(self, pair: str, limit: int = 50) -> list[ProbeRow]:
        """A pair's recent probes, newest first."""
        rows = self._query(
            "SELECT * FROM probes WHERE pair = ? ORDER BY id DESC LIMIT ?", [pair, limit]
        )
        return cast(list[ProbeRow], rows)

    def drills(self, pair: str | None = None, limit: int = 50) -> list[DrillRow]:
        """Recent drills (of one pair, or all), newest first, evidence decoded."""
        if pair is None:
            rows = self._query("SELECT * FROM drills ORDER BY id DESC LIMIT ?", [limit])
        else:
            rows = self._query(
                "SELECT * FROM drills WHERE pair = ? ORDER BY id DESC LIMIT ?", [pair, limit]
            )
        for r in rows:
            r["evidence"] = _drill_evidence(r["evidence"], r["pair"])
        return cast(list[DrillRow], rows)

    def open_rotations(self) -> list[RotationRow]:
        """Rotations journaled but not finished (a controller may have died mid-way)."""
        return _rotation_rows(self._query(status_read.OPEN_ROTATIONS_SQL))

    def rotations(self, limit: int | None = 100) -> list[RotationRow]:
        """Recent rotations (all when ``limit`` is None), newest first."""
        rows = self._query(
            "SELECT * FROM rotations ORDER BY id DESC LIMIT ?",
            [self.dialect.no_limit if limit is None else limit],
        )
        for r in rows:
            r["items"] = json.loads(r["items"])
        return cast(list[RotationRow], rows)

    def events(self, limit: int | None = None) -> list[EventRow]:
        """Audit events (the newest ``limit``, or all), oldest first, pairs and detail decoded."""
        with self.lock, self._reading():
            return [_decoded(r) for r in audit_mod.stored(self._conn, limit=limit)]

    def last_event(self, kind: str) -> EventRow | None:
        """The newest audit event of one kind, decoded, or None."""
        with self.lock, self._reading():
            rows = audit_mod.stored(self._conn, limit=1, kind=kind)
        return _decoded(rows[0]) if rows else None

    def status_rows(
        self, ids: Iterable[str] | None = None, limit: int | None = None
    ) -> list[StatusRow]:
        """Every pair (or the named ones, or the first ``limit`` by id) joined with its two ends
        and newest probe, by id."""
        if ids is not None:
            ids = sorted(set(ids))
            if not ids:
                return []
        with self.lock, self._reading():
            if ids is None and limit is None:
                return status_read.every(self._conn)
            return status_read.named(self._conn, ids, limit)

    def status_changes(self, since: StatusMark | None, also: Collection[str] = ()) -> StatusChanges:
        """Every pair by id, or, while ``since`` (a read's mark) holds for this file, only the
        pairs written since, by any connection, and those in ``also`` (see
        :mod:`~meshtui.inventory.status_read`)."""
        with self.lock, self._reading():
            return status_read.changes(self._conn, since, also)

    def schedule_rows(self, declared_only: bool = False) -> list[ScheduleRow]:
        """Every pair with its policy and when its current generation began, by id.

        ``declared_only``: only the pairs with a policy declared at some level (the rest have
        the default one: no rotation, the default probe interval), for readers that show only
        those, such as the dashboard, which reads every pair's status beside it.
        """
        sql = SCHEDULE_SQL + (SCHEDULE_DECLARED if declared_only else "") + " ORDER BY p.id"
        return cast(list[ScheduleRow], self._tuples(sql))

    def last_seq(self) -> int:
        """The number of the newest audit event (0: none yet)."""
        with self.lock, self._reading():
            return audit_mod.last_seq(self._conn)

    def signed_head(self) -> SignedHead | None:
        """The chain's head with the controller's signature (None: no events, or unsigned)."""
        with self.lock, self._reading():
            head = audit_mod.signed_head(self._conn)
        if head is None or self.restore_proof is None:
            return head
        return dataclasses.replace(head, restore=self.restore_proof)

    def event_hash_at(self, seq: int) -> str | None:
        """The stored hash of audit event ``seq`` (None when there is no such event)."""
        with self.lock, self._reading():
            return audit_mod.hash_at(self._conn, seq)

    def digest_keys(self) -> dict[str, DigestKeyRow]:
        """The mesh's digest key as each controller holds it (sealed), by controller."""
        rows = self._query("SELECT * FROM digest_keys ORDER BY controller")
        return {r["controller"]: cast(DigestKeyRow, r) for r in rows}

    def own_secrets(self) -> dict[tuple[str, str], OwnSecretRow]:
        """Every own secret's state, by (module, name)."""
        rows = self._query("SELECT * FROM own_secrets ORDER BY module, name")
        return {(r["module"], r["name"]): cast(OwnSecretRow, r) for r in rows}

    def provider_kinds(self) -> dict[tuple[str, str], str]:
        """(provider module, provision) -> kind, for the providers of pairs that are not
        PostgreSQL. Only the modules some pair names as its provider are read, found by a walk
        of the provider index that skips from one provider to the next (a lookup per provider,
        not a pass over every pair or module, since every kept status read asks)."""
        return _kinds_of(self._tuples(PROVIDER_SPECS_SQL))

    def status_kept(self, since: StatusMark | None, before: Mapping[str, int]) -> KeptStatus:
        """What a keeping status reader reads each time (:class:`~meshtui.inventory.rows.
        KeptStatus`): the open rotations, the provider kinds, and the pairs changed since its
        mark ``since`` with those whose open rotation (``before``: pair -> rotation, as it last
        read them) began, ended or changed (it reads the pairs of every rotation open before or
        now again: the same statuses), all in one round trip on PostgreSQL. Otherwise (SQLite,
        or no mark) the rotations and kinds, one read each, and no changes: the reader reads
        them next with :meth:`status_changes`."""
        with self.lock, self._reading():
            if since is not None and self.dialect is not SQLITE and not self._conn.in_transaction:
                rotations, kinds, changes = status_read.kept_at_once(
                    self._conn, since, before.keys(), PROVIDER_SPECS_SQL
                )
                keys = status_read.ROTATION_COLUMNS
                raw = [dict(zip(keys, row, strict=True)) for row in rotations]
                return KeptStatus(_rotation_rows(raw), _kinds_of(kinds), changes)
        return KeptStatus(self.open_rotations(), self.provider_kinds(), None)

    def verify_chain(self, verify_key: bytes | audit_mod.KeyOf | None = None) -> ChainCheck:
        """Walk the audit chain; name the first edited, deleted or reordered event.

        With ``verify_key`` (the controller's, or each controller's by name) the head must also
        carry the signature of the controller that appended it, so a chain
        rewritten by someone who can write the file but has no controller key is caught.
        """
        with self.lock, self._reading():
            return audit_mod.walk(self._conn, verify_key)


class ModuleSpecs(Mapping[str, ModuleRow]):
    """Modules by id as stored, each decoded when asked for; the last few hundred decoded are
    kept (a provider's spec is asked for once per pair), the rest dropped again."""

    KEEP = 256
    """Decoded rows kept at most; all dropped when full (decoding one again is cheap)."""

    def __init__(self, rows: Iterable[tuple[Any, ...]]) -> None:
        self._raw = {str(r[0]): r for r in rows}
        self._decoded: dict[str, ModuleRow] = {}

    def __getitem__(self, mid: str) -> ModuleRow:
        row = self._decoded.get(mid)
        if row is None:
            _, node, name, spec, declared = self._raw[mid]
            spec = decode_spec(mid, spec)
            row = ModuleRow(id=mid, node=node, name=name, spec=spec, declared=declared)
            if len(self._decoded) >= self.KEEP:
                self._decoded.clear()
            self._decoded[mid] = row
        return row

    def __contains__(self, mid: object) -> bool:
        return mid in self._raw

    def __iter__(self) -> Iterator[str]:
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)


DATABASE_OID_SQL = "SELECT oid FROM pg_database WHERE datname = current_database()"
"""PostgreSQL: this database's number on its server (a dump restored is given another)."""

PROVIDER_SPECS_SQL = """
WITH RECURSIVE providers(id) AS (
    SELECT min(provider) FROM pairs
    UNION ALL
    SELECT (SELECT min(provider) FROM pairs WHERE provider > providers.id)
    FROM providers WHERE providers.id IS NOT NULL
)
SELECT providers.id,
       (SELECT m.spec FROM modules m WHERE m.id = providers.id AND m.spec LIKE '%"kind"%')
FROM providers WHERE providers.id IS NOT NULL
"""
"""Each provider module and its stored spec when that names a kind (NULL otherwise): the
distinct providers of the pairs walked through their index one ``min(provider) > previous`` at
a time, then each one's module row looked up (a subquery per provider, so neither engine's
planner scans every module's spec instead)."""

SCHEDULE_SQL = """
SELECT p.id, p.provider, p.consumer, p.withdrawn_at, COALESCE(p.rotated_at, p.created_at),
       o.rotate_every, o.probe_every, o.rotate_source, o.probe_source
FROM pairs p LEFT JOIN policies o ON o.pair = p.id
"""
"""One row per pair, in :data:`~meshtui.inventory.rows.ScheduleRow`'s column order."""

SCHEDULE_DECLARED = """
WHERE o.rotate_every IS NOT NULL OR o.rotate_source != 'default' OR o.probe_source != 'default'
"""
"""Keeps the pairs whose policy was declared somewhere (a missing policy row is the default)."""
