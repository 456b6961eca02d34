"""Delivering actions take turns across controllers of one PostgreSQL: the second is told who
holds the turn, the holder's epoch is on its fence, and a holder stops at its renew deadline."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from meshtui.atomic import write_private
from meshtui.controller import lock
from meshtui.controller.config import LeaseConfig
from meshtui.controller.core import Controller
from meshtui.controller.turn import Turn, claimant, since_boot
from meshtui.errors import LeaseLostError, RotationBusyError
from meshtui.inventory import lease
from meshtui.inventory.lease import Leases
from meshtui.kinds.postgres.lab import Cluster

DB = "meshtui_turns"


@pytest.fixture
def conninfo_file(pg_clean: Cluster, tmp_path: Path) -> Path:
    """A database of its own on the session's cluster, named by a 0600 conninfo file."""
    with psycopg.connect(pg_clean.admin_conninfo(), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DB)))
    info = psycopg.conninfo.make_conninfo(pg_clean.admin_conninfo(), dbname=DB)
    path = tmp_path / "inventory.conninfo"
    write_private(path, (info + "\n").encode())
    return path


def state(tmp_path: Path, name: str, conninfo: Path, lease_table: str = "") -> Path:
    folder = tmp_path / name
    folder.mkdir(mode=0o700)
    (folder / "controller.toml").write_text(
        f'name = "{name}"\n[inventory]\npostgres = "{conninfo}"\n{lease_table}'
    )
    return folder


@pytest.fixture
def two(tmp_path: Path, conninfo_file: Path) -> Iterator[tuple[Controller, Controller]]:
    with (
        Controller.open(state(tmp_path, "ctl-a", conninfo_file)) as a,
        Controller.open(state(tmp_path, "ctl-b", conninfo_file)) as b,
    ):
        yield a, b


def test_the_second_controller_is_told_who_delivers_and_takes_the_next_epoch(two) -> None:
    a, b = two
    with lock.delivering(a, "rotate"):
        assert a.fence.controller == "ctl-a" and a.fence.epoch >= 1
        held = a.fence.epoch
        assert a.turn is not None and a.inventory.fence is not None
        with pytest.raises(RotationBusyError) as exc, lock.delivering(b, "push"):
            pass
        told = str(exc.value)
        assert "cannot push" in told
        assert f"controller ctl-a (host {socket.gethostname()}, pid {os.getpid()}: rotate" in told
        assert f"epoch {held})" in told and "since " in told
        assert b.fence.epoch == 0
    assert a.fence.epoch == 0 and a.turn is None and a.inventory.fence is None  # released
    with lock.delivering(b, "push"):
        assert b.fence.epoch == held + 1


def test_a_second_process_of_the_same_controller_waits_its_turn_too(
    tmp_path: Path, conninfo_file: Path
) -> None:
    folder = state(tmp_path, "ctl-a", conninfo_file)
    leases = Leases.from_file(conninfo_file)
    other = Turn(
        leases, lease.DELIVER, lease.Claimant("ctl-a", "elsewhere", 4242), "push", LeaseConfig()
    )
    assert other.try_take()
    try:
        busy = pytest.raises(RotationBusyError, match="pid 4242")
        with Controller.open(folder) as ctl, busy, lock.delivering(ctl, "rotate"):
            pass
    finally:
        other.release()
        leases.close()


def test_a_holder_past_its_renew_deadline_stops_before_anyone_may_take_over(
    conninfo_file: Path,
) -> None:
    """The renew deadline on this machine's clock ends the turn here while the server still
    counts it held: nobody else can take it yet, and this process sends and writes nothing."""
    now = [100.0]
    lost: list[str] = []
    numbers = LeaseConfig(length_s=30, renew_s=10, deadline_s=20, retry_s=1)
    leases, others = Leases.from_file(conninfo_file), Leases.from_file(conninfo_file)
    mine = Turn(
        leases, lease.DELIVER, claimant("ctl-a"), "push", numbers, clock=lambda: now[0],
        on_lost=lost.append,
    )  # fmt: skip
    try:
        assert mine.try_take()
        now[0] += 19.9
        mine.check()  # within the deadline
        now[0] += 0.2  # a pause (GC, SIGSTOP) carried it past the deadline
        with pytest.raises(LeaseLostError, match=r"ctl-a no longer holds the deliver turn"):
            mine.check()
        assert lost and "20 s deadline" in lost[0]
        row = others.read(lease.DELIVER)
        assert row is not None and row.live and row.holder == "ctl-a"  # the server still holds it
        assert not Turn(others, lease.DELIVER, claimant("ctl-b"), "push", numbers).try_take()
        with (
            pytest.raises(LeaseLostError),
            psycopg.connect(
                psycopg.conninfo.make_conninfo(conninfo_file.read_text().strip())
            ) as conn,
            conn.transaction(),
        ):
            mine.fence(conn)  # a write fenced by a lost turn is refused before the server is asked
    finally:
        mine.release()
        leases.close()
        others.close()


def test_a_held_turn_is_renewed_past_its_length(conninfo_file: Path) -> None:
    import time

    numbers = LeaseConfig(length_s=1.5, renew_s=0.3, deadline_s=1.0, retry_s=0.2)
    leases, others = Leases.from_file(conninfo_file), Leases.from_file(conninfo_file)
    mine = Turn(leases, lease.WATCH, claimant("ctl-a"), "watch", numbers)
    try:
        assert mine.try_take()
        first = mine.epoch
        time.sleep(3.0)
        mine.check()
        assert mine.epoch == first
        assert not Turn(others, lease.WATCH, claimant("ctl-b"), "watch", numbers).try_take()
    finally:
        mine.release()
    assert Turn(others, lease.WATCH, claimant("ctl-b"), "watch", numbers).try_take()
    others.close()
    leases.close()


def test_a_write_under_a_turn_taken_over_is_refused_by_the_shared_inventory(
    two, conninfo_file: Path
) -> None:
    """The fence inside the inventory's own transaction: the server says the turn moved on
    (its lease ran out and another took it), so the old holder's write lands nowhere."""
    a, b = two
    with lock.delivering(a, "push"):
        a.inventory.record("fenced-ok", [], {}, "ok")  # while it holds: written
        info = psycopg.conninfo.make_conninfo(conninfo_file.read_text().strip())
        with psycopg.connect(info, autocommit=True) as conn:  # its lease runs out (a pause)
            conn.execute(
                "UPDATE lease SET expires_at = clock_timestamp() WHERE name = %s", (lease.DELIVER,)
            )
        leases = Leases.from_file(conninfo_file)
        newer = Turn(leases, lease.DELIVER, claimant("ctl-b"), "push", LeaseConfig())
        assert newer.try_take() and newer.epoch == a.fence.epoch + 1
        try:
            with pytest.raises(LeaseLostError, match="controller ctl-b .* took it over"):
                a.inventory.record("fenced-stale", [], {}, "ok")
        finally:
            newer.release()
            leases.close()
    kinds = [e.kind for e in b.events()]
    assert "fenced-ok" in kinds and "fenced-stale" not in kinds


def _switch_lost(conninfo_file: Path, epoch: int) -> None:
    """The lease's database switched to a standby that had not received the holding under
    ``epoch``: its row is the holding before, ended."""
    info = psycopg.conninfo.make_conninfo(conninfo_file.read_text().strip())
    with psycopg.connect(info, autocommit=True) as conn:
        conn.execute(
            "UPDATE lease SET epoch = %s, pid = 1, expires_at = clock_timestamp() WHERE name = %s",
            (epoch - 1, lease.DELIVER),
        )


def test_a_lost_holdings_write_is_refused_when_another_process_of_its_controller_repeats_its_epoch(
    two, conninfo_file: Path
) -> None:
    """Two processes of one controller (its watch and an operator's command): the database
    lost the first one's holding in a switch and gave the second its epoch again. The lease's
    row names the process holding it; a write of the first lands nowhere."""
    a, b = two
    with lock.delivering(a, "push"):
        held = a.fence.epoch
        _switch_lost(conninfo_file, held)
        leases = Leases.from_file(conninfo_file)
        again = Turn(
            leases, lease.DELIVER, lease.Claimant("ctl-a", "elsewhere", 4242), "push",
            LeaseConfig(),
        )  # fmt: skip
        assert again.try_take() and again.epoch == held
        try:
            with pytest.raises(LeaseLostError, match="pid 4242"):
                a.inventory.record("fenced-stale", [], {}, "ok")
        finally:
            again.release()
            leases.close()
    assert "fenced-stale" not in [e.kind for e in b.events()]


SECOND_PROCESS = """
import sys
from meshtui.controller import lock
from meshtui.controller.core import Controller

with Controller.open(sys.argv[1]) as ctl, lock.delivering(ctl, "push"):
    print(ctl.fence.epoch, flush=True)
"""


def test_a_process_given_an_epoch_another_process_of_its_controller_took_raises_past_it(
    tmp_path: Path, conninfo_file: Path
) -> None:
    """A node tells holdings apart by their controller's name: two processes of one controller
    given one epoch (a switch lost the first's holding) would both be accepted. The second
    finds the epoch among those its controller took, and raises its own past it before it
    sends anything (said in the audit)."""
    import subprocess
    import sys

    folder = state(tmp_path, "ctl-a", conninfo_file)
    with Controller.open(folder) as ctl, lock.delivering(ctl, "push"):
        held = ctl.fence.epoch
        _switch_lost(conninfo_file, held)
        second = subprocess.run(
            [sys.executable, "-c", SECOND_PROCESS, str(folder)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert second.returncode == 0, second.stderr
        assert int(second.stdout) > held
        with pytest.raises(LeaseLostError):  # the lost holding writes nothing either
            ctl.inventory.record("fenced-stale", [], {}, "ok")
    with Controller.open(folder) as ctl:
        (raised,) = [e for e in ctl.events() if e.kind == "lease-epoch-raised"]
    assert raised.detail["raised"][0]["node_epoch"] == held


def test_a_raise_on_an_earlier_timeline_does_not_stop_the_next_switchs(conninfo_file: Path) -> None:
    """A node's epoch accepted after this inventory's last raise is a lease this database does
    not know, unless the server was promoted since (a new timeline): a second switch may have
    lost holdings again, and they are raised past like the first's."""
    import time

    from meshtui.controller.turn import Raise

    leases = Leases.from_file(conninfo_file)
    mine = Turn(leases, lease.DELIVER, claimant("ctl-a"), "push", LeaseConfig())
    try:
        assert mine.try_take()
        now = leases.timeline()
        assert now is not None
        earlier = time.time() - 3600
        mine.last_raise = lambda: Raise(earlier, now)
        said = mine.why_not_past("app1", mine.epoch, time.time())
        assert said is not None and "a lease this database does not know" in said
        assert mine.why_not_past("app1", mine.epoch, earlier - 1) is None  # before that raise
        again = Turn(leases, lease.DELIVER, claimant("ctl-a"), "push", LeaseConfig())
        again.row = mine.row
        again.last_raise = lambda: Raise(earlier, now - 1)  # raised before a promotion
        assert again.why_not_past("app1", mine.epoch, time.time()) is None
    finally:
        mine.release()
        leases.close()


def _lease_sessions(conninfo_file: Path) -> set[int]:
    """The server processes of the connections the lease table's users opened."""
    info = psycopg.conninfo.make_conninfo(conninfo_file.read_text().strip())
    with psycopg.connect(info, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = 'meshtui lease'"
        ).fetchall()
    return {row[0] for row in rows}


def test_one_lease_connection_serves_every_action_and_is_opened_again_after_a_restart(
    pg_clean: Cluster, tmp_path: Path, conninfo_file: Path
) -> None:
    """A controller keeps its connection to the lease table from one delivering action to the
    next (opening one per action cost more than a rotation's writes); when the server ended it
    meanwhile, the next action opens another instead of failing."""
    with Controller.open(state(tmp_path, "ctl-a", conninfo_file)) as ctl:
        with lock.delivering(ctl, "rotate"):
            first = ctl.fence.epoch
        kept = _lease_sessions(conninfo_file)
        assert len(kept) == 1
        for _ in range(3):
            with lock.delivering(ctl, "rotate"):
                assert ctl.fence.epoch > first
        assert _lease_sessions(conninfo_file) == kept  # the same session, not one per action
        pg_clean.stop()
        pg_clean.start()
        with lock.delivering(ctl, "push"):
            assert ctl.fence.epoch > first
        again = _lease_sessions(conninfo_file)
        assert len(again) == 1 and again != kept
    assert _lease_sessions(conninfo_file) == set()  # closed with the controller


def test_the_renew_deadline_is_counted_on_a_clock_that_counts_a_suspend(
    conninfo_file: Path,
) -> None:
    """A holder woken from a suspend longer than its deadline must know it lost the turn: the
    monotonic clock stops while the machine is suspended, the boot clock does not, and a turn
    counts its deadline on the boot clock unless told otherwise."""
    import time

    boot = getattr(time, "CLOCK_BOOTTIME", None)
    if boot is None:
        pytest.skip("no CLOCK_BOOTTIME on this system")
    turn = Turn(Leases.from_file(conninfo_file), lease.DELIVER, claimant("ctl-a"), "push",
                LeaseConfig())  # fmt: skip
    before = time.clock_gettime(boot)
    read = turn.clock()
    after = time.clock_gettime(boot)
    assert before <= read <= after
    # on a machine never suspended the two clocks read alike: which one it is, said outright
    assert turn.clock is since_boot
