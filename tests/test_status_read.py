"""The status read: ``pair_ends`` (each pair's two ends and newest probe, kept by triggers) must
give exactly what joining ``deliveries`` and ``probes`` gives, after any write and after an
older inventory is upgraded; a reader that keeps its statuses between reads (``watch``) and
reads next only the pairs the status clock ticked since must read exactly what a reader that
keeps nothing reads, after any write by any connection or process, and a detector missing any
one of its triggers must be caught."""

from __future__ import annotations

import contextlib
import random
import sqlite3
import subprocess
import sys
from collections.abc import Collection
from pathlib import Path
from typing import Any

import pytest
import sqlite_utils

from meshtui.controller.read import status as status_mod
from meshtui.controller.read.status import statuses
from meshtui.inventory import SCHEMA_VERSION, Inventory, now
from meshtui.inventory import schema as schema_mod
from meshtui.inventory.rows import ID, LOGIN, DeliveryRow, PairRecord, ProbeRecord
from meshtui.model import State
from tests.fix_pg import Clusters, Engine, inventory_database

SQLITE = Engine("sqlite", None)

REFERENCE = """
SELECT p.id, p.provision, p.consumer, p.provider, p.login, p.file, p.generation,
       p.created_at, p.rotated_at, p.withdrawn_at,
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
    """Status's read of every pair (or the named ones, or the first ``limit``)."""
    return list(inv.status_rows(ids, limit))


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


STALE = "a kept read differs from a read of every pair"
READERS = ("kept", "image")
"""The readers that make statuses from what an earlier read made: kept in memory (``watch``),
or from the status image (a one-shot ``meshtui status``)."""


def step(inv: Inventory, rng: random.Random) -> None:
    """One random write, as a command does it or as no caller does (still kept in step):
    deliveries recorded, re-recorded, touched, forgotten or moved, probes added (in and out of
    id order), rewritten or deleted, a pair withdrawn, rotated, changed or added by declare, or
    moved in its table, a rotation begun or ended, a provider's kind changed."""
    conn = inv._conn
    on_sqlite = inv.dialect.name == "sqlite"
    pid, end = rng.choice(PAIRS), rng.choice(ENDS_OF_A_PAIR)
    kind = rng.randrange(17)
    with inv.transaction("test") as tx:
        if kind <= 1:
            tx.put_deliveries([delivery(pid, end, rng), delivery(pid, "provider", rng)])
        elif kind == 2:
            tx.touch_deliveries([(pid, end)], now())
        elif kind == 3:
            tx.forget_consumer_ends([pid])
        elif kind == 8 and pid in PAIRS[:2]:  # withdrawn and revoked, as push does it
            tx.withdraw_pairs([pid], now())
            refused = probe(pid, rng) | {"verdict": "refused", "withdrawn": 1}
            tx.add_probes([ProbeRecord(**refused)])  # type: ignore[typeddict-item]
            tx.forget_consumer_ends([pid])
        elif kind <= 5:
            tx.add_probes([probe(pid, rng) for _ in range(rng.randint(1, 3))])
        elif kind == 6:  # what no caller does
            conn.execute(
                "DELETE FROM probes WHERE id = (SELECT MAX(id) FROM probes WHERE pair = ?)",
                [pid],
            )
            if rng.random() < 0.5:
                lowest = "(SELECT MIN(id) FROM probes) - 1"  # SQLite numbers a NULL id itself
                conn.execute(
                    "INSERT INTO probes (id, pair, at, verdict, reason) VALUES "
                    f"({lowest if on_sqlite else f'COALESCE({lowest}, 0)'}, ?, 'then', "
                    "'refused', 'old')",
                    [pid],
                )
        elif kind == 9:  # declare: a pair's login and file changed, or a pair added
            changed = pair_record(pid, generation=want(pid))
            changed["login"] += f"_{rng.randrange(1000)}"
            changed["file"] += f".{rng.randrange(1000)}"
            added = pair_record(f"database:extra{rng.randrange(1000)}/svc->db1/postgres")
            tx.put_pairs([changed] if rng.random() < 0.5 else [added])
        elif kind == 10:  # what no caller does: a pair moved in its table (VACUUM may)
            conn.execute(
                "UPDATE pairs SET rowid = (SELECT MAX(rowid) FROM pairs) + 1 WHERE id = ?"
                if on_sqlite  # PostgreSQL writes every updated row anew elsewhere
                else "UPDATE pairs SET port = port WHERE id = ?",
                [pid],
            )
        elif kind == 7:  # a delivery moved to a pair end that has none
            held = set(conn.execute('SELECT pair, "end" FROM deliveries').fetchall())
            free = [(p, e) for p in PAIRS for e in ENDS_OF_A_PAIR if (p, e) not in held]
            if held and free:
                conn.execute(
                    'UPDATE deliveries SET pair = ?, "end" = ? WHERE pair = ? AND "end" = ?',
                    [*rng.choice(free), *rng.choice(sorted(held))],
                )
        elif kind == 11:  # a rotation moves the pair to another generation, or back
            tx.set_generation(pid, rng.choice([want(pid), want(pid) + 1]), now())
        elif kind == 12:  # a rotation journaled (and interrupted), or every open one ended
            if rng.random() < 0.6:
                tx.journal_rotation([{"pair": pid, "from": 1, "to": 2}], owner_pid=1)
            else:
                for rotation in inv.open_rotations():
                    tx.update_rotation(rotation["id"], {"finished_at": now(), "state": "done"})
        elif kind == 13:  # what no caller does: the newest probe rewritten
            conn.execute(
                "UPDATE probes SET verdict = ?, generation = ? "
                "WHERE id = (SELECT MAX(id) FROM probes WHERE pair = ?)",
                [rng.choice(["accepted", "refused", "unknown"]), want(pid), pid],
            )
        elif kind == 14:  # a provider's kind declared, or left to the default
            spec = '{"provides": [{"name": "database", "port": 6379, "kind": "redis"}]}'
            tx.put_modules([{"id": "db1/postgres", "node": "db1", "name": "postgres",
                             "spec": rng.choice([spec, '{"provides": []}']), "declared": 1}])  # fmt: skip
        elif kind == 15:  # what no caller does: a pair's withdrawal undone
            conn.execute("UPDATE pairs SET withdrawn_at = NULL WHERE id = ?", [pid])
        else:  # several pairs at once, as push or probe records them
            tx.add_probes([probe(p, rng) for p in rng.sample(PAIRS, 3)])


def walk(
    path: Path,
    steps: int,
    seed: int,
    broken: str | None = None,
    readers: Collection[str] = READERS,
    engine: Engine = SQLITE,
) -> set[State]:
    """``steps`` random writes to the inventory at ``path``; after each, a reader keeping its
    statuses through the writing connection and one through another connection, and one-shot
    readers through the status image beside the file (through either connection, the image
    written again after a whole read or, at random, after any read), read exactly what a
    reader keeping nothing reads, which reads what the full join reads. ``broken``: the status
    tick trigger dropped first (a detector that misses one kind of write); ``readers``: which
    of "kept" and "image" are checked. The states seen."""
    rng = random.Random(seed)
    chance = random.Random(seed + 1)  # the image's own draws: the walk's writes stay the same
    seen: set[State] = set()
    rewrite = status_mod.REWRITE_AFTER
    with (
        engine.open(path) as inv,
        engine.open(path, read_only=True) as other,
        contextlib.ExitStack() as undo,
    ):
        undo.callback(setattr, status_mod, "REWRITE_AFTER", rewrite)
        conn = inv._conn
        with inv.transaction("test") as tx:
            tx.put_pairs([pair_record(pid, generation=want(pid)) for pid in PAIRS])
        if broken is not None:
            table = "" if engine.postgres is None else f" ON {schema_mod.STATUS_TICKS[broken][1]}"
            conn.execute(f"DROP TRIGGER status_ticks_{broken}{table}")
        for _ in range(steps):
            step(inv, rng)
            assert kept_ends(conn) == expected_ends(conn)
            assert read(inv) == reference(conn)
            some = rng.sample(PAIRS, 2)
            assert read(inv, some) == [r for r in reference(conn) if r[ID] in some]
            assert read(inv, limit=3) == reference(conn)[:3]
            fresh = statuses(inv)
            assert [st.pair for st in fresh] == [r[ID] for r in reference(conn)]
            if "kept" in readers:
                assert statuses(inv, keep=True) == fresh, STALE
                assert statuses(other, keep=True) == fresh, STALE
            if "image" in readers:
                status_mod.REWRITE_AFTER = chance.choice([rewrite, rewrite, 0])
                one_shot = chance.choice([inv, other])
                assert statuses(one_shot, image=path.parent) == fresh, STALE
            seen |= {st.state for st in fresh}
        assert conn.execute("SELECT count(*) FROM probes").fetchone()[0] > 20
        assert conn.execute("SELECT count(*) FROM rotations").fetchone()[0] > 0
    return seen


def test_pair_ends_follow_every_write_and_status_reads_what_the_full_join_reads(
    tmp_path: Path, engine: Engine
) -> None:
    """After every kind of write, the kept ends equal the recomputed ones, the status rows equal
    the full join's, row for row, and a reader keeping its statuses between reads (through the
    writing connection or another one) reads exactly what a reader keeping nothing reads, on
    every engine."""
    seen = walk(tmp_path / "inventory.db", steps=300, seed=13, engine=engine)
    assert seen == set(State), seen  # the walk went through every state


def test_a_kept_read_reads_only_the_pairs_written_since(tmp_path: Path, engine: Engine) -> None:
    """The kept reader's next read after one probe recorded reads that one pair's row; after
    nothing written, none; after a declare that adds a pair, every pair."""
    path = tmp_path / "inventory.db"
    with engine.open(path) as inv:
        with inv.transaction("test") as tx:
            tx.put_pairs([pair_record(pid) for pid in PAIRS])
        first = inv.status_changes(None)
        assert first.whole and len(first.rows) == len(PAIRS) and first.mark is not None
        with inv.transaction("test") as tx:
            tx.add_probes([probe(PAIRS[4], random.Random(1))])
        one = inv.status_changes(first.mark)
        assert not one.whole and [r[ID] for r in one.rows] == [PAIRS[4]]
        assert one.mark is not None and one.mark.tick > first.mark.tick
        assert inv.status_changes(one.mark).rows == []
        also = inv.status_changes(one.mark, {PAIRS[0]})
        assert not also.whole and [r[ID] for r in also.rows] == [PAIRS[0]]
        with inv.transaction("test") as tx:
            tx.put_pairs([pair_record("database:late/svc->db1/postgres")])
        assert inv.status_changes(one.mark).whole
        with inv.transaction("test") as tx:  # inside a write: read whole, and no mark to keep
            inside = inv.status_changes(one.mark)
            assert inside.whole and inside.mark is None
            assert tx is not None


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("trigger", sorted(schema_mod.STATUS_TICKS))
def test_a_detector_missing_any_one_write_is_caught(
    tmp_path: Path, trigger: str, reader: str
) -> None:
    """The walk above catches a stale kept read, and a stale one-shot read through the status
    image, when any one status tick trigger is missing: each is needed, and the test can fail."""
    with pytest.raises(AssertionError, match=STALE):
        walk(tmp_path / "inventory.db", steps=300, seed=13, broken=trigger, readers=[reader])


@pytest.mark.parametrize("trigger", sorted(schema_mod.STATUS_TICKS))
def test_a_detector_missing_any_one_write_is_caught_on_postgres(
    tmp_path: Path, pg_clusters: Clusters, trigger: str
) -> None:
    """The same on PostgreSQL (18; its one-shot reader keeps no image, so the kept one): each
    of its status tick triggers is needed."""
    folder = tmp_path / "pg"
    folder.mkdir(mode=0o700)
    engine = Engine("postgres18", inventory_database(pg_clusters.get("18"), folder))
    with pytest.raises(AssertionError, match=STALE):
        walk(tmp_path / "inventory.db", 300, 13, broken=trigger, readers=["kept"], engine=engine)


def test_every_status_tick_trigger_is_in_the_schema(tmp_path: Path) -> None:
    """The triggers the test above drops in turn are the ones the schema holds."""
    with Inventory.open(tmp_path / "inventory.db") as inv:
        names = inv._db.conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE 'status_ticks_%'"
        ).fetchall()
    assert {n for (n,) in names} == {f"status_ticks_{n}" for n in schema_mod.STATUS_TICKS}


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


def test_a_kept_read_inside_a_write_that_rolls_back_keeps_nothing(tmp_path: Path) -> None:
    """A keeping reader that reads inside its own write transaction sees what may yet be rolled
    back: it keeps nothing from that read, so after the rollback and another connection's write
    its next read is still exact (kept from there, the rolled-back probe would show and the
    other write, at the same tick, would not)."""
    path = tmp_path / "inventory.db"
    rng = random.Random(3)
    with Inventory.open(path) as inv, Inventory.open(path) as other:
        with inv.transaction("test") as tx:
            tx.put_pairs([pair_record(pid, generation=want(pid)) for pid in PAIRS])
        statuses(inv, keep=True)
        refused = probe(PAIRS[0], rng) | {"verdict": "refused", "withdrawn": 0}
        with contextlib.suppress(RuntimeError), inv.transaction("test") as tx:
            tx.add_probes([ProbeRecord(**refused)])  # type: ignore[typeddict-item]
            assert statuses(inv, keep=True) == statuses(inv)
            raise RuntimeError("rolled back")
        with other.transaction("test") as tx:
            tx.add_probes([probe(PAIRS[1], rng)])
        assert statuses(inv, keep=True) == statuses(inv), STALE


def test_a_kept_reader_sees_another_processs_write(tmp_path: Path) -> None:
    """A probe recorded and a pair rotated by another process (a CLI command beside a running
    watch) show in the keeping reader's next read, which reads only those pairs."""
    path = tmp_path / "inventory.db"
    with Inventory.open(path) as inv:
        with inv.transaction("test") as tx:
            tx.put_pairs([pair_record(pid, generation=want(pid)) for pid in PAIRS])
        before = statuses(inv, keep=True)
        mark = inv.status_changes(None).mark
        write = f"""
from meshtui.inventory import Inventory, now
with Inventory.open({str(path)!r}) as inv, inv.transaction("test") as tx:
    tx.add_probes([dict(pair={PAIRS[2]!r}, at=now(), generation=1, verdict="refused",
                        reason="password authentication failed (28P01)", latency_ms=None,
                        used_password=1, loopback=0, client_addr=None, control=None,
                        withdrawn=0)])
    tx.set_generation({PAIRS[3]!r}, 7, now())
"""
        subprocess.run([sys.executable, "-c", write], check=True)
        changed = inv.status_changes(mark)
        assert not changed.whole and sorted(r[ID] for r in changed.rows) == PAIRS[2:4]
        after = statuses(inv, keep=True)
        assert after == statuses(inv), STALE
        moved = {a.pair for a, b in zip(after, before, strict=True) if a != b}
        assert moved == set(PAIRS[2:4])
        assert next(a for a in after if a.pair == PAIRS[3]).generation == 7


def test_a_file_put_back_in_place_is_read_whole(tmp_path: Path) -> None:
    """An older image of the file copied over it in place (SQLite's backup, as no meshtui
    command does: restore writes an empty folder) holds a clock behind the reader's mark: its
    next read reads every pair."""
    path = tmp_path / "inventory.db"
    rng = random.Random(5)
    with Inventory.open(path) as inv:
        with inv.transaction("test") as tx:
            tx.put_pairs([pair_record(pid, generation=want(pid)) for pid in PAIRS])
        older = sqlite3.connect(":memory:")
        inv._db.conn.backup(older)
        for pid in PAIRS:
            with inv.transaction("test") as tx:
                tx.add_probes([probe(pid, rng)])
        statuses(inv, keep=True)
        with sqlite3.connect(path) as conn:
            older.backup(conn)
        assert statuses(inv, keep=True) == statuses(inv), STALE
        assert {st.probed_at for st in statuses(inv)} == {None}
