"""The leader lease on a real PostgreSQL: acquire, renew, takeover only after expiry (the epoch
one higher), release, and the fence check that makes a takeover wait for a fenced write."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from meshtui.errors import LeaseLostError
from meshtui.inventory import lease
from meshtui.kinds.postgres.lab import Cluster

A = lease.Claimant("ctl-a", "host-a", 101)
B = lease.Claimant("ctl-b", "host-b", 202)
DB = "meshtui_lease_test"


@pytest.fixture
def conninfo(pg_clean: Cluster) -> str:
    with psycopg.connect(pg_clean.admin_conninfo(), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DB)))
    info = psycopg.conninfo.make_conninfo(pg_clean.admin_conninfo(), dbname=DB)
    with psycopg.connect(info, autocommit=True) as conn:
        lease.ensure_table(conn)
        conn.execute("CREATE TABLE written (by text, epoch bigint)")
    return info


@pytest.fixture
def two(conninfo: str) -> Iterator[tuple[psycopg.Connection[Any], psycopg.Connection[Any]]]:
    """Two controllers' own connections (autocommit, as the lease's renewer keeps one)."""
    with (
        psycopg.connect(conninfo, autocommit=True) as a,
        psycopg.connect(conninfo, autocommit=True) as b,
    ):
        yield a, b


def test_first_acquire_is_epoch_one_and_a_second_claimant_is_told_who(two: Any) -> None:
    a, b = two
    got = lease.acquire(a, lease.DELIVER, A, "rotate", 15)
    assert got is not None and got.epoch == 1 and got.holder == "ctl-a"
    assert 14 < got.left_s <= 15
    assert lease.acquire(b, lease.DELIVER, B, "push", 15) is None
    now = lease.read(b, lease.DELIVER)
    assert now is not None and now.live
    assert (now.holder, now.host, now.pid, now.action, now.epoch) == (
        "ctl-a",
        "host-a",
        101,
        "rotate",
        1,
    )
    assert "controller ctl-a (host host-a, pid 101: rotate, since " in now.who()
    assert "epoch 1" in now.who()


def test_takeover_only_after_expiry_adds_one_to_the_epoch(two: Any) -> None:
    a, b = two
    first = lease.acquire(a, lease.DELIVER, A, "watch", 0.6)
    assert first is not None
    assert lease.acquire(b, lease.DELIVER, B, "watch", 0.6) is None  # still held
    time.sleep(0.7)
    taken = lease.acquire(b, lease.DELIVER, B, "watch", 15)
    assert taken is not None and taken.epoch == first.epoch + 1 and taken.holder == "ctl-b"
    # the old holder cannot renew nor release what it lost
    assert lease.renew(a, lease.DELIVER, A, first.epoch, 15) is None
    assert not lease.release(a, lease.DELIVER, A, first.epoch)


def test_renew_extends_only_the_same_holding(two: Any) -> None:
    a, b = two
    got = lease.acquire(a, lease.DELIVER, A, "push", 1.0)
    assert got is not None
    time.sleep(0.5)
    renewed = lease.renew(a, lease.DELIVER, A, got.epoch, 1.0)
    assert renewed is not None and renewed.expires_at > got.expires_at
    assert renewed.epoch == got.epoch and renewed.since == got.since
    # another process of the same controller, or a wrong epoch, renews nothing
    same_name_other_pid = lease.Claimant("ctl-a", "host-a", 999)
    assert lease.renew(b, lease.DELIVER, same_name_other_pid, got.epoch, 1.0) is None
    assert lease.renew(a, lease.DELIVER, A, got.epoch + 1, 1.0) is None
    time.sleep(0.7)  # past the first expiry, within the renewed one
    assert lease.acquire(b, lease.DELIVER, B, "push", 1.0) is None


def test_the_server_clock_decides_not_the_callers(two: Any) -> None:
    """Expiry is the server's ``clock_timestamp()`` plus the length: a caller whose own clock
    is hours off takes and loses the lease at the same moments."""
    a, _ = two
    got = lease.acquire(a, lease.DELIVER, A, "push", 30)
    assert got is not None
    (server_now,) = a.execute("SELECT clock_timestamp()").fetchone()
    assert abs((got.expires_at - server_now).total_seconds() - 30) < 1


def test_release_frees_the_turn_for_the_next_epoch(two: Any) -> None:
    a, b = two
    got = lease.acquire(a, lease.DELIVER, A, "push", 15)
    assert got is not None
    assert lease.release(a, lease.DELIVER, A, got.epoch)
    after = lease.read(b, lease.DELIVER)
    assert after is not None and not after.live and after.holder == "ctl-a"
    nxt = lease.acquire(b, lease.DELIVER, B, "rotate", 15)
    assert nxt is not None and nxt.epoch == got.epoch + 1


def test_claimants_at_once_exactly_one_wins(conninfo: str) -> None:
    for round_ in range(10):
        name = f"race{round_}"
        n = 6
        barrier = threading.Barrier(n)
        won: list[int] = []

        def claim(
            i: int,
            name: str = name,
            barrier: threading.Barrier = barrier,
            won: list[int] = won,
        ) -> None:
            with psycopg.connect(conninfo, autocommit=True) as conn:
                barrier.wait()
                if lease.acquire(conn, name, lease.Claimant(f"c{i}", "h", i), "watch", 15):
                    won.append(i)

        threads = [threading.Thread(target=claim, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(won) == 1, won


def test_a_takeover_waits_for_a_fenced_writes_commit_and_a_stale_write_is_refused(
    conninfo: str, two: Any
) -> None:
    a, b = two
    held = lease.acquire(a, lease.DELIVER, A, "rotate", 0.8)
    assert held is not None
    with psycopg.connect(conninfo) as writer:  # the inventory's connection of controller A
        with writer.transaction():
            lease.check(writer, lease.DELIVER, A, held.epoch)  # holds: row locked FOR SHARE
            writer.execute("INSERT INTO written VALUES ('ctl-a', %s)", (held.epoch,))
            time.sleep(1.0)  # the lease runs out while the write is still open
            taken: list[lease.LeaseRow | None] = []
            done = threading.Event()

            def take_over() -> None:
                taken.append(lease.acquire(b, lease.DELIVER, B, "watch", 15))
                done.set()

            thread = threading.Thread(target=take_over)
            thread.start()
            assert not done.wait(1.0), "the takeover did not wait for the fenced write"
        assert done.wait(10), "the takeover did not go on once the fenced write committed"
        thread.join()
        assert taken[0] is not None and taken[0].epoch == held.epoch + 1
        # the old holder's next write, fenced, is refused and lands nowhere
        lost = pytest.raises(LeaseLostError, match=r"ctl-a no longer holds the deliver turn")
        with lost as exc, writer.transaction():
            writer.execute("INSERT INTO written VALUES ('stale', %s)", (held.epoch,))
            lease.check(writer, lease.DELIVER, A, held.epoch)
        assert "controller ctl-b (host host-b" in str(exc.value)
        assert exc.value.epoch == held.epoch
        rows = writer.execute("SELECT by FROM written ORDER BY by").fetchall()
    assert rows == [("ctl-a",)]


def test_an_expired_holding_fails_the_check_even_before_anyone_takes_over(two: Any) -> None:
    a, _ = two
    held = lease.acquire(a, lease.DELIVER, A, "push", 0.3)
    assert held is not None
    time.sleep(0.4)
    with pytest.raises(LeaseLostError, match="its lease ran out"), a.transaction():
        lease.check(a, lease.DELIVER, A, held.epoch)


def test_controllers_starting_together_on_a_new_database_make_the_lease_table_once(
    conninfo: str,
) -> None:
    """The table is made on first use: eight processes' first calls at one instant all
    succeed (``CREATE TABLE IF NOT EXISTS`` alone lets all but one fail on the catalog)."""
    for _ in range(5):
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute("DROP TABLE IF EXISTS lease")
        start = threading.Barrier(8)
        failed: list[BaseException] = []

        def first_use(
            start: threading.Barrier = start, failed: list[BaseException] = failed
        ) -> None:
            with psycopg.connect(conninfo, autocommit=True) as conn:
                start.wait()
                try:
                    lease.ensure_table(conn)
                except psycopg.Error as exc:
                    failed.append(exc)

        threads = [threading.Thread(target=first_use) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert failed == []


@pytest.mark.parametrize("own_pg", ["18"], indirect=True)
def test_a_kept_connection_to_a_primary_made_read_only_goes_on_to_the_new_primary(
    own_pg: Cluster, pg_clean: Cluster
) -> None:
    """The lease's connection is kept from one delivering action to the next. The server it
    was kept on is made read-only (``default_transaction_read_only``, as a switchover fences
    the old primary) while the conninfo names the new one after it with
    ``target_session_attrs=read-write``: the next turn is taken on the new primary, as a
    connection opened for it would be, rather than the action failing on the old one."""
    for cluster in (own_pg, pg_clean):
        with psycopg.connect(cluster.admin_conninfo(), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DB)))
    both = psycopg.conninfo.make_conninfo(
        host=f"{own_pg.socket_dir},{pg_clean.socket_dir}",
        port=f"{own_pg.port},{pg_clean.port}",
        user="postgres",
        dbname=DB,
        target_session_attrs="read-write",
    )
    leases = lease.Leases(both)
    try:
        first = leases.acquire(lease.DELIVER, A, "push", 30)
        assert first is not None and leases.release(lease.DELIVER, A, first.epoch)
        own_pg.set_config(default_transaction_read_only=True)
        taken = leases.acquire(lease.DELIVER, A, "rotate", 30)
        assert taken is not None and taken.epoch == 1  # the new primary's first holding
        info = psycopg.conninfo.make_conninfo(pg_clean.admin_conninfo(), dbname=DB)
        with psycopg.connect(info) as conn:
            row = lease.read(conn, lease.DELIVER)
        assert row is not None and (row.holder, row.action, row.epoch) == ("ctl-a", "rotate", 1)
    finally:
        leases.close()
