"""The inventory's schema: the migrations that build it, in order, and the version they reach.

``MIGRATIONS[i]`` takes a file from version i to i+1, so :data:`SCHEMA_VERSION` is their count
and cannot drift from them. Append a step for a change; never edit one that shipped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the connection is handed in: a read that migrates nothing never imports it
    import sqlite_utils


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


def _provider_bases_v5(db: sqlite_utils.Database) -> None:
    """Per (provider module, provision): the digest of the consumer set its node's manifest
    holds as last delivered (:func:`meshtui.protocol.messages.consumer_set_digest`), kept so a rotation's
    delta names its base without reading the provision's every pair. Empty after the upgrade:
    each provision's next delivery is whole once."""
    db.execute(
        "CREATE TABLE provider_bases (provider TEXT NOT NULL, provision TEXT NOT NULL, "
        "digest TEXT NOT NULL, PRIMARY KEY (provider, provision))"
    )


PAIR_ENDS = {
    "consumer": {"consumer_generation": "generation", "consumer_error": "error"},
    "provider": {
        "provider_generation": "generation",
        "provider_error": "error",
        "provider_attempted_at": "attempted_at",
    },
}
"""``pair_ends``' columns for each end, and the ``deliveries`` column each is read from."""


PAIR_ENDS_FILL = """INSERT INTO pair_ends SELECT k.pair, c.generation, c.error, v.generation, v.error,
    v.attempted_at, (SELECT MAX(id) FROM probes WHERE pair = k.pair)
FROM (SELECT pair FROM deliveries UNION SELECT pair FROM probes) k
LEFT JOIN deliveries c ON c.pair = k.pair AND c."end" = 'consumer'
LEFT JOIN deliveries v ON v.pair = k.pair AND v."end" = 'provider'"""
"""``pair_ends`` filled from what ``deliveries`` and ``probes`` already hold."""


def held(end: str) -> str:
    """The statement a trigger runs to put NEW's ``end`` into its pair's ``pair_ends`` row."""
    cols = PAIR_ENDS[end]
    return (
        f"INSERT INTO pair_ends (pair, {', '.join(cols)}) "
        f"VALUES (NEW.pair, {', '.join('NEW.' + c for c in cols.values())}) "
        "ON CONFLICT (pair) DO UPDATE SET " + ", ".join(f"{c} = excluded.{c}" for c in cols) + ";"
    )


def gone(end: str) -> str:
    """The statement a trigger runs to take OLD's ``end`` out of its pair's row."""
    return (
        f"UPDATE pair_ends SET {', '.join(c + ' = NULL' for c in PAIR_ENDS[end])} "
        f"WHERE pair = OLD.pair AND OLD.\"end\" = '{end}';"
    )


def _pair_ends_v6(db: sqlite_utils.Database) -> None:
    """One row per pair with what status reads of its two ends (generation, error; the
    provider's last attempt) and the id of its newest probe, kept by triggers in the very
    statement that writes a delivery or a probe, so status finds a pair's ends and newest probe
    with one lookup instead of three searches; filled from what is already stored."""
    statements = [
        "CREATE TABLE pair_ends (pair TEXT PRIMARY KEY, consumer_generation INTEGER, "
        "consumer_error TEXT, provider_generation INTEGER, provider_error TEXT, "
        "provider_attempted_at TEXT, probe INTEGER)",
        PAIR_ENDS_FILL,
    ]
    for end in PAIR_ENDS:  # one trigger per end and event: each row runs one statement
        statements += [
            f"CREATE TRIGGER pair_ends_{end}_delivered AFTER INSERT ON deliveries "
            f"WHEN NEW.\"end\" = '{end}' BEGIN {held(end)} END",
            f"CREATE TRIGGER pair_ends_{end}_redelivered AFTER UPDATE ON deliveries "
            f"WHEN NEW.\"end\" = '{end}' BEGIN {held(end)} END",
        ]
    statements += [
        # no writer moves a delivery to another pair or end; kept right if one ever does
        'CREATE TRIGGER pair_ends_moved AFTER UPDATE OF pair, "end" ON deliveries '
        'WHEN OLD.pair IS NOT NEW.pair OR OLD."end" IS NOT NEW."end" '
        f"BEGIN {gone('consumer')} {gone('provider')} END",
        f"CREATE TRIGGER pair_ends_forgotten AFTER DELETE ON deliveries "
        f"BEGIN {gone('consumer')} {gone('provider')} END",
        """CREATE TRIGGER pair_ends_probed AFTER INSERT ON probes BEGIN
            INSERT INTO pair_ends (pair, probe) VALUES (NEW.pair, NEW.id)
            ON CONFLICT (pair) DO UPDATE SET probe = excluded.probe
            WHERE pair_ends.probe IS NULL OR excluded.probe > pair_ends.probe;
        END""",
        """CREATE TRIGGER pair_ends_unprobed AFTER DELETE ON probes BEGIN
            UPDATE pair_ends SET probe = (SELECT MAX(id) FROM probes WHERE pair = OLD.pair)
            WHERE pair = OLD.pair AND probe = OLD.id;
        END""",
    ]
    for statement in statements:
        db.execute(statement)


def _own_secrets_v7(db: sqlite_utils.Database) -> None:
    """A module's own secrets: the version the mesh wants held and its digest, the sealed blob
    for the vault node until the vault stored it, which version the vault and the module's file
    hold, and who supplied it when (never a value)."""
    db.execute(
        """CREATE TABLE own_secrets (module TEXT NOT NULL, name TEXT NOT NULL,
            version INTEGER NOT NULL, digest TEXT, sealed BLOB, vault_version INTEGER,
            kv_version INTEGER, file_version INTEGER, supplied_by TEXT, supplied_at TEXT,
            error TEXT, updated_at TEXT NOT NULL, PRIMARY KEY (module, name))"""
    )


STATIC_PAIR_COLUMNS = ("id", "provision", "consumer", "provider", "login", "file", "created_at")
"""The pair columns status shows that no rotation, delivery or probe changes: only declare
writes them (a pair added, or its file or login changed). :func:`_pairs_stamp_v8` stamps the
table anew whenever one of them changes."""


def _pairs_stamp_v8(db: sqlite_utils.Database) -> None:
    """One random stamp for the pairs table's static columns, drawn anew by triggers in the
    very statement that adds or deletes a pair or writes one of :data:`STATIC_PAIR_COLUMNS`,
    so a long-lived reader may keep those columns between status reads while the stamp it read
    them at is the stamp the file holds (a rotation, a delivery or a probe leaves it alone)."""
    static = ", ".join(STATIC_PAIR_COLUMNS)
    draw = "BEGIN UPDATE pairs_stamp SET stamp = random(); END"
    for statement in (
        "CREATE TABLE pairs_stamp (id INTEGER PRIMARY KEY CHECK (id = 1), stamp INTEGER NOT NULL)",
        "INSERT INTO pairs_stamp (id, stamp) VALUES (1, random())",
        f"CREATE TRIGGER pairs_stamp_added AFTER INSERT ON pairs {draw}",
        f"CREATE TRIGGER pairs_stamp_deleted AFTER DELETE ON pairs {draw}",
        f"CREATE TRIGGER pairs_stamp_changed AFTER UPDATE OF {static} ON pairs {draw}",
    ):
        db.execute(statement)


STATUS_TICKS = {
    "pair_written": ("UPDATE", "pairs", "NEW.id", ""),
    "delivered": ("INSERT", "deliveries", "NEW.pair", ""),
    "redelivered": ("UPDATE", "deliveries", "NEW.pair", ""),
    "delivery_moved": ("UPDATE", "deliveries", "OLD.pair", "WHEN OLD.pair IS NOT NEW.pair"),
    "delivery_forgotten": ("DELETE", "deliveries", "OLD.pair", ""),
    "probed": ("INSERT", "probes", "NEW.pair", ""),
    "probe_rewritten": ("UPDATE", "probes", "NEW.pair", ""),
    "probe_deleted": ("DELETE", "probes", "OLD.pair", ""),
}
"""Every write a status row is read from, as the trigger ``status_ticks_<name>`` that ticks
its pair: (event, table, the pair, when). A pair's static columns and the rows of ``pair_ends``
need none of their own: a pair added or deleted, or a static column written, draws a new pairs
stamp (:func:`_pairs_stamp_v8`), and ``pair_ends`` is written only by the triggers of
``deliveries`` and ``probes``."""


def _status_ticks_v9(db: sqlite_utils.Database) -> None:
    """A status clock and, per pair, the clock's tick when a row its status is read from was
    last written (:data:`STATUS_TICKS`), set by triggers in the very statement that writes it,
    so a reader that read every pair up to one tick reads next only the pairs ticked since (an
    index range), whichever connection wrote them. The clock's ``epoch`` is drawn once, at
    random: a reader never takes another file's ticks for this one's."""
    tick = (
        "UPDATE status_clock SET tick = tick + 1; "
        "INSERT INTO status_ticks (pair, tick) VALUES ({pair}, (SELECT tick FROM status_clock)) "
        "ON CONFLICT (pair) DO UPDATE SET tick = excluded.tick;"
    )
    statements = [
        "CREATE TABLE status_clock (id INTEGER PRIMARY KEY CHECK (id = 1), "
        "epoch INTEGER NOT NULL, tick INTEGER NOT NULL)",
        "INSERT INTO status_clock (id, epoch, tick) VALUES (1, random(), 0)",
        "CREATE TABLE status_ticks (pair TEXT PRIMARY KEY, tick INTEGER NOT NULL)",
        "CREATE INDEX status_ticks_tick ON status_ticks (tick)",
    ]
    for name, (event, table, pair, when) in STATUS_TICKS.items():
        statements.append(
            f"CREATE TRIGGER status_ticks_{name} AFTER {event} ON {table} {when} "
            f"BEGIN {tick.format(pair=pair)} END"
        )
    for statement in statements:
        db.execute(statement)


def _claims_v10(db: sqlite_utils.Database) -> None:
    """Whose each claim at a provider is (an object store's bucket): the module that made it,
    kept after it is withdrawn, so a later consumer does not inherit what it left there."""
    db.execute(
        "CREATE TABLE claims (provider TEXT NOT NULL, claim TEXT NOT NULL, module TEXT NOT NULL, "
        "since TEXT NOT NULL, PRIMARY KEY (provider, claim))"
    )


def _rotation_modes_v11(db: sqlite_utils.Database) -> None:
    """Each pair's rotation as declared (``swap`` or ``overlap``) and an overlap's grace in
    seconds, beside its policy: every pair stored before reads as a swap."""
    db.execute("ALTER TABLE policies ADD COLUMN rotation TEXT NOT NULL DEFAULT 'swap'")
    db.execute("ALTER TABLE policies ADD COLUMN grace REAL NOT NULL DEFAULT 5.0")


def _audit_controller_v12(db: sqlite_utils.Database) -> None:
    """Which controller wrote each event and signed the head (NULL: before controllers were
    named; one controller then)."""
    db.execute("ALTER TABLE audit ADD COLUMN controller TEXT")
    db.execute("ALTER TABLE audit_head ADD COLUMN controller TEXT")


def _digest_keys_v13(db: sqlite_utils.Database) -> None:
    """The mesh's digest key (the root of every own secret's digest key), one row per controller
    that holds it: sealed to that controller's key, signed by the controller that sealed it; and
    per own secret, the key its digests were made with before the mesh had one (boxed under the
    mesh's key; NULL: derived from it)."""
    db.execute(
        "CREATE TABLE digest_keys (controller TEXT PRIMARY KEY, sealed BLOB NOT NULL, "
        "sealed_by TEXT NOT NULL, sig TEXT NOT NULL, at TEXT NOT NULL)"
    )
    db.execute("ALTER TABLE own_secrets ADD COLUMN digest_key BLOB")


def _drains_v14(db: sqlite_utils.Database) -> None:
    """Each pair's sessions on an old credential left to drain (:class:`DrainRecord`): push
    and watch count them and end them once ``until`` is past, after a controller's restart
    too. No status row is read from it (``status`` reads it beside them), so it ticks none."""
    db.execute(
        "CREATE TABLE drains (pair TEXT PRIMARY KEY, rotation INTEGER NOT NULL, "
        "mark TEXT NOT NULL, until TEXT NOT NULL, sessions INTEGER NOT NULL, "
        "counted_at TEXT NOT NULL)"
    )


MIGRATIONS: list[Callable[[sqlite_utils.Database], None]] = [
    _create_v1,
    _signed_head_v2,
    _file_access_v3,
    _policies_v4,
    _provider_bases_v5,
    _pair_ends_v6,
    _own_secrets_v7,
    _pairs_stamp_v8,
    _status_ticks_v9,
    _claims_v10,
    _rotation_modes_v11,
    _audit_controller_v12,
    _digest_keys_v13,
    _drains_v14,
]
"""``MIGRATIONS[i]`` takes the schema from version i to i+1; append, never edit."""

SCHEMA_VERSION = len(MIGRATIONS)
"""The version this meshtui reads and writes: one per migration."""
