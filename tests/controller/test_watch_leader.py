"""``meshtui watch`` on several controllers of one PostgreSQL: exactly one leads, the others
stand by (``watch.json`` and ``/metrics`` say so), and a standby takes over within two lease
lengths when the leader is killed (``kill -9``), cut from PostgreSQL, or PostgreSQL restarts.
Real processes, a real PostgreSQL, a real network namespace."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import psycopg
import pytest
from psycopg import sql

from meshtui.kinds.postgres.lab import Cluster
from meshtui.lab import netns
from tests.controller.failover import LEASE, Watches, controller_folder, metrics_leader
from tests.fix_pg import free_port

BOUND = 2 * LEASE["length_s"]
"""A standby must lead within this many seconds of the leader's end."""
DB = "meshtui_watch_leader"


def said_at(log: Path, words: str) -> str:
    """When a watch's log first says ``words`` (its lines start with an ISO time)."""
    for line in log.read_text().splitlines():
        if words in line:
            return line.split()[0]
    raise AssertionError(f"{log} never says {words!r}")


def _database(cluster: Cluster) -> str:
    with psycopg.connect(cluster.admin_conninfo(), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(DB)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DB)))
    return psycopg.conninfo.make_conninfo(cluster.admin_conninfo(), dbname=DB)


@pytest.fixture
def watches() -> Iterator[Watches]:
    w = Watches()
    try:
        yield w
    finally:
        w.stop_all()


def test_one_leads_the_others_stand_by_and_a_kill_9_is_taken_over(
    pg_clean: Cluster, tmp_path: Path, watches: Watches
) -> None:
    conninfo = _database(pg_clean)
    folders = {
        n: controller_folder(tmp_path, n, conninfo, LEASE) for n in ("ctl-a", "ctl-b", "ctl-c")
    }
    first = watches.start("ctl-a", folders["ctl-a"])
    (leader,) = watches.wait_roles(30)
    assert leader is first
    for name in ("ctl-b", "ctl-c"):
        watches.start(name, folders[name])
    (leader,) = watches.wait_roles(30)
    assert leader is first
    standbys = [w for w in watches.running if w is not leader]
    beat = standbys[0].beat()
    assert beat is not None and beat.role == "standby" and beat.lease_s == LEASE["length_s"]
    assert beat.leader == "ctl-a" and beat.cycles == 0  # a standby acts on nothing
    lead_beat = leader.beat()
    assert lead_beat is not None and lead_beat.role == "leader" and lead_beat.cycles > 0

    leader.kill()  # kill -9: no release, the lease runs out by the server's clock
    new, took = watches.takeover(standbys, BOUND + 5)
    assert took <= BOUND, f"took {took:.1f} s, more than two lease lengths ({BOUND} s)"
    assert sum(1 for w in standbys if w.role() == "leader") == 1
    assert "leading (epoch 2" in new.log.read_text()


def test_a_standby_says_so_on_metrics(pg_clean: Cluster, tmp_path: Path, watches: Watches) -> None:
    conninfo = _database(pg_clean)
    a = controller_folder(tmp_path, "ctl-a", conninfo, LEASE)
    b = controller_folder(tmp_path, "ctl-b", conninfo, LEASE)
    pa, pb = free_port(), free_port()
    wa = watches.start("ctl-a", a, extra=["--metrics", f"127.0.0.1:{pa}"])
    watches.wait_roles(30)
    wb = watches.start("ctl-b", b, extra=["--metrics", f"127.0.0.1:{pb}"])
    watches.wait_roles(30)
    assert wa.role() == "leader" and wb.role() == "standby"

    def leader_gauge(port: int) -> float | None:
        return metrics_leader(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text)

    assert leader_gauge(pa) == 1.0
    assert leader_gauge(pb) == 0.0
    wa.kill(15)  # SIGTERM: the leader gives its turn back, the standby leads at its next try
    _, took = watches.takeover([wb], BOUND)
    assert took <= LEASE["retry_s"] + 2
    assert leader_gauge(pb) == 1.0


@contextmanager
def postgresql_in_a_namespace(nodes: list[str]) -> Iterator[tuple[netns.Network, str]]:
    """PostgreSQL in a namespace of its own and ``nodes`` beside it, one bridge between them
    (take a node's link down to cut it); the network and a password conninfo reaching it."""
    if not netns.available():
        pytest.skip("network namespaces are not usable here")
    from meshtui.kinds.postgres.lab import create_cluster
    from tests.fix_netns import netns_prefix
    from tests.fix_pg import BINARIES

    name = netns_prefix("l")
    netns.destroy(name)
    net = netns.create(name, ["pg", *nodes], subnet="10.214.0.0/24")
    base = Path(tempfile.mkdtemp(prefix="meshtui-pgl-"))
    base.chmod(0o711)
    cluster = create_cluster(
        base / "data",
        port=free_port(),
        listen=(net.address("pg"),),
        hba_networks=(net.cidr(),),
        bindir=BINARIES["18"],
    )
    try:
        cluster.start(netns=net.namespace("pg"))
        password = "lease-test-" + str(time.time_ns())
        with psycopg.connect(cluster.admin_conninfo(), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE ROLE meshtui LOGIN PASSWORD {}").format(password))
            conn.execute("CREATE DATABASE inventory OWNER meshtui")
        conninfo = psycopg.conninfo.make_conninfo(
            host=net.address("pg"), port=cluster.port, user="meshtui", password=password,
            dbname="inventory",
        )  # fmt: skip
        yield net, conninfo
    finally:
        cluster.stop()
        netns.destroy(name)
        shutil.rmtree(base, ignore_errors=True)


def cut(net: netns.Network, node: str) -> None:
    """Take ``node``'s link to the bridge down: its packets go nowhere, nothing is refused."""
    netns._ip("link", "set", f"v-{node}", "down", netns=net.bridge_namespace)


@pytest.mark.root
def test_a_leader_cut_from_postgresql_stands_down_and_a_standby_takes_over(
    tmp_path: Path, watches: Watches
) -> None:
    """PostgreSQL and each controller in a namespace of its own; the leader's link is taken
    down: it stops at its renew deadline, and the other leads within two lease lengths."""
    with postgresql_in_a_namespace(["ctla", "ctlb"]) as (net, conninfo):
        try:
            a = controller_folder(tmp_path, "ctl-a", conninfo, LEASE, net.namespace("ctla"))
            b = controller_folder(tmp_path, "ctl-b", conninfo, LEASE, net.namespace("ctlb"))
            wa = watches.start("ctl-a", a, namespace=net.namespace("ctla"))
            watches.wait_roles(30)
            wb = watches.start("ctl-b", b, namespace=net.namespace("ctlb"))
            watches.wait_roles(30)
            assert wa.role() == "leader" and wb.role() == "standby"
            cut(net, "ctla")
            _, took = watches.takeover([wb], BOUND + 5)
            assert took <= BOUND, f"took {took:.1f} s, more than two lease lengths ({BOUND} s)"
            # the cut leader stood down by itself (its renew deadline) before the other took over
            assert wa.role() == "standby"
            stood_down = said_at(wa.log, "no longer leading")
            assert stood_down < said_at(wb.log, "leading (epoch 2"), "two leaders at once"
        finally:
            watches.stop_all()


WAITING = """
import sys, time
from meshtui.errors import InventoryError
from meshtui.inventory.lease import Leases
leases = Leases(sys.stdin.readline().strip())  # never on a command line
leases.read("watch")  # connected
print("asking", flush=True)
began = time.monotonic()
try:
    leases._run(lambda c: c.execute("SELECT pg_sleep(120)"))
except InventoryError as exc:
    print(f"failed after {time.monotonic() - began:.1f} s: {exc}", flush=True)
"""


@pytest.mark.root
def test_a_lease_connection_cut_while_it_waits_for_an_answer_fails_in_seconds() -> None:
    """A question the server acknowledged, then the link cut: nothing is left unacknowledged
    for ``tcp_user_timeout`` to notice, only keepalives do; without them the connection waits
    for TCP's two hours."""
    with postgresql_in_a_namespace(["ctla"]) as (net, conninfo):
        argv = netns.exec_argv(net.namespace("ctla"), [sys.executable, "-c", WAITING])
        proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=Path.cwd()
        )
        try:
            assert proc.stdin is not None
            proc.stdin.write(conninfo + "\n")
            proc.stdin.close()
            assert proc.stdout is not None and proc.stdout.readline().strip() == "asking"
            time.sleep(1.0)  # the query is on the server, acknowledged
            cut(net, "ctla")
            out = proc.stdout.read() if proc.wait(timeout=30) is not None else ""
        finally:
            proc.kill()
            proc.wait()
        assert out.startswith("failed after"), out
        assert float(out.split()[2]) <= 15, out
        assert "lease on PostgreSQL" in out and "password" not in out


def test_after_postgresql_restarts_exactly_one_leads(
    pg_clusters, tmp_path: Path, watches: Watches
) -> None:
    from tests.fix_pg import start_cluster

    cluster, base = start_cluster("18")
    try:
        conninfo = _database(cluster)
        a = controller_folder(tmp_path, "ctl-a", conninfo, LEASE)
        b = controller_folder(tmp_path, "ctl-b", conninfo, LEASE)
        watches.start("ctl-a", a)
        watches.wait_roles(30)
        watches.start("ctl-b", b)
        watches.wait_roles(30)
        cluster.stop()
        time.sleep(LEASE["length_s"])  # down longer than the leader's deadline
        cluster.start()
        began = time.monotonic()
        leader, _ = watches.takeover(list(watches.running), BOUND + 5)
        assert time.monotonic() - began <= BOUND
        time.sleep(LEASE["length_s"])
        assert watches.leaders() == [leader]  # one, and it stays one
    finally:
        watches.stop_all()
        cluster.stop()
        __import__("shutil").rmtree(base, ignore_errors=True)
