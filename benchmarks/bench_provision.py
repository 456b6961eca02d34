"""Benchmark the PostgreSQL provisioner against a naive baseline, side by side, in one process.

Run: ``.venv/bin/python benchmarks/bench_provision.py [--consumers 1000]`` (needs the lab extra;
as root the server runs as the lab's system user). It builds a throw-away scram-only cluster in
/tmp and removes it at the end.

* full apply: our ``reconcile`` from an empty cluster (CREATE ROLE with a client-side verifier,
  marker, record, read-back check) vs the naive way: one TCP connection per role, plaintext
  ``CREATE ROLE ... PASSWORD 'plain'``.
* rotation: every secret changed; ``reconcile`` vs one TCP connection per role, plaintext
  ``ALTER ROLE ... PASSWORD``.
* idle: ``reconcile`` when nothing changed; counts pg_authid rows written and transaction ids
  consumed (both must be 0; autovacuum is off so its ANALYZE does not consume any).

Each run reports wall-clock time and CPU seconds (this process; the server's postmaster and its
exited backends), since on a shared 2-core machine the wall clock also measures the neighbours.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from meshtui.crypto import secret_digest
from meshtui.kinds.postgres.lab import Cluster, create_cluster
from meshtui.kinds.postgres.scram import scram_verifier
from meshtui.provisioner.harness import Report, reconcile

PROVIDER = "db1/postgres"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def write_mesh(folder: Path, count: int, serial: int) -> dict[str, str]:
    """Write a manifest of ``count`` consumers and fresh secrets; return login -> password."""
    consumers: list[dict[str, Any]] = []
    passwords: dict[str, str] = {}
    for i in range(count):
        node, module = f"app{i:04d}", "svc"
        secret = secrets.token_urlsafe(32)
        name = f"{node}.{module}.secret"
        (folder / name).write_bytes(secret.encode())
        login = f"svc_{node}_{i:06x}"
        passwords[login] = secret
        consumers.append(
            {
                "as": login,
                "node": node,
                "module": module,
                "at": "127.0.0.1",
                "values": {},
                "secret": name,
                "digest": secret_digest(secret.encode()),
            }
        )
    doc = {
        "version": 1,
        "provision": "database",
        "provider": PROVIDER,
        "serial": serial,
        "consumers": consumers,
    }
    (folder / "mesh.json").write_text(json.dumps(doc))
    return passwords


def authid_rows(cluster: Cluster) -> dict[int, str]:
    with psycopg.connect(cluster.admin_conninfo()) as conn:
        return dict(conn.execute("SELECT oid::int, xmin::text FROM pg_authid").fetchall())


def next_xid(cluster: Cluster) -> int:
    with psycopg.connect(cluster.admin_conninfo()) as conn:
        row = conn.execute("SELECT pg_snapshot_xmax(pg_current_snapshot())::text").fetchone()
    assert row is not None
    return int(row[0])


def drop_roles(cluster: Cluster) -> None:
    with psycopg.connect(cluster.admin_conninfo(), autocommit=True) as conn:
        names = [r[0] for r in conn.execute("SELECT rolname FROM pg_roles WHERE oid >= 16384")]
        with conn.transaction():
            for name in names:
                conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def naive(cluster: Cluster, admin_password: str, passwords: dict[str, str], verb: str) -> None:
    """One TCP connection per role, plaintext password in the statement."""
    for login, password in passwords.items():
        with psycopg.connect(
            host="127.0.0.1",
            port=cluster.port,
            user="postgres",
            password=admin_password,
            dbname="postgres",
            autocommit=True,
        ) as conn:
            conn.execute(
                sql.SQL(verb + " ROLE {} LOGIN PASSWORD {}").format(
                    sql.Identifier(login), sql.Literal(password)
                )
            )


@dataclass
class Run:
    """One measured run: wall-clock seconds, CPU seconds of this process and of the server."""

    label: str
    wall: float
    client_cpu: float
    server_cpu: float
    ratio: str = ""


def server_cpu(cluster: Cluster) -> float:
    """CPU seconds of the postmaster and of every backend that has exited (reaped by it)."""
    pid = int((cluster.datadir / "postmaster.pid").read_text().split()[0])
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return (utime + stime + cutime + cstime) / os.sysconf("SC_CLK_TCK")


def measure(cluster: Cluster, label: str, fn: Callable[[], Any]) -> tuple[Run, Any]:
    """Run ``fn``; every connection it opened must be closed when it returns."""
    wall0, cpu0, srv0 = time.perf_counter(), time.process_time(), server_cpu(cluster)
    result = fn()
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    time.sleep(0.2)  # let the postmaster reap the last backends
    return Run(label, wall, cpu, server_cpu(cluster) - srv0), result


def check(report: Report, want: str, count: int) -> None:
    counts = report.counts()
    if counts.get(want) != count or not report.ok:
        sys.exit(f"unexpected report: {counts}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--consumers", type=int, default=1000)
    parser.add_argument("--idle-runs", type=int, default=15)
    args = parser.parse_args()
    n = args.consumers

    base = Path(tempfile.mkdtemp(prefix="meshtui-bench-"))
    base.chmod(0o711)
    load_before = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    cluster = create_cluster(base / "data", port=free_port())
    cluster.start()
    # autovacuum's ANALYZE of the catalogs would consume transaction ids of its own
    cluster.set_config(autovacuum="off")
    try:
        mesh = base / "mesh"
        mesh.mkdir()
        admin = cluster.write_admin_file(base / "admin.conninfo")
        admin_password = secrets.token_urlsafe(24)
        with psycopg.connect(cluster.admin_conninfo(), autocommit=True) as conn:
            conn.execute(
                sql.SQL("ALTER ROLE postgres PASSWORD {}").format(
                    sql.Literal(scram_verifier(admin_password))
                )
            )
        runs: list[Run] = []

        # full apply: naive first, then ours, both from no roles at all
        passwords = write_mesh(mesh, n, 1)
        naive_create, _ = measure(
            cluster,
            f"naive create: {n} TCP connections, plaintext",
            lambda: naive(cluster, admin_password, passwords, "CREATE"),
        )
        drop_roles(cluster)
        full, report = measure(
            cluster,
            f"reconcile: full apply, {n} created",
            lambda: reconcile(mesh / "mesh.json", admin),
        )
        check(report, "created", n)
        full.ratio = f"{naive_create.wall / full.wall:.2f}x faster"
        runs += [naive_create, full]

        # rotation: every secret changes
        passwords = write_mesh(mesh, n, 2)
        naive_alter, _ = measure(
            cluster,
            f"naive alter: {n} TCP connections, plaintext",
            lambda: naive(cluster, admin_password, passwords, "ALTER"),
        )
        passwords = write_mesh(mesh, n, 3)
        rotate, report = measure(
            cluster,
            f"reconcile: rotation, {n} updated",
            lambda: reconcile(mesh / "mesh.json", admin),
        )
        check(report, "updated", n)
        rotate.ratio = f"{naive_alter.wall / rotate.wall:.2f}x faster"
        runs += [naive_alter, rotate]

        # idle: nothing changed
        before_rows, before_xid = authid_rows(cluster), next_xid(cluster)
        idle: list[Run] = []
        for _ in range(args.idle_runs):
            run, report = measure(cluster, "idle", lambda: reconcile(mesh / "mesh.json", admin))
            check(report, "unchanged", n)
            idle.append(run)
        after_rows, after_xid = authid_rows(cluster), next_xid(cluster)
        written = sum(1 for oid, xmin in after_rows.items() if before_rows.get(oid) != xmin)
        written += len(set(before_rows) - set(after_rows))
        xids = after_xid - before_xid  # the probes themselves consume none
        mid = sorted(idle, key=lambda r: r.wall)[len(idle) // 2]
        mid.label = f"reconcile: idle, {n} unchanged (median of {len(idle)})"
        mid.ratio = f"{full.wall / mid.wall:.0f}x faster than full apply"
        runs.append(mid)

        print(f"\nmeshtui provisioner benchmark: {n} consumers, PostgreSQL on 127.0.0.1,")
        print(f"{os.cpu_count()} cores, load average before: {load_before}\n")
        width = max(len(r.label) for r in runs)
        print(
            f"{'run':<{width}}  {'wall s':>8}  {'ms/role':>8}  {'client cpu s':>12}"
            f"  {'server cpu s':>12}  ratio"
        )
        for r in runs:
            print(
                f"{r.label:<{width}}  {r.wall:8.3f}  {r.wall * 1000 / n:8.3f}"
                f"  {r.client_cpu:12.3f}  {r.server_cpu:12.3f}  {r.ratio}"
            )
        cpu_naive = naive_create.client_cpu + naive_create.server_cpu
        cpu_full = full.client_cpu + full.server_cpu
        walls = sorted(r.wall * 1000 for r in idle)
        print(
            f"\nCPU per role (client + server): naive create {cpu_naive * 1000 / n:.2f} ms,"
            f" full apply {cpu_full * 1000 / n:.2f} ms ({cpu_naive / cpu_full:.2f}x less)"
        )
        print(
            f"idle runs: min {walls[0]:.1f} ms, median {walls[len(walls) // 2]:.1f} ms,"
            f" max {walls[-1]:.1f} ms; pg_authid rows written: {written};"
            f" transaction ids consumed: {xids}"
        )
        goals = [
            ("full apply >= 2x faster than naive", naive_create.wall / full.wall >= 2),
            ("rotation >= 2x faster than naive", naive_alter.wall / rotate.wall >= 2),
            ("idle < 50 ms", mid.wall < 0.050),
            ("idle writes nothing", written == 0 and xids == 0),
        ]
        for goal, met in goals:
            print(f"  [{'met' if met else 'MISSED'}] {goal}")
    finally:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
