"""The SQLite inventory: WAL, schema versions, read-only, and the hash-chained audit log."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pwd
import sqlite3
import stat
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import sqlite_utils

from meshtui.controller.core import Controller
from meshtui.controller.plan import declaration
from meshtui.controller.plan.declare import declare
from meshtui.controller.reports import AuditEvent, ChainReport, DrillReport, DrillStep
from meshtui.errors import InventoryError, ReadOnlyError
from meshtui.inventory import SCHEMA_VERSION, Inventory, now, pg_connection
from meshtui.inventory import schema as schema_mod
from meshtui.inventory.rows import DrillRecord
from tests.fix_mesh import Mesh, dump_tables, modules
from tests.fix_pg import Engine

TABLES = {
    "nodes",
    "modules",
    "pairs",
    "generations",
    "deliveries",
    "probes",
    "rotations",
    "drills",
    "audit",
    "audit_head",
}


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


SQLITE = Engine("sqlite", None)


def raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


def tables(path: Path) -> set[str]:
    with contextlib.closing(raw(path)) as conn:
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    return {name for (name,) in rows}


def os_user() -> str:
    return pwd.getpwuid(os.getuid()).pw_name


def declared(mesh: Mesh, consumers: list[str] | None = None) -> Path:
    path = mesh.write(mesh.spec(modules(consumers or ["app1/gitea", "app2/gitea"])))
    res = mesh.cli("declare", path)
    assert res.code == 0, res.err
    return path


# ---------------------------------------------------------------------------- opening


def test_a_new_inventory_is_private_in_wal_mode_at_the_current_version(tmp_path: Path) -> None:
    path = tmp_path / "st" / "inventory.db"
    with Inventory.open(path) as inv:
        assert inv.version() == SCHEMA_VERSION
        assert tables(path) >= TABLES
        inv.record("note", [], {}, "ok")
        files = sorted(p.name for p in path.parent.iterdir())
        assert files == ["inventory.db", "inventory.db-shm", "inventory.db-wal"]
        for name in files:
            assert stat.S_IMODE((path.parent / name).stat().st_mode) == 0o600, name
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with contextlib.closing(raw(path)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"  # persistent


def test_a_v0_file_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "inventory.db"
    with contextlib.closing(raw(path)) as conn:
        conn.execute("CREATE TABLE unrelated (x)")  # an older, empty file: user_version 0
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 0
    with Inventory.open(path) as inv:
        assert inv.version() == SCHEMA_VERSION
        assert tables(path) >= TABLES
        inv.record("test", [], {}, "ok")
    with Inventory.open(path) as inv:  # a second open migrates nothing and keeps data
        assert inv.version() == SCHEMA_VERSION
        assert len(inv.events()) == 1


def test_a_v2_file_gains_credential_file_access_with_the_0600_default(tmp_path: Path) -> None:
    path = tmp_path / "inventory.db"
    with contextlib.closing(raw(path)) as conn, conn:
        for step in schema_mod.MIGRATIONS[:2]:
            step(sqlite_utils.Database(conn))
        conn.execute("PRAGMA user_version = 2")
        conn.execute(
            "INSERT INTO pairs VALUES ('p', 'database', 'app1/gitea', 'db1/postgres', 'l', "
            "'/etc/gitea/db.password', 5432, '{}', '[]', 1, 'now', NULL, NULL)"
        )
    with Inventory.open(path) as inv:
        (row,) = inv.pairs()
        assert (row["file_owner"], row["file_group"], row["file_mode"]) == (None, None, "0600")


def test_a_failed_migration_leaves_the_file_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "inventory.db"

    def broken(db: object) -> None:
        raise RuntimeError("migration step failed")

    monkeypatch.setattr(schema_mod, "MIGRATIONS", [*schema_mod.MIGRATIONS, broken])
    monkeypatch.setattr(schema_mod, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    with pytest.raises(RuntimeError, match="migration step failed"):
        Inventory.open(path)
    with contextlib.closing(raw(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0
    monkeypatch.undo()
    with Inventory.open(path) as inv:
        assert inv.version() == SCHEMA_VERSION


def _set_version(path: Path, version: int) -> None:
    with contextlib.closing(raw(path)) as conn:
        conn.execute(f"PRAGMA user_version = {version}")


def test_a_newer_schema_is_refused_with_a_clear_message(tmp_path: Path) -> None:
    path = tmp_path / "inventory.db"
    Inventory.open(path).close()
    _set_version(path, SCHEMA_VERSION + 1)
    before = sha(path)
    for read_only in (False, True):
        with pytest.raises(InventoryError) as info:
            Inventory.open(path, read_only=read_only)
        msg = str(info.value)
        assert str(path) in msg and "newer" in msg and "upgrade meshtui" in msg, msg
        assert "migrate" not in msg, msg
    assert sha(path) == before


def test_an_older_schema_read_only_says_how_to_migrate(tmp_path: Path) -> None:
    path = tmp_path / "inventory.db"
    with contextlib.closing(raw(path)) as conn:
        conn.execute("CREATE TABLE unrelated (x)")
    with pytest.raises(InventoryError, match="without --read-only"):
        Inventory.open(path, read_only=True)


def test_read_only_needs_an_existing_inventory(tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match="no inventory here"):
        Inventory.open(tmp_path / "inventory.db", read_only=True)
    assert not (tmp_path / "inventory.db").exists()


def test_a_file_that_is_not_sqlite_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "inventory.db"
    path.write_bytes(b"this is not a database" * 100)
    for read_only in (False, True):
        with pytest.raises(InventoryError, match=str(path)):
            Inventory.open(path, read_only=read_only)


# ---------------------------------------------------------------------------- read-only


def test_read_only_refuses_every_write_and_leaves_the_file_alone(
    mesh: Mesh, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = declared(mesh)
    decl = declaration.load(mesh.write(mesh.spec(modules(["app1/new"]))))
    before, tables = sha(mesh.inventory), mesh.tables()
    with Inventory.open(mesh.inventory, read_only=True) as inv:
        assert inv.read_only
        assert len(inv.pairs()) == 2  # reading works
        with pytest.raises(ReadOnlyError) as info, inv.transaction("rotate"):
            pytest.fail("a read-only transaction must not start")
        assert "rotate changes the inventory, but it is open read-only" in str(info.value)
        assert "--read-only" in str(info.value)
        with pytest.raises(ReadOnlyError):
            inv.record("note", [], {}, "ok")
        with pytest.raises(ReadOnlyError, match="declare"):
            declare(inv, decl)
        # even with the guard gone, SQLite refuses: the connection itself is mode=ro
        monkeypatch.setattr(inv, "require_writable", lambda action: None)
        with pytest.raises(ReadOnlyError):
            inv.record("note", [], {}, "ok")
    with Controller.open(mesh.state, read_only=True) as ctl:
        with pytest.raises(ReadOnlyError):
            ctl.declare(path)
        assert len(ctl.status()) == 2
    assert sha(mesh.inventory) == before
    assert mesh.tables() == tables


# ---------------------------------------------------------------------------- audit


def test_every_change_appends_an_event_with_the_operator(
    mesh: Mesh, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SSH_CLIENT", raising=False)
    monkeypatch.delenv("SSH_CONNECTION", raising=False)
    declared(mesh)
    monkeypatch.setenv("SSH_CLIENT", "192.0.2.7 51234 22")
    declared(mesh, ["app1/gitea"])  # one withdrawn
    with Inventory.open(mesh.inventory, read_only=True) as inv:
        first, second = inv.events()
    assert first["kind"] == second["kind"] == "declare"
    assert first["operator"] == second["operator"] == os_user()
    assert first["ssh_client"] is None
    assert second["ssh_client"] == "192.0.2.7"
    assert first["pairs"] == [
        "database:app1/gitea->db1/postgres",
        "database:app2/gitea->db1/postgres",
    ]
    assert first["detail"]["new"] == 2 and first["outcome"] == "ok"
    assert second["pairs"] == ["database:app2/gitea->db1/postgres"]
    assert second["detail"]["withdrawn"] == 1
    assert second["prev"] == first["hash"]
    assert first["prev"] == "0" * 64


def test_ssh_connection_also_names_the_client(mesh: Mesh, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SSH_CLIENT", raising=False)
    monkeypatch.setenv("SSH_CONNECTION", "198.51.100.4 40000 10.0.0.1 22")
    with Inventory.open(mesh.inventory) as inv:
        event = inv.record("note", ["p"], {"why": "test"}, "ok")
    assert event["ssh_client"] == "198.51.100.4"


def test_the_operator_is_the_os_user_not_an_environment_variable(
    mesh: Mesh, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("USER", "LOGNAME", "LNAME", "USERNAME"):
        monkeypatch.setenv(var, "mallory")
    with Inventory.open(mesh.inventory) as inv:
        event = inv.record("note", [], {}, "ok")
    assert event["operator"] == os_user() != "mallory"


def chain(tmp_path: Path, events: int = 5, engine: Engine = SQLITE) -> Path:
    path = tmp_path / "inventory.db"
    with engine.open(path) as inv:
        for i in range(events):
            inv.record("note", [f"p{i}"], {"i": i}, "ok")
        assert inv.verify_chain().ok
        assert inv.verify_chain().events == events
    return path


def raw_of(path: Path, engine: Engine) -> Any:
    """A connection of its own to the engine's inventory, committing each statement."""
    if engine.postgres is None:
        return raw(path)
    return pg_connection.connect(engine.postgres, read_only=False)


def tamper(path: Path, engine: Engine, *sql: str) -> None:
    with contextlib.closing(raw_of(path, engine)) as conn:
        for statement in sql:
            conn.execute(statement)


def swap(path: Path, engine: Engine, a: int, b: int) -> None:
    """Swap the contents of two events, each keeping its place (seq)."""
    cols = ["at", "operator", "ssh_client", "kind", "pairs", "detail", "outcome", "prev", "hash"]
    with contextlib.closing(raw_of(path, engine)) as conn:
        rows = {
            seq: conn.execute(
                f"SELECT {', '.join(cols)} FROM audit WHERE seq = ?", [seq]
            ).fetchone()
            for seq in (a, b)
        }
        sets = ", ".join(f"{c} = ?" for c in cols)
        conn.execute("BEGIN")
        conn.execute(f"UPDATE audit SET {sets} WHERE seq = ?", [*rows[b], a])
        conn.execute(f"UPDATE audit SET {sets} WHERE seq = ?", [*rows[a], b])
        conn.execute("COMMIT")


@pytest.mark.parametrize(
    ("damage", "bad", "problem"),
    [
        (
            lambda p, e: tamper(p, e, "UPDATE audit SET detail = '{\"i\": 9}' WHERE seq = 3"),
            3,
            "edited",
        ),
        (lambda p, e: tamper(p, e, "UPDATE audit SET operator = 'eve' WHERE seq = 1"), 1, "edited"),
        (lambda p, e: tamper(p, e, "UPDATE audit SET hash = prev WHERE seq = 4"), 4, "edited"),
        (lambda p, e: tamper(p, e, "DELETE FROM audit WHERE seq = 3"), 4, "expected event 3"),
        (lambda p, e: tamper(p, e, "DELETE FROM audit WHERE seq = 1"), 2, "expected event 1"),
        (
            lambda p, e: tamper(p, e, "DELETE FROM audit WHERE seq = 5"),
            5,
            "newest events were deleted",
        ),
        (
            lambda p, e: tamper(p, e, "DELETE FROM audit WHERE seq >= 4"),
            5,
            "newest events were deleted",
        ),
        (lambda p, e: tamper(p, e, "DELETE FROM audit_head"), None, "head record is missing"),
        (lambda p, e: swap(p, e, 2, 3), 2, "does not link"),
    ],
    ids=[
        "edited",
        "edited-first",
        "edited-hash",
        "deleted-middle",
        "deleted-first",
        "deleted-last",
        "deleted-last-two",
        "head-deleted",
        "swapped",
    ],
)
def test_verify_chain_names_the_first_bad_event(
    tmp_path: Path, damage: object, bad: int | None, problem: str, engine: Engine
) -> None:
    path = chain(tmp_path, engine=engine)
    damage(path, engine)  # type: ignore[operator]
    with engine.open(path, read_only=True) as inv:
        check = inv.verify_chain()
    assert not check.ok
    assert check.bad_seq == bad
    assert problem in check.problem


def test_an_empty_chain_verifies(tmp_path: Path, engine: Engine) -> None:
    with engine.open(tmp_path / "inventory.db") as inv:
        check = inv.verify_chain()
    assert check.ok and check.events == 0


def test_events_are_canonical_json(tmp_path: Path, engine: Engine) -> None:
    path = chain(tmp_path, 2, engine)
    with contextlib.closing(raw_of(path, engine)) as conn:
        detail, pairs = conn.execute("SELECT detail, pairs FROM audit WHERE seq = 2").fetchone()
    assert json.loads(detail) == {"i": 1} and json.loads(pairs) == ["p1"]


def test_tables_are_left_alone_by_a_read_only_open(mesh: Mesh) -> None:
    declared(mesh)
    before = sha(mesh.inventory)
    for _ in range(3):
        Inventory.open(mesh.inventory, read_only=True).close()
    assert sha(mesh.inventory) == before
    assert dump_tables(mesh.inventory) == mesh.tables()


# ---------------------------------------------------------------------------- drills


def test_drill_evidence_comes_out_typed_whatever_was_stored(mesh: Mesh) -> None:
    """A drill's evidence is decoded once, into its typed shape: a key an older or hand-written
    row lacks (or holds with the wrong type) reads as unknown, and the pair's detail still
    shows, instead of a KeyError or a string where a number belongs."""
    declared(mesh)
    pid = "database:app1/gitea->db1/postgres"
    report = DrillReport(
        pair=pid,
        ok=True,
        steps=[DrillStep("old before", "accepted", "accepted", 3.1)],
        window_ms=4.0,
        rotation=2,
    )
    stored = [
        json.dumps(report.to_json()),
        '{"steps": [{"name": "old after", "latency_ms": "fast"}, 7], "rotation": true, "ok": 1}',
        "not json",
    ]
    with Inventory.open(mesh.inventory) as inv:
        with inv.transaction("test") as tx:
            for evidence in stored:
                row = DrillRecord(
                    pair=pid, at=now(), rotation=None, ok=0, window_ms=None, evidence=evidence
                )
                tx.add_drill(row)
        broken, partial, full = inv.drills(pid)  # newest first
    assert full["evidence"] == report.to_json()
    assert partial["evidence"] == {
        "pair": pid,
        "ok": False,
        "steps": [
            {"name": "old after", "expected": "?", "verdict": "?", "latency_ms": None, "reason": ""}
        ],
        "window_ms": None,
        "rotation": None,
        "reason": "",
        "sessions": "",
        "sessions_before": None,
        "sessions_after": None,
        "rotation_kind": "swap",
        "both_accepted_ms": None,
        "refused": None,
    }
    assert broken["evidence"]["pair"] == pid and broken["evidence"]["steps"] == []
    with Controller.open(mesh.state, read_only=True) as ctl:
        shown = [d.report for d in ctl.pair_detail(pid).drills]
    assert shown[2] == replace(report, ok=False, window_ms=None, rotation=None)
    assert shown[1].steps == [DrillStep("old after", "?", "?", None)]


def test_audit_events_leave_the_controller_as_reports(mesh: Mesh) -> None:
    declared(mesh)
    with Controller.open(mesh.state, read_only=True) as ctl:
        (event,) = ctl.events()
        check = ctl.verify_chain()
    assert isinstance(event, AuditEvent) and isinstance(check, ChainReport)
    assert event.to_json() == event._asdict()  # the JSON keeps the log's column order
    assert list(event.to_json()) == list(AuditEvent._fields)
    assert event.kind == "declare" and event.detail["new"] == 2 and len(event.pairs) == 2
    assert check == ChainReport(ok=True, events=1)


def test_every_commit_is_on_disk_before_it_returns(tmp_path):
    """A rotation's journal must be durable before anything is sent, and each request shows
    the nodes the audit head just committed: in WAL mode only ``synchronous = FULL`` fsyncs the
    log at each commit (NORMAL leaves the last commits to a power cut)."""
    with Inventory.open(tmp_path / "inv.db") as inv:
        assert inv._tuples("PRAGMA journal_mode") == [("wal",)]
        assert inv._tuples("PRAGMA synchronous") == [(2,)]  # FULL


def test_modules_naming_a_key_are_the_declared_ones_whose_spec_holds_it(
    tmp_path: Path, engine: Engine
) -> None:
    """``modules_naming("secrets")`` (status's read of the modules' own secrets) gives what
    reading every module and keeping the declared ones with that key gives: a value that
    is that very word is read and holds no such key, a withdrawn module is left out."""

    def secret(name: str) -> dict[str, object]:
        return {"name": name, "file": f"/etc/app/{name}", "supplied": False, "length": 32,
                "alphabet": "base64url", "reload": [], "owner": None, "group": None,
                "mode": "0600"}  # fmt: skip

    specs = {
        "app1/gitea": {"secrets": [secret("token")]},
        "app2/wiki": {"requires": [{"name": "secrets", "file": "/etc/secrets/db"}]},
        "app3/old": {"secrets": [secret("gone")]},
        "db1/postgres": {"provides": [{"name": "database", "port": 5432}]},
    }
    with engine.open(tmp_path / "inventory.db") as inv:
        with inv.transaction("test") as tx:
            tx.put_modules([{"id": mid, "node": mid.split("/")[0], "name": mid.split("/")[1],
                             "spec": json.dumps(spec), "declared": int(mid != "app3/old")}
                            for mid, spec in specs.items()])  # fmt: skip
        every = {m: r for m, r in inv.modules().items() if r["declared"]}
        named = inv.modules_naming("secrets")
        assert list(named) == ["app1/gitea", "app2/wiki"]
        assert named == {m: every[m] for m in named}
        assert [m for m, r in every.items() if r["spec"].secrets] == ["app1/gitea"]


def test_a_fence_runs_first_inside_the_write_and_one_that_fails_writes_nothing(
    tmp_path: Path, engine: Engine
) -> None:
    """``transaction(action, fence=…)``: the fence runs inside the transaction, before the
    caller's writes; when it raises (the writer lost its turn), nothing is written."""
    seen: list[str] = []

    def holds(tx: object) -> None:
        seen.append("fence")

    def lost(tx: object) -> None:
        raise InventoryError("ctl-a's turn is over")

    with engine.open(tmp_path / "inventory.db") as inv:
        with inv.transaction("test", fence=holds) as tx:
            seen.append("write")
            tx.audit("note", [], {}, "ok")
        assert seen == ["fence", "write"] and inv.last_seq() == 1
        with (
            pytest.raises(InventoryError, match="turn is over"),
            inv.transaction("test", fence=lost) as tx,
        ):
            tx.audit("note", [], {}, "ok")
        assert inv.last_seq() == 1 and inv.verify_chain().ok


def test_provider_kinds_are_read_from_every_provider_of_a_pair_and_only_those(
    tmp_path: Path, engine: Engine
) -> None:
    """Each provider some pair names gives the kind its spec declares for each provision; a
    module no pair names as its provider gives none, whatever it declares (the providers are
    found by a walk of the provider index, not a scan of every module)."""
    from meshtui.inventory.rows import ModuleSpec, OfferSpec, encode_spec
    from tests.test_status_read import pair_record

    def module(mid: str, *offers: OfferSpec) -> Any:
        node, name = mid.split("/")
        spec = encode_spec(ModuleSpec(provides=list(offers)))
        return {"id": mid, "node": node, "name": name, "spec": spec, "declared": 1}

    cache, store = (
        OfferSpec(name="cache", port=6379, kind="redis"),
        OfferSpec(name="files", port=8333, kind="s3"),
    )
    plain = OfferSpec(name="database", port=5432)
    with engine.open(tmp_path / "inventory.db") as inv:
        with inv.transaction("test") as tx:
            tx.put_modules([module("r1/redis", cache), module("s1/seaweed", store, plain),
                            module("db1/postgres", plain), module("idle/redis", cache),
                            module("app1/web")])  # fmt: skip
            rows = []
            for i, provider in enumerate(["r1/redis", "s1/seaweed", "db1/postgres", "r1/redis"]):
                row = pair_record(f"database:app{i}/web->{provider}")
                rows.append({**row, "provider": provider})
            tx.put_pairs(rows)  # type: ignore[arg-type]
        assert inv.provider_kinds() == {("r1/redis", "cache"): "redis",
                                        ("s1/seaweed", "files"): "s3"}  # fmt: skip
