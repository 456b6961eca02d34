"""The inventory on PostgreSQL, chosen by the state folder's settings, the ``init --postgres``
option or ``MESHTUI_POSTGRES_FILE``: the schema made, migrated and a newer one refused; the
conninfo file checked and its password never shown; every fault one clear line naming the
server within seconds; and the audit chain one linear chain with two processes appending at once.
"""

from __future__ import annotations

import contextlib
import json
import random
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from meshtui.controller import config
from meshtui.inventory import SCHEMA_VERSION, Inventory, pg_schema
from meshtui.inventory import schema as schema_mod
from meshtui.kinds.postgres.lab import Cluster
from tests.fix_lab import cli
from tests.fix_pg import Clusters, free_port, inventory_database, start_cluster

SECRET = "hunter2-never-shown"


@pytest.fixture(params=["18", "15"])
def server(request: pytest.FixtureRequest, pg_clusters: Clusters) -> Cluster:
    """The session's PostgreSQL cluster of each server version (embedded 18, Debian's 15)."""
    return pg_clusters.get(request.param)


@pytest.fixture
def conninfo(server: Cluster, tmp_path: Path) -> Path:
    """A conninfo file naming a new, empty database of the server."""
    folder = tmp_path / "pg"
    folder.mkdir(mode=0o700)
    return inventory_database(server, folder, empty=True)


def text_of(path: Path) -> str:
    return path.read_text().strip()


def database(path: Path) -> psycopg.Connection:
    return psycopg.connect(text_of(path), autocommit=True)


def write_conninfo(path: Path, text: str) -> Path:
    path.write_text(text + "\n")
    path.chmod(0o600)
    return path


def one_clear_line(done: subprocess.CompletedProcess[str], *names: str) -> str:
    """The command failed with exit 1 and one line on stderr naming each of ``names``, never
    the password."""
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    for name in names:
        assert name in lines[0], (name, lines[0])
    assert SECRET not in done.stderr + done.stdout
    return lines[0]


def test_init_postgres_makes_the_schema_and_every_later_command_reads_it(
    conninfo: Path, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    done = cli(state, "init", "--postgres", str(conninfo), "--name", "ctl-a")
    assert done.returncode == 0, done.stderr
    settings = config.load(state)
    assert settings == config.ControllerConfig(name="ctl-a", postgres=conninfo.absolute())
    assert (state / config.CONFIG).stat().st_mode & 0o777 == 0o600
    assert not (state / "inventory.db").exists()
    with database(conninfo) as conn:
        assert conn.execute(pg_schema.READ_VERSION).fetchone() == (SCHEMA_VERSION,)
        (events,) = conn.execute("SELECT count(*) FROM audit").fetchone()
    assert cli(state, "status").returncode == 0
    verify = cli(state, "audit", "--verify")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    with database(conninfo) as conn:  # the commands wrote there: none to a SQLite file
        assert conn.execute("SELECT count(*) FROM audit").fetchone()[0] >= events
    assert not (state / "inventory.db").exists()


def test_the_environment_names_the_file_for_one_command(
    conninfo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "state"
    monkeypatch.setenv(config.ENV, str(conninfo))
    assert cli(state, "init").returncode == 0
    assert config.load(state).postgres == conninfo.absolute()
    with database(conninfo) as conn:
        assert conn.execute(pg_schema.READ_VERSION).fetchone() == (SCHEMA_VERSION,)


def test_the_postgres_schema_has_every_sqlite_table_and_column(
    conninfo: Path, tmp_path: Path
) -> None:
    """One version, two engines: the same tables with the same columns, step for step."""
    assert len(pg_schema.PG_MIGRATIONS) == len(schema_mod.MIGRATIONS) == SCHEMA_VERSION
    Inventory.open(tmp_path / "inventory.db").close()
    import sqlite3

    lite = sqlite3.connect(tmp_path / "inventory.db")
    tables = [
        r[0]
        for r in lite.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        )
    ]
    want = {t: [r[1] for r in lite.execute(f'PRAGMA table_info("{t}")')] for t in tables}
    Inventory.open(tmp_path / "x.db", postgres=conninfo).close()
    with database(conninfo) as conn:
        got = {
            t: [
                r[0]
                for r in conn.execute(
                    "SELECT column_name FROM information_schema.columns "
                    "WHERE table_schema = 'public' AND table_name = %s ORDER BY ordinal_position",
                    [t],
                )
            ]
            for t in want
        }
    assert got == want


def test_a_newer_schema_is_refused_naming_both_versions(conninfo: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    assert cli(state, "init", "--postgres", str(conninfo)).returncode == 0
    with database(conninfo) as conn:
        conn.execute("UPDATE meshtui_schema SET version = %s", [SCHEMA_VERSION + 1])
    for args in (["status"], ["push"], ["--read-only", "status"]):
        done = cli(state, *args)
        line = one_clear_line(done, f"schema version {SCHEMA_VERSION + 1}", str(SCHEMA_VERSION))
        assert "PostgreSQL" in line


def test_a_conninfo_file_others_can_read_is_refused_naming_it(
    conninfo: Path, tmp_path: Path
) -> None:
    leaky = write_conninfo(tmp_path / "leaky.conninfo", f"{text_of(conninfo)} password={SECRET}")
    leaky.chmod(0o644)
    state = tmp_path / "state"
    done = cli(state, "init", "--postgres", str(leaky))
    line = one_clear_line(done, str(leaky), "chmod 600")
    assert "readable by others" in line
    assert not (state / config.CONFIG).exists()


def test_a_conninfo_file_through_a_link_is_refused(conninfo: Path, tmp_path: Path) -> None:
    link = tmp_path / "link.conninfo"
    link.symlink_to(conninfo)
    done = cli(tmp_path / "state", "init", "--postgres", str(link))
    assert done.returncode == 1 and str(link) in done.stderr, done.stderr


def test_a_sqlite_state_folder_is_not_switched_over(conninfo: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    assert cli(state, "init").returncode == 0
    Inventory.open(state / "inventory.db").close()
    done = cli(state, "init", "--postgres", str(conninfo))
    one_clear_line(done, "inventory.db", "SQLite")
    assert config.load(state).postgres is None


@pytest.fixture
def initialised(conninfo: Path, tmp_path: Path) -> Path:
    """A state folder whose inventory is on PostgreSQL; its conninfo file may be rewritten."""
    state = tmp_path / "state"
    mine = write_conninfo(tmp_path / "mine.conninfo", text_of(conninfo))
    assert cli(state, "init", "--postgres", str(mine)).returncode == 0
    return state


def failing(state: Path, *names: str) -> None:
    """Every command fails in seconds with one line naming ``names``."""
    for args in (["status"], ["push"], ["audit", "--verify"], ["--read-only", "status"]):
        began = time.monotonic()
        done = cli(state, *args)
        assert time.monotonic() - began < 15, args
        one_clear_line(done, *names)


def test_an_unreachable_server_is_one_line_naming_it(initialised: Path, tmp_path: Path) -> None:
    port = free_port()
    write_conninfo(
        tmp_path / "mine.conninfo",
        f"host=127.0.0.1 port={port} dbname=inventory user=meshtui password={SECRET}",
    )
    failing(initialised, f"127.0.0.1:{port}/inventory", "cannot connect")


def test_an_inventory_named_as_the_labs_but_not_the_labs_gets_no_lab_hint(
    conninfo: Path, tmp_path: Path
) -> None:
    """A conninfo file called ``inventory.conninfo`` beside an ``inventory`` folder, as the
    lab names its own, but in no lab's folder (``/etc/meshtui``): when its server cannot be
    reached the line names the server, and never tells the operator to run ``lab up`` on the
    folder above it (which would raise a lab there)."""
    etc = tmp_path / "etc" / "meshtui"
    (etc / "inventory").mkdir(parents=True)
    mine = write_conninfo(etc / "inventory.conninfo", text_of(conninfo))
    state = tmp_path / "state"
    assert cli(state, "init", "--postgres", str(mine)).returncode == 0
    port = free_port()
    write_conninfo(mine, f"host=127.0.0.1 port={port} dbname=inventory user=meshtui")
    done = cli(state, "status")
    assert done.returncode == 1 and f"127.0.0.1:{port}/inventory" in done.stderr, done.stderr
    assert "lab up" not in done.stderr, done.stderr


def test_a_server_that_never_answers_times_out_in_seconds(
    initialised: Path, tmp_path: Path
) -> None:
    """A listener that accepts the connection and never says a word: connect_timeout ends it."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        port = silent.getsockname()[1]
        write_conninfo(
            tmp_path / "mine.conninfo",
            f"host=127.0.0.1 port={port} dbname=inventory user=meshtui password={SECRET}",
        )
        began = time.monotonic()
        done = cli(initialised, "status")
        assert time.monotonic() - began < 12
        one_clear_line(done, f"127.0.0.1:{port}/inventory", "cannot connect")


def test_a_wrong_password_is_one_line_naming_the_server(
    initialised: Path, tmp_path: Path, conninfo: Path, server: Cluster
) -> None:
    cluster = server
    dbname = psycopg.conninfo.conninfo_to_dict(text_of(conninfo))["dbname"]
    with database(conninfo) as conn:
        conn.execute("DROP ROLE IF EXISTS meshtui_ctl")
        conn.execute("CREATE ROLE meshtui_ctl LOGIN PASSWORD 'the-right-one'")
    write_conninfo(
        tmp_path / "mine.conninfo",
        f"host=127.0.0.1 port={cluster.port} dbname={dbname} user=meshtui_ctl password={SECRET}",
    )
    failing(initialised, f"127.0.0.1:{cluster.port}/{dbname}", "password authentication failed")


def test_a_read_only_server_is_refused_naming_it(initialised: Path, conninfo: Path) -> None:
    dbname = psycopg.conninfo.conninfo_to_dict(text_of(conninfo))["dbname"]
    with database(conninfo) as conn:
        conn.execute(
            sql.SQL("ALTER DATABASE {} SET default_transaction_read_only = on").format(
                sql.Identifier(str(dbname))
            )
        )
    failing(initialised, f"/{dbname}", "read-only")


APPENDER = """
import sys
from pathlib import Path
from meshtui.controller.core import Controller

state, writer, count = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
Path(sys.argv[4]).touch()
while not Path(sys.argv[5]).exists():  # both start appending at once
    pass
with Controller.open(state) as ctl:
    for i in range(count):
        ctl.inventory.record("test", [], {"writer": writer, "i": i}, "ok")
"""


def test_two_processes_appending_at_once_keep_one_linear_signed_chain(
    initialised: Path, tmp_path: Path, conninfo: Path
) -> None:
    """Two controller processes append hundreds of events each to one PostgreSQL inventory at
    once: no number is skipped or used twice, each writer's events are all there in its order,
    and ``audit --verify`` passes (the chain and its signed head)."""
    count = 300
    go = tmp_path / "go"
    writers = []
    for name in ("a", "b"):
        ready = tmp_path / f"ready-{name}"
        cmd = [
            sys.executable,
            "-c",
            APPENDER,
            str(initialised),
            name,
            str(count),
            str(ready),
            str(go),
        ]
        writers.append((subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True), ready))
    while not all(ready.exists() for _, ready in writers):
        time.sleep(0.01)
    go.touch()
    for proc, _ in writers:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    with database(conninfo) as conn:
        rows = conn.execute("SELECT seq, detail FROM audit ORDER BY seq").fetchall()
        head = conn.execute("SELECT seq FROM audit_head").fetchone()
    seqs = [seq for seq, _ in rows]
    assert seqs == list(range(1, len(rows) + 1))
    assert head == (seqs[-1],)
    mine = {"a": [], "b": []}
    for _, detail in rows:
        if '"writer"' in detail:
            found = json.loads(detail)
            mine[found["writer"]].append(found["i"])
    assert mine == {"a": list(range(count)), "b": list(range(count))}
    interleaved = [json.loads(d).get("writer") for _, d in rows if '"writer"' in d]
    assert any(x != y for x, y in zip(interleaved, interleaved[1:], strict=False))  # at once
    done = cli(initialised, "audit", "--verify")
    assert done.returncode == 0, done.stdout + done.stderr


@dataclass
class Replicated:
    """A primary and its streaming standby, with a conninfo file naming the inventory on each."""

    on_primary: Path
    on_standby: Path
    primary: Cluster
    standby_dir: Path

    def both(self, **more: str) -> str:
        """A conninfo naming the inventory on the primary, then on the standby, as
        ``postgres`` (``more``: further settings, such as ``target_session_attrs``)."""
        first = psycopg.conninfo.conninfo_to_dict(text_of(self.on_primary))
        second = psycopg.conninfo.conninfo_to_dict(text_of(self.on_standby))
        return psycopg.conninfo.make_conninfo(
            "",
            host=f"{first['host']},{second['host']}",
            port=f"{first['port']},{second['port']}",
            user="postgres",
            dbname=first["dbname"],
            **more,
        )

    def cut_off(self) -> None:
        """Wait until the standby replayed all the primary wrote so far, then stop it
        receiving (its ``primary_conninfo`` emptied): what the primary writes next is lost
        when the standby is promoted."""
        with database(self.on_primary) as conn:
            lsn = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        with database(self.on_standby) as conn:
            conn.autocommit = True
            for _ in range(200):
                if conn.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", lsn).fetchone()[0]:
                    break
                time.sleep(0.05)
            else:
                pytest.fail("the standby did not catch up")
            conn.execute("ALTER SYSTEM SET primary_conninfo = ''")
            conn.execute("SELECT pg_reload_conf()")
            for _ in range(200):
                if conn.execute("SELECT count(*) FROM pg_stat_wal_receiver").fetchone() == (0,):
                    break
                time.sleep(0.05)
            else:
                pytest.fail("the standby kept receiving")

    def promote(self) -> None:
        """Make the standby the primary (``pg_ctl promote``, waiting until it takes writes)."""
        bins = self.primary.binaries
        done = self.primary._run([str(bins / "pg_ctl"), "-D", str(self.standby_dir), "-w",
                                  "-t", "60", "promote"])  # fmt: skip
        assert done.returncode == 0, done.stderr + done.stdout


@pytest.fixture(params=["18", "15"])
def standby(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Replicated]:
    """A primary of its own with an inventory database, and a real hot standby of it
    (``pg_basebackup -R``), on each server version: conninfo files naming the database on
    each."""
    primary, base = start_cluster(request.param)
    folder = tmp_path / "pg"
    folder.mkdir(mode=0o700)
    copy = base / "standby"
    try:
        on_primary = inventory_database(primary, folder)
        primary.set_hba([
            "local all postgres peer map=admin",
            "local replication postgres peer map=admin",
        ])  # fmt: skip
        copy.mkdir(mode=0o700)
        if primary.system_user is not None:
            shutil.chown(copy, primary.system_user, primary.system_user)
        bins = primary.binaries
        done = primary._run([str(bins / "pg_basebackup"), "-D", str(copy), "-R", "-X", "stream",
                             "-h", str(primary.socket_dir), "-p", str(primary.port),
                             "-U", "postgres", "--no-sync", "-c", "fast"])  # fmt: skip
        assert done.returncode == 0, done.stderr
        port = free_port()
        done = primary._run([str(bins / "pg_ctl"), "-D", str(copy), "-w", "-t", "60",
                             "-l", str(copy / "log"), "-o", f"-p {port} -k {copy}", "start"])  # fmt: skip
        assert done.returncode == 0, done.stderr + done.stdout
        dbname = psycopg.conninfo.conninfo_to_dict(text_of(on_primary))["dbname"]
        on_standby = write_conninfo(
            folder / "standby.conninfo",
            f"host={copy} port={port} user=postgres dbname={dbname}",
        )
        with psycopg.connect(text_of(on_standby)) as conn:  # a standby indeed
            assert conn.execute("SELECT pg_is_in_recovery()").fetchone() == (True,)
        yield Replicated(on_primary, on_standby, primary, copy)
    finally:
        primary._run([str(primary.binaries / "pg_ctl"), "-D", str(copy), "-m", "immediate", "stop"])
        primary.stop()
        shutil.rmtree(base, ignore_errors=True)


def test_a_hot_standby_is_refused_naming_it(standby: Replicated, tmp_path: Path) -> None:
    """A conninfo naming a real streaming standby: every command refuses it, one line."""
    on_primary, on_standby = standby.on_primary, standby.on_standby
    state = tmp_path / "state"
    mine = write_conninfo(tmp_path / "mine.conninfo", text_of(on_primary))
    assert cli(state, "init", "--postgres", str(mine)).returncode == 0
    write_conninfo(mine, text_of(on_standby))
    params = psycopg.conninfo.conninfo_to_dict(text_of(on_standby))
    failing(state, f"{params['host']}:{params['port']}/{params['dbname']}", "read-only")


FAILOVER_TIMEOUT = 3
"""The conninfo's ``connect_timeout`` in the failover test: a switch costs at most this per
host named (a host that refuses at once, as a stopped one does, costs nothing)."""


def test_several_hosts_with_read_write_carry_on_against_the_promoted_standby(
    standby: Replicated, tmp_path: Path
) -> None:
    """A conninfo naming the primary and its standby with ``target_session_attrs=read-write``:
    the primary stopped, a write in between fails in seconds naming both hosts; the standby
    promoted, the controller kept open (as ``watch`` keeps one) reads and writes on it within
    ``connect_timeout`` × hosts, and a new command (status, audit --verify) runs there too."""
    from meshtui.controller.core import Controller
    from meshtui.errors import InventoryError

    first = psycopg.conninfo.conninfo_to_dict(text_of(standby.on_primary))
    second = psycopg.conninfo.conninfo_to_dict(text_of(standby.on_standby))
    both = standby.both(target_session_attrs="read-write", connect_timeout=str(FAILOVER_TIMEOUT))
    state = tmp_path / "state"
    mine = write_conninfo(tmp_path / "mine.conninfo", both)
    assert cli(state, "init", "--postgres", str(mine)).returncode == 0
    with Controller.open(state) as ctl:
        ctl.inventory.record("note", [], {"i": 1}, "ok")
        standby.primary.stop()
        began = time.monotonic()
        with pytest.raises(InventoryError, match=f"{first['port']}.*{second['port']}"):
            ctl.inventory.record("note", [], {"i": 2}, "ok")  # no primary anywhere
        assert time.monotonic() - began < 2 * FAILOVER_TIMEOUT + 2
        standby.promote()
        began = time.monotonic()
        ctl.inventory.record("note", [], {"i": 3}, "ok")
        assert ctl.status() == []
        assert time.monotonic() - began <= 2 * FAILOVER_TIMEOUT
        notes = [e["detail"]["i"] for e in ctl.inventory.events() if e["kind"] == "note"]
        assert notes == [1, 3]
    with database(standby.on_standby) as conn:  # the new primary holds them
        assert conn.execute("SELECT pg_is_in_recovery()").fetchone() == (False,)
    for args in (["status"], ["audit", "--verify"]):
        done = cli(state, *args)
        assert done.returncode == 0, (args, done.stdout, done.stderr)


def test_a_holding_the_standby_never_received_gives_its_epoch_again_and_is_raised_past(
    standby: Replicated,
) -> None:
    """The lease across a real switch: the standby stops receiving (its ``primary_conninfo``
    emptied), a holding is taken on the primary, the primary dies and the standby is promoted.
    The next taker there gets the lost holding's epoch again (why nodes keep whose an epoch is);
    the lost holding is not trusted (its check and renewal fail); the new holder raises its
    epoch past the one a node reports and holds on."""
    from meshtui.errors import LeaseLostError
    from meshtui.inventory import lease

    a, b = lease.Claimant("ctl-a", "a1", 1), lease.Claimant("ctl-b", "b1", 2)
    with database(standby.on_primary) as conn:
        conn.autocommit = True
        lease.ensure_table(conn)
        first = lease.acquire(conn, lease.DELIVER, a, "push", 30)
        assert first is not None
        before = lease.timeline(conn)
        assert before is not None
        assert lease.release(conn, lease.DELIVER, a, first.epoch)
    standby.cut_off()  # the release is there; then no more
    with database(standby.on_primary) as conn:
        conn.autocommit = True
        lost = lease.acquire(conn, lease.DELIVER, a, "rotate", 30)
        assert lost is not None and lost.epoch == first.epoch + 1
    standby.primary.stop()
    standby.promote()
    with database(standby.on_standby) as conn:
        conn.autocommit = True
        assert lease.renew(conn, lease.DELIVER, a, lost.epoch, 30) is None  # not trusted
        after = lease.timeline(conn)  # the promotion: a new timeline, which a raise records
        assert after is not None and after > before
        with pytest.raises(LeaseLostError), conn.transaction():
            lease.check(conn, lease.DELIVER, a, lost.epoch)
        taken = lease.acquire(conn, lease.DELIVER, b, "push", 30)
        assert taken is not None and taken.epoch == lost.epoch  # the same number again
        raised = lease.raise_epoch(conn, lease.DELIVER, b, taken.epoch, lost.epoch + 1)
        assert raised is not None and raised.epoch == lost.epoch + 1 and raised.holder == "ctl-b"
        assert lease.raise_epoch(conn, lease.DELIVER, a, lost.epoch, lost.epoch + 9) is None
        with conn.transaction():
            lease.check(conn, lease.DELIVER, b, raised.epoch)
        renewed = lease.renew(conn, lease.DELIVER, b, raised.epoch, 30)
        assert renewed is not None and renewed.epoch == raised.epoch


BASE_TABLES_ORDER = {
    "audit": "seq", "audit_head": "id", "claims": "provider, claim", "deliveries": 'pair, "end"',
    "digest_keys": "controller",
    "drills": "id", "generations": "pair, generation", "modules": "id", "nodes": "name",
    "own_secrets": "module, name", "pair_ends": "pair", "pairs": "id", "policies": "pair",
    "probes": "id", "provider_bases": "provider, provision", "rotations": "id",
}  # fmt: skip
"""Every table a move copies (and ``pair_ends``, which the triggers make), in a fixed order."""


def filled(state: Path, probes: int) -> None:
    """A SQLite inventory with pairs, deliveries, ``probes`` probes, a rotation, signed events
    and the mesh's digest key, written as the controller writes them."""
    from meshtui.controller.act import digest_keys
    from meshtui.controller.core import Controller
    from tests.test_status_read import PAIRS, delivery, pair_record, probe

    rng = random.Random(5)
    with Controller.open(state) as ctl:
        inv = ctl.inventory
        with inv.transaction("test") as tx:
            tx.put_pairs([pair_record(pid) for pid in PAIRS])
            tx.put_deliveries(
                [delivery(pid, end, rng) for pid in PAIRS for end in ("consumer", "provider")]
            )
            tx.add_probes([probe(rng.choice(PAIRS), rng) for _ in range(probes)])
            rid = tx.journal_rotation([{"pair": PAIRS[0], "from": 1, "to": 2}], owner_pid=1)
            tx.audit("rotate", [PAIRS[0]], {"rotation": rid}, "started")
        for i in range(20):
            inv.record("note", [], {"i": i}, "ok")
        digest_keys.open_key(ctl, make=True)


def dump(conn: Any) -> dict[str, list[tuple[Any, ...]]]:
    return {
        t: [tuple(r) for r in conn.execute(f'SELECT * FROM "{t}" ORDER BY {o}').fetchall()]
        for t, o in BASE_TABLES_ORDER.items()
    }


def test_a_sqlite_inventory_moves_whole_into_an_empty_postgres_one(
    conninfo: Path, tmp_path: Path
) -> None:
    """Every row of every table, the chain verifying with the controller key, the numbering
    going on after the highest; a second move into the now full target is refused."""
    import sqlite3

    state = tmp_path / "state"
    assert cli(state, "init").returncode == 0
    filled(state, probes=200)
    with contextlib.closing(sqlite3.connect(state / "inventory.db")) as lite:
        before = dump(lite)
    done = cli(state, "move-inventory", "--to-postgres", str(conninfo))
    assert done.returncode == 0, done.stderr
    assert config.load(state).postgres == conninfo.absolute()
    assert not (state / "inventory.db").exists() and (state / "inventory.db.moved").exists()
    with database(conninfo) as conn:
        after = dump(conn)
    assert after == before
    verify = cli(state, "audit", "--verify")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    from meshtui.controller.act import digest_keys
    from meshtui.controller.core import Controller

    assert len(before["digest_keys"]) == 1
    with Controller.open(state) as ctl:  # numbering goes on past the copied rows
        with ctl.inventory.transaction("test") as tx:
            rid = tx.journal_rotation([], owner_pid=1)
        assert rid == max(r[0] for r in before["rotations"]) + 1
        digest_keys.open_key(ctl, make=False)  # its sealed copy moved with it, and opens
    other = tmp_path / "other"
    assert cli(other, "init").returncode == 0
    filled(other, probes=5)
    refused = cli(other, "move-inventory", "--to-postgres", str(conninfo))
    one_clear_line(refused, "not empty", "nothing was copied")
    assert config.load(other).postgres is None and (other / "inventory.db").exists()


def test_a_move_killed_midway_leaves_the_target_empty_and_the_folder_on_sqlite(
    conninfo: Path, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    assert cli(state, "init").returncode == 0
    filled(state, probes=15000)
    dbname = psycopg.conninfo.conninfo_to_dict(text_of(conninfo))["dbname"]
    cmd = [sys.executable, "-m", "meshtui.cli", "--state", str(state), "move-inventory",
           "--to-postgres", str(conninfo)]  # fmt: skip
    mover = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    watcher = database(conninfo)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the copy is under way: rows are going in
            (copying,) = watcher.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s "
                "AND query LIKE 'INSERT INTO \"probes\"%%'",
                [dbname],
            ).fetchone()
            if copying:
                break
            assert mover.poll() is None, "the move ended before it was seen copying"
            time.sleep(0.01)
        mover.kill()
        mover.wait()
        time.sleep(0.5)  # the server notices the client gone and rolls back
        for table in BASE_TABLES_ORDER:
            assert watcher.execute(f'SELECT count(*) FROM "{table}"').fetchone() == (0,), table
    finally:
        watcher.close()
    assert config.load(state).postgres is None and (state / "inventory.db").exists()
    done = cli(state, "move-inventory", "--to-postgres", str(conninfo))
    assert done.returncode == 0, done.stderr
    assert cli(state, "audit", "--verify").returncode == 0


def test_backup_of_a_postgres_inventory_names_the_pg_dump_way(
    initialised: Path, tmp_path: Path
) -> None:
    phrase = write_conninfo(tmp_path / "phrase", "correct horse battery staple")
    done = cli(initialised, "backup", str(tmp_path / "b.backup"), "--passphrase-file", str(phrase))
    one_clear_line(done, "pg_dump", "PostgreSQL")
    assert not (tmp_path / "b.backup").exists()


def test_the_pg_dump_way_restores_an_inventory_that_verifies(
    initialised: Path, tmp_path: Path, server: Cluster
) -> None:
    """The manual's backup of a PostgreSQL inventory: ``pg_dump`` of the database beside the
    state folder's key files; ``pg_restore`` into a new database and a state folder holding
    those files, whose settings name it: the chain verifies with the controller key, the
    pairs are all there."""
    cluster = server
    filled(initialised, probes=50)
    source = config.load(initialised).postgres
    assert source is not None
    dump_file = tmp_path / "inventory.dump"
    bins = cluster.binaries
    done = subprocess.run([str(bins / "pg_dump"), "--format=custom", "--file", str(dump_file),
                           "--dbname", text_of(source)], capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    folder = tmp_path / "restored-pg"
    folder.mkdir(mode=0o700)
    target = inventory_database(cluster, folder, empty=True)
    done = subprocess.run([str(bins / "pg_restore"), "--no-owner", "--exit-on-error",
                           "--dbname", text_of(target), str(dump_file)],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    restored = tmp_path / "restored"
    restored.mkdir(mode=0o700)
    for name in ("controller.key", "controller.pub", "sequence"):
        if (initialised / name).exists():
            shutil.copy2(initialised / name, restored / name)
    config.save(restored, config.ControllerConfig(name="ctl-a", postgres=target))
    verify = cli(restored, "audit", "--verify")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    with database(source) as a, database(target) as b:
        assert dump(a) == dump(b)


@pytest.mark.parametrize("version", ["18", "15"])
def test_a_server_restarted_between_writes_is_reconnected_and_said_while_down(
    tmp_path: Path, version: str
) -> None:
    """An open inventory (``watch`` holds one for days) whose server restarts: a write while
    it is down fails in seconds with one line naming it, and the next write after it is back
    goes through on a new connection, the chain still one."""
    from meshtui.errors import InventoryError

    cluster, base = start_cluster(version)
    folder = tmp_path / "pg"
    folder.mkdir(mode=0o700)
    try:
        with Inventory.open(
            tmp_path / "inventory.db", postgres=inventory_database(cluster, folder)
        ) as inv:
            inv.record("note", [], {"i": 1}, "ok")
            cluster.stop()
            began = time.monotonic()
            with pytest.raises(InventoryError, match=f"PostgreSQL .*:{cluster.port}/"):
                inv.record("note", [], {"i": 2}, "ok")
            assert time.monotonic() - began < 10
            cluster.start()
            inv.record("note", [], {"i": 3}, "ok")
            assert [e["detail"]["i"] for e in inv.events()] == [1, 3]
            assert inv.verify_chain().ok
    finally:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)


def test_the_inventory_connection_ends_on_a_cut_link_in_seconds(tmp_path: Path) -> None:
    """Without TCP's own limits a query whose link is cut after the server acknowledged it
    waits two hours: the inventory's connection sets ``tcp_user_timeout`` and keepalives from
    its ``connect_timeout`` (as the lease's does), unless the file says otherwise."""
    from psycopg.conninfo import conninfo_to_dict

    from meshtui.inventory import pg_connection

    conninfo = tmp_path / "inventory.conninfo"
    conninfo.write_text("host=10.0.0.9 dbname=meshtui user=meshtui connect_timeout=4\n")
    conninfo.chmod(0o600)
    params = conninfo_to_dict(pg_connection.settings(conninfo).conninfo)
    assert params["tcp_user_timeout"] == "4000" and params["keepalives"] == "1"
    assert params["keepalives_idle"] == "4" and params["keepalives_interval"] == "1"
    conninfo.write_text("host=10.0.0.9 dbname=meshtui keepalives_idle=30\n")
    assert conninfo_to_dict(pg_connection.settings(conninfo).conninfo)["keepalives_idle"] == "30"


def test_a_server_not_running_is_one_line_whose_parts_stay_apart(tmp_path: Path) -> None:
    """libpq's two lines (the failure, then "Is the server running …") read as two, not as
    one sentence run together, when a command prints them on one line."""
    from meshtui.inventory import pg_connection

    with pytest.raises(psycopg.OperationalError) as failed:
        psycopg.connect(f"host={tmp_path} port={free_port()} dbname=x connect_timeout=2")
    said = pg_connection.reason(failed.value)
    assert "\n" not in said and "directory; Is the server running" in said, said
