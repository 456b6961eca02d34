"""The status read: ``pair_ends`` (each pair's two ends and newest probe, kept by triggers) must
give exactly what joining ``deliveries`` and ``probes`` gives, after any write and after an
older inventory is upgraded."""

from __future__ import annotations

import contextlib
import random
import sqlite3
from pathlib import Path
from typing import Any

import sqlite_utils

from meshtui.controller.status import statuses
from meshtui.inventory import SCHEMA_VERSION, Inventory, now
from meshtui.inventory import schema as schema_mod
from meshtui.inventory.rows import ID, LOGIN, DeliveryRow, PairRecord, ProbeRecord
from meshtui.model import State

REFERENCE = """
SELECT p.rowid, p.id, p.provision, p.consumer, p.provider, p.login, p.file, p.created_at,
       p.rowid, p.generation, p.rotated_at, p.withdrawn_at,
       c.generation, c.error, v.generation, v.error,
       pr.verdict, CASE WHEN pr.verdict = 'accepted' THEN NULL ELSE pr.reason END,
       pr.at, pr.generation, pr.loopback, pr.client_addr, pr.withdrawn,
       pr.latency_ms, pr.used_password, CASE WHEN v.error IS NOT NULL THEN v.attempted_at END
FROM pairs p
LEFT JOIN deliveries c ON c.pair = p.id AND c."end" = 'consumer'
LEFT JOIN deliveries v ON v.pair = p.id AND v."end" = 'provider'
LEFT JOIN probes pr ON pr.id = (SELECT MAX(id) FROM probes WHERE pair = p.id)
ORDER BY p.id
"""
"""The status row by its definition: both ends searched, the newest probe found by MAX(id); a
probe's reason only when it did not log in, the provider's last attempt only beside its error
(no state reads them otherwise)."""

ENDS = """
SELECT k.pair, c.generation, c.error, v.generation, v.error, v.attempted_at,
       (SELECT MAX(id) FROM probes WHERE pair = k.pair)
FROM (SELECT pair FROM deliveries UNION SELECT pair FROM probes) k
LEFT JOIN deliveries c ON c.pair = k.pair AND c."end" = 'consumer'
LEFT JOIN deliveries v ON v.pair = k.pair AND v."end" = 'provider'
ORDER BY k.pair
"""
"""What ``pair_ends`` must hold, recomputed from ``deliveries`` and ``probes``."""

PAIRS = [f"database:app{i}/svc->db1/postgres" for i in range(6)]
ENDS_OF_A_PAIR = ("consumer", "provider")


def reference(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
    return conn.execute(REFERENCE).fetchall()


def read(
    inv: Inventory, ids: list[str] | None = None, limit: int | None = None
) -> list[tuple[Any, ...]]:
    """Status's read of every pair (or the named ones, or the first ``limit``), each pair's
    static columns joined to what changes of it."""
    got = inv.status_rows(ids, limit)
    return [pair + row for pair, row in zip(got.pairs, got.rows, strict=True)]


def kept_ends(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
    """``pair_ends`` without the rows that say nothing (an end delivered, then forgotten)."""
    rows = conn.execute("SELECT * FROM pair_ends ORDER BY pair").fetchall()
    return [r for r in rows if any(v is not None for v in r[1:])]


def expected_ends(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
    return [r for r in conn.execute(ENDS).fetchall() if any(v is not None for v in r[1:])]


def pair_record(pid: str, generation: int = 1) -> PairRecord:
    consumer = pid.split(":")[1].split("->")[0]
    return PairRecord(
        id=pid,
        provision="database",
        consumer=consumer,
        provider="db1/postgres",
        login=consumer.replace("/", "_"),
        file=f"/srv/{consumer}/db.password",
        port=5432,
        values="{}",
        reload="[]",
        file_owner=None,
        file_group=None,
        file_mode="0600",
        generation=generation,
        created_at=now(),
        rotated_at=None,
        withdrawn_at=None,
    )


def want(pid: str) -> int:
    """The generation :func:`pair_record` gives each test pair."""
    return 1 + PAIRS.index(pid) % 2


def delivery(pid: str, end: str, rng: random.Random) -> DeliveryRow:
    generation = rng.choice([None, 0, want(pid) + 1, *[want(pid)] * 5])
    return DeliveryRow(
        pair=pid,
        end=end,
        generation=generation,
        digest=None,
        since=now(),
        attempted_at=rng.choice([None, now()]),
        error=rng.choice([None] * 8 + ["agent unreachable", "re-applied after it was changed"]),
    )


def probe(pid: str, rng: random.Random) -> ProbeRecord:
    return ProbeRecord(
        pair=pid,
        at=now(),
        generation=rng.choice([None, want(pid), want(pid)]),
        verdict=rng.choice(["accepted", "accepted", "refused", "unknown"]),
        reason="logged in",
        latency_ms=rng.choice([None, 2.5]),
        used_password=rng.choice([None, 0, 1, 1]),
        loopback=rng.choice([0, 1]),
        client_addr=rng.choice([None, "10.213.0.3"]),
        control=None,
        withdrawn=rng.choice([0, 0, 0, 1]),
    )


def test_pair_ends_follow_every_write_and_status_reads_what_the_full_join_reads(
    tmp_path: Path,
) -> None:
    """Deliveries recorded, re-recorded, touched and forgotten, probes added (in and out of id
    order) and deleted, a delivery moved to another pair or end, a pair added or its login and
    file changed by declare, a pair's rowid moved: after each, the kept ends equal the
    recomputed ones and the status rows (whose static columns are kept between reads) equal the
    full join's, row for row."""
    rng = random.Random(13)
    with Inventory.open(tmp_path / "inventory.db") as inv:
        with inv.transaction("test") as tx:
            tx.put_pairs([pair_record(pid, generation=want(pid)) for pid in PAIRS])
        conn = inv._db.conn
        seen: set[State] = set()
        for _ in range(200):
            pid, end = rng.choice(PAIRS), rng.choice(ENDS_OF_A_PAIR)
            step = rng.randrange(11)
            with inv.transaction("test") as tx:
                if step <= 1:
                    tx.put_deliveries([delivery(pid, end, rng), delivery(pid, "provider", rng)])
                elif step == 2:
                    tx.touch_deliveries([(pid, end)], now())
                elif step == 3:
                    tx.forget_consumer_ends([pid])
                elif step == 8 and pid in PAIRS[:2]:  # withdrawn and revoked, as push does it
                    tx.withdraw_pairs([pid], now())
                    refused = probe(pid, rng) | {"verdict": "refused", "withdrawn": 1}
                    tx.add_probes([ProbeRecord(**refused)])  # type: ignore[typeddict-item]
                    tx.forget_consumer_ends([pid])
                elif step <= 5:
                    tx.add_probes([probe(pid, rng) for _ in range(rng.randint(1, 3))])
                elif step == 6:  # what no caller does, still kept in step
                    conn.execute(
                        "DELETE FROM probes WHERE id = (SELECT MAX(id) FROM probes WHERE pair = ?)",
                        [pid],
                    )
                    conn.execute(
                        "INSERT INTO probes (id, pair, at, verdict, reason) VALUES "
                        "((SELECT MIN(id) FROM probes) - 1, ?, 'then', 'refused', 'old')",
                        [pid],
                    )
                elif step == 9:  # declare: a pair's login and file changed, or a pair added
                    changed = pair_record(pid, generation=want(pid))
                    changed["login"] += f"_{rng.randrange(1000)}"
                    changed["file"] += f".{rng.randrange(1000)}"
                    added = pair_record(f"database:extra{rng.randrange(1000)}/svc->db1/postgres")
                    tx.put_pairs([changed] if rng.random() < 0.5 else [added])
                elif step == 10:  # what no caller does: a pair moved in its table (VACUUM may)
                    conn.execute(
                        "UPDATE pairs SET rowid = (SELECT MAX(rowid) FROM pairs) + 1 WHERE id = ?",
                        [pid],
                    )
                elif step == 7:  # a delivery moved to a pair end that has none
                    held = set(conn.execute('SELECT pair, "end" FROM deliveries').fetchall())
                    free = [(p, e) for p in PAIRS for e in ENDS_OF_A_PAIR if (p, e) not in held]
                    if held and free:
                        conn.execute(
                            'UPDATE deliveries SET pair = ?, "end" = ? WHERE pair = ? AND "end" = ?',
                            [*rng.choice(free), *rng.choice(sorted(held))],
                        )
            assert kept_ends(conn) == expected_ends(conn)
            assert read(inv) == reference(conn)
            some = rng.sample(PAIRS, 2)
            assert read(inv, some) == [r for r in reference(conn) if r[ID] in some]
            assert read(inv, limit=3) == reference(conn)[:3]
            seen |= {st.state for st in statuses(inv)}
        assert seen == set(State), seen  # the walk went through every state
        assert conn.execute("SELECT count(*) FROM probes").fetchone()[0] > 20


def test_an_older_inventory_upgrades_with_every_pairs_ends_and_newest_probe(
    tmp_path: Path,
) -> None:
    """A file from before ``pair_ends``, holding deliveries and several probes per pair, is
    upgraded on open: the kept ends are filled from what it holds, and status reads each pair
    exactly as the full join read it before the upgrade (the newest probe, not an older one)."""
    path = tmp_path / "inventory.db"
    before = schema_mod.MIGRATIONS.index(schema_mod._pair_ends_v6)
    rng = random.Random(4)
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        db = sqlite_utils.Database(conn)
        for step in schema_mod.MIGRATIONS[:before]:
            step(db)
        conn.execute(f"PRAGMA user_version = {before}")
        for pid in PAIRS:
            db["pairs"].insert(dict(pair_record(pid)))
        for pid in PAIRS[:4]:
            for end in ENDS_OF_A_PAIR[: 1 + PAIRS.index(pid) % 2]:
                db["deliveries"].insert(dict(delivery(pid, end, rng) | {"attempted_at": now()}))
        for pid in PAIRS[1:5] * 3:
            db["probes"].insert(dict(probe(pid, rng)))
        db["probes"].insert(dict(probe(PAIRS[1], rng) | {"verdict": "accepted",
                           "generation": 1, "used_password": 1, "withdrawn": 0,
                           "loopback": 0, "client_addr": "10.213.0.9"}))  # fmt: skip
        db["deliveries"].upsert_all(
            [dict(delivery(PAIRS[1], end, rng) | {"generation": 1, "error": None})
             for end in ENDS_OF_A_PAIR], pk=("pair", "end"))  # fmt: skip
        old_rows = reference(conn)
        assert "pair_ends" not in db.table_names()
    with Inventory.open(path) as inv:
        assert inv.version() == SCHEMA_VERSION
        conn = inv._db.conn
        assert kept_ends(conn) == expected_ends(conn) != []
        assert read(inv) == old_rows
        (working,) = statuses(inv, [PAIRS[1]])
        assert (working.state, working.reason) == (State.WORKING, "logged in from 10.213.0.9")
        with inv.transaction("test") as tx:  # and the triggers keep it from then on
            tx.add_probes([probe(PAIRS[5], rng)])
        assert read(inv) == reference(conn)


def test_a_reader_keeping_the_static_columns_sees_another_connections_declare(
    tmp_path: Path,
) -> None:
    """A long-lived reader (the dashboard) keeps the pairs' static columns between reads; a
    login and file changed and a pair added through another connection (a ``declare`` in
    another process) show in its next read, and a probe recorded there shows with the static
    columns still kept."""
    path = tmp_path / "inventory.db"
    rng = random.Random(7)
    with Inventory.open(path) as writer, Inventory.open(path, read_only=True) as reader:
        with writer.transaction("test") as tx:
            tx.put_pairs([pair_record(pid) for pid in PAIRS])
        assert read(reader) == reference(writer._db.conn)
        with writer.transaction("test") as tx:
            tx.add_probes([probe(PAIRS[2], rng)])
        assert read(reader) == reference(writer._db.conn)
        changed = pair_record(PAIRS[3]) | {"login": "moved", "file": "/srv/moved"}
        with writer.transaction("test") as tx:
            tx.put_pairs([PairRecord(**changed), pair_record("database:late/svc->db1/postgres")])  # type: ignore[typeddict-item]
        got = read(reader)
        assert got == reference(writer._db.conn)
        assert [r[LOGIN] for r in got if r[ID] == PAIRS[3]] == ["moved"]
