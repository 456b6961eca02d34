"""The pooled PostgreSQL inventory: a process that shares connections checks them out of one
pool from several threads, and a server switched read-only while the pool is open is refused
at the next checkout with one line naming it, then taken back once it takes writes again."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest

from meshtui.errors import InventoryError
from meshtui.inventory import Inventory, pg_pool
from meshtui.kinds.postgres.lab import Cluster
from tests.fix_pg import inventory_database

TIMEOUT = 2
"""The conninfo's ``connect_timeout``: one host, so a checkout gives up after this."""


@pytest.fixture
def server(own_pg: Cluster) -> Cluster:
    return own_pg


@pytest.fixture
def conninfo(server: Cluster, tmp_path: Path) -> Path:
    folder = tmp_path / "pg"
    folder.mkdir(mode=0o700)
    path = inventory_database(server, folder)
    path.write_text(path.read_text().strip() + f" connect_timeout={TIMEOUT}\n")
    return path


@pytest.fixture
def shared() -> Iterator[None]:
    pg_pool.share()
    try:
        yield
    finally:
        pg_pool.close()


def switch_read_only(cluster: Cluster, on: bool) -> None:
    """``default_transaction_read_only`` of the whole server, reloaded into open sessions."""
    with psycopg.connect(cluster.admin_conninfo(), autocommit=True) as conn:
        if on:
            conn.execute("ALTER SYSTEM SET default_transaction_read_only = on")
        else:
            conn.execute("ALTER SYSTEM RESET default_transaction_read_only")
        conn.execute("SELECT pg_reload_conf()")
    time.sleep(0.5)  # the reload reaches each backend at its next command


def backend(inv: Inventory) -> int:
    return int(inv._conn.raw.info.backend_pid)  # type: ignore[union-attr]


def test_threads_share_pooled_sessions(conninfo: Path, tmp_path: Path, shared: None) -> None:
    """Many opens, one after another and from several threads at once, use at most the
    pool's sessions: a closed inventory's session serves a later open."""
    path = tmp_path / "inventory.db"
    with Inventory.open(path, postgres=conninfo) as inv:
        inv.record("note", [], {"i": 1}, "ok")
    writers = set()
    for _ in range(10):
        with Inventory.open(path, postgres=conninfo) as inv:
            writers.add(backend(inv))
    assert len(writers) <= pg_pool.MAX_SIZE

    def read(_: int) -> int:
        with Inventory.open(path, read_only=True, postgres=conninfo) as inv:
            assert [e["detail"] for e in inv.events() if e["kind"] == "note"] == [{"i": 1}]
            return backend(inv)

    with ThreadPoolExecutor(6) as workers:
        used = set(workers.map(read, range(30)))
    assert 1 <= len(used) <= pg_pool.MAX_SIZE


def test_a_server_switched_read_only_under_an_open_pool_is_refused_at_the_next_checkout(
    server: Cluster, conninfo: Path, tmp_path: Path, shared: None
) -> None:
    """psycopg_pool's own check passes a session of a server that became read-only; the
    pool's check refuses it: one line naming the server, within the checkout's bound, for a
    writer and a reader alike; once the server takes writes again, so does the pool."""
    path = tmp_path / "inventory.db"
    with Inventory.open(path, postgres=conninfo) as inv:
        inv.record("note", [], {"i": 1}, "ok")
    with Inventory.open(path, read_only=True, postgres=conninfo) as inv:
        inv.events()
    switch_read_only(server, True)
    try:
        for read_only in (False, True):
            began = time.monotonic()
            with pytest.raises(InventoryError) as refused:
                Inventory.open(path, read_only=read_only, postgres=conninfo)
            assert time.monotonic() - began < 2 * TIMEOUT + 3
            line = str(refused.value)
            assert "\n" not in line
            assert f"127.0.0.1:{server.port}/" in line or f":{server.port}/" in line, line
            assert "read-only" in line
            assert "password" not in line
    finally:
        switch_read_only(server, False)
    with Inventory.open(path, postgres=conninfo) as inv:
        inv.record("note", [], {"i": 2}, "ok")
        assert [e["detail"]["i"] for e in inv.events() if e["kind"] == "note"] == [1, 2]
