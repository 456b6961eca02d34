"""The watch: the cost of one cycle with nothing due, and the probe load it puts on PostgreSQL.

1. One ``Watch.cycle()`` with nothing due (every pair delivered, probed just now, rotation
   policy 90d) at 1,000 and 10,000 pairs: wall time and the controller's CPU time, side by
   side with what ``meshtui status`` reads (``statuses``), the floor any cycle pays.
2. The probe load at the default interval (5m): real agents (``meshtui host serve`` on Unix
   sockets), a real PostgreSQL (embedded wheel, scram only, loopback) and the built-in
   provisioner. A plain ``meshtui probe`` of every pair (one burst) against one simulated
   interval of the watch (the clock seam advances one second a cycle; the probes are real).
   Sessions are counted by PostgreSQL itself (``pg_stat_database.sessions``).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_watch.py [--sizes 1000 10000] [--pairs 200]
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psycopg

from meshtui.controller.core import INVENTORY, Controller, init_keys
from meshtui.controller.read.schedule import epoch
from meshtui.controller.read.status import statuses
from meshtui.controller.unattended.watch import Watch
from meshtui.errors import LabError
from meshtui.host.policy import node_policy
from meshtui.host.state import identity
from meshtui.inventory import now
from meshtui.kinds.postgres.lab import Cluster, create_cluster
from tests.fix_agents import Mesh, mesh_policy, write_declaration
from tests.fix_pg import free_port

NODES = {"db1": "10.213.0.2", "app1": "10.213.0.3", "app2": "10.213.0.4"}


def quiet(line: str) -> None:
    """The watch's log, dropped."""


# ---------------------------------------------------------------------------- 1. idle cycle


def idle_inventory(root: Path, pairs: int) -> tuple[Path, float]:
    """A state folder with ``pairs`` declared pairs, each delivered and probed working now."""
    state = root / "state"
    init_keys(state)
    lines = ["[policy]", 'rotate_every = "90d"', ""]
    for name, address in NODES.items():
        identity.init(name, root / "nodes" / name, state / "controller.pub")
        lines += [
            f"[nodes.{name}]",
            f'address = "{address}"',
            f'agent = "http://{address}:7700"',
            f'keys = "nodes/{name}/node.pub"',
        ]
    lines += [
        '[modules."db1/postgres"]',
        'provides = [{ name = "database", port = 5432 }]',
        'receives = { database = "/var/lib/meshtui/db1/postgres/mesh.json" }',
        'grants = { database = "/var/lib/meshtui/db1/postgres/grants" }',
        'admin = "/var/lib/meshtui/db1/postgres/admin.conninfo"',
    ]
    for i in range(pairs):
        lines += [
            f'[modules."app{1 + i % 2}/m{i}"]',
            f'requires = [{{ name = "database", values = {{ database = "db{i}" }}, '
            f'file = "/etc/m{i}/db.password" }}]',
        ]
    decl = root / "mesh.toml"
    decl.write_text("\n".join(lines) + "\n")
    with Controller.open(state) as ctl:
        ctl.declare(decl)
        stamp = now()
        gens = ctl.inventory.held_generations().values()
        # what a push and a probe would have recorded; written directly, this is the setup
        with ctl.inventory.transaction("bench setup") as tx:
            tx.put_deliveries(
                [
                    {"pair": g["pair"], "end": end, "generation": 1, "digest": g["digest"],
                     "since": stamp, "attempted_at": stamp, "error": None}
                    for g in gens for end in ("consumer", "provider")
                ]
            )  # fmt: skip
            tx.add_probes(
                [
                    {"pair": g["pair"], "at": stamp, "generation": 1, "verdict": "accepted",
                     "reason": "ok", "latency_ms": 3.0, "used_password": 1, "loopback": 0,
                     "client_addr": "10.213.0.3", "control": None, "withdrawn": 0}
                    for g in gens
                ]
            )  # fmt: skip
    return state, epoch(stamp)


def idle_cycle(pairs: int, repeat: int) -> dict[str, tuple[float, float]]:
    """Median (wall, cpu) seconds of an idle watch cycle and of the status read."""
    with tempfile.TemporaryDirectory(prefix="bench-watch-") as tmp:
        state, frozen = idle_inventory(Path(tmp), pairs)
        with Controller.open(state) as ctl:
            # the clock seam, frozen at the probes' time: no probe slot comes round meanwhile
            watch = Watch(ctl, log=quiet, clock=lambda: frozen)
            first = watch.cycle()  # learns every pair's probe slot
            assert not (first.rotated or first.probed or first.pushed), first
            other = sqlite3.connect(state / INVENTORY)  # another process's commit, say a declare

            def touch() -> None:
                with other:
                    other.execute("UPDATE nodes SET updated_at = ?", [now()])

            out: dict[str, tuple[float, float]] = {}
            for name, step, before in (
                ("status read", lambda: statuses(ctl.inventory), None),
                ("watch cycle", watch.cycle, None),
                ("cycle, changed", watch.cycle, touch),
            ):
                walls, cpus = [], []
                for _ in range(repeat):
                    if before is not None:
                        before()
                    w0, c0 = time.perf_counter(), time.process_time()
                    got = step()
                    walls.append(time.perf_counter() - w0)
                    cpus.append(time.process_time() - c0)
                    if name != "status read":
                        assert not (got.rotated or got.probed or got.pushed), got  # type: ignore[union-attr]
                out[name] = (statistics.median(walls), statistics.median(cpus))
            other.close()
    return out


# ---------------------------------------------------------------------------- 2. probe load


def sessions(cluster: Cluster) -> int:
    """Sessions PostgreSQL has counted so far (every database), flushed first."""
    with psycopg.connect(cluster.admin_conninfo(), autocommit=True) as conn:
        conn.execute("SELECT pg_stat_force_next_flush()")
        time.sleep(1.1)  # the stats of ended backends are flushed at most once a second
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute("SELECT sum(sessions) FROM pg_stat_database").fetchone()
    return int(row[0] if row and row[0] is not None else 0)


def probe_load(pairs: int) -> None:
    base = Path(tempfile.mkdtemp(prefix="meshtui-benchwatch-"))
    base.chmod(0o711)
    cluster = create_cluster(base / "data", port=free_port())
    mesh: Mesh | None = None
    try:
        cluster.start()
        admin = cluster.write_admin_file(base / "admin.conninfo")
        root = base / "mesh"
        root.mkdir()
        root.chmod(0o711)
        state = root / "state"
        pub, _ = init_keys(state)
        consumers = {"app1": [f"m{i}" for i in range(0, pairs, 2)],
                     "app2": [f"m{i}" for i in range(1, pairs, 2)]}  # fmt: skip
        nodes = {}
        for node in ["db1", *consumers]:
            nodes[node] = root / "nodes" / node
            identity.init(node, nodes[node], pub)
            node_policy.write(nodes[node], mesh_policy(node, root, admin=(str(admin),)))
        decl = write_declaration(root, port=cluster.port, admin=admin, consumers=consumers)
        mesh = Mesh(root=root, state=state, decl=decl, nodes=nodes,
                    sockets={n: root / "run" / f"{n}.sock" for n in nodes})  # fmt: skip
        for node in nodes:
            mesh.start(node)
        t0 = time.perf_counter()
        with Controller.open(state) as ctl:
            ctl.declare(decl)
            assert ctl.push().ok
        setup = time.perf_counter() - t0
        print(f"\n{pairs} pairs on real agents and PostgreSQL (declare + push {setup:.1f} s)")

        with Controller.open(state) as ctl:
            before = sessions(cluster)
            t0 = time.perf_counter()
            outcomes = ctl.probe()
            plain_s = time.perf_counter() - t0
            plain_sessions = sessions(cluster) - before - 1
            assert all(o.verdict == "accepted" for o in outcomes), outcomes[:3]

            # steady state: the watch starts right after the plain probe; the first half
            # interval (pairs whose slot came before the watch did) is warm-up, not counted
            fake = [time.time()]
            watch = Watch(ctl, log=quiet, clock=lambda: fake[0])
            interval = 300.0
            for _ in range(int(interval / 2)):
                watch.cycle()
                fake[0] += 1.0
            per_second: list[int] = []
            before = sessions(cluster)
            t0 = time.perf_counter()
            for _ in range(int(interval)):  # one whole interval, one cycle a second
                report = watch.cycle()
                per_second.append(report.probed)
                fake[0] += 1.0
            real_s = time.perf_counter() - t0
            watch_sessions = sessions(cluster) - before - 1
        probed = sum(per_second)
        plain_rate = len(outcomes) / plain_s
        head = f"{'run':<34}{'probes':>8}{'pg sessions':>13}{'seconds':>10}{'peak probes/s':>15}"
        head += f"{'mean probes/s':>15}"
        print(head)
        print("-" * len(head))
        print(
            f"{'meshtui probe (every pair)':<34}{len(outcomes):>8}{plain_sessions:>13}"
            f"{plain_s:>10.2f}{plain_rate:>15.1f}{plain_rate:>15.1f}"
        )
        print(
            f"{'watch, one 5m interval (simulated)':<34}{probed:>8}{watch_sessions:>13}"
            f"{interval:>10.0f}{max(per_second):>15.1f}{probed / interval:>15.2f}"
        )
        print(
            f"peak load, watch / plain probe: {max(per_second) / plain_rate:.1%}; "
            f"every pair probed once per interval: {probed == pairs} "
            f"(simulated interval took {real_s:.1f} s of real time)"
        )
    finally:
        if mesh is not None:
            for node in list(mesh.procs):
                mesh.stop(node)
        for attempt in range(3):  # a loaded machine can make a fast shutdown outlast 60 s
            try:
                cluster.stop()
                break
            except LabError as exc:
                print(f"warning: {exc} (attempt {attempt + 1})", file=sys.stderr)
        shutil.rmtree(base, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--pairs", type=int, default=200, help="pairs for the probe-load part")
    ap.add_argument("--skip-load", action="store_true", help="only the idle cycle")
    args = ap.parse_args(argv)
    print(f"idle cycle: nothing due; median of {args.repeat}")
    head = f"{'pairs':>7}  {'run':<15}{'wall ms':>9}{'cpu ms':>9}{'x status (wall)':>17}"
    print(head)
    print("-" * len(head))
    for n in args.sizes:
        got = idle_cycle(n, args.repeat)
        floor = got["status read"][0]
        for name, (wall, cpu) in got.items():
            print(f"{n:>7}  {name:<15}{wall * 1e3:>9.1f}{cpu * 1e3:>9.1f}{wall / floor:>17.2f}")
    if not args.skip_load:
        probe_load(args.pairs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
