"""``meshtui probe`` of a whole mesh against a plain loop of new connections, side by side.

The mesh is ``bench_scale.py``'s: real agents (one helper process serving every node on its
own Unix socket), several provider nodes on one embedded PostgreSQL (scram only, loopback), N
pairs declared and pushed. Then, in turn, ``--repeat`` times each:

* **probe**: ``Controller.probe`` of every pair: the controller asks the consumers' agents (8
  nodes at once), each logs in with the credential file it holds (8 at a time), judges the
  session, then makes its negative control (a wrong password, refused): two logins a pair;
* **loop, same logins**: a separate process does exactly those logins bare with psycopg, the
  same connect settings (SCRAM required, ``sslmode=prefer``, loopback), the same concurrency
  (8 x 8 threads): connect, ``SELECT 1``, close; then the wrong password, refused;
* **loop, pgbench -C style**: the same, without the refused login (one login a pair).

The passwords reach the loop's process on stdin (read from the consumers' credential files).
It prints each run's seconds and CPU (the controller's, the agents' process's and PostgreSQL's
for the probe; the loop's process's and PostgreSQL's for a loop), the medians, and the ratios
(goal: the probe at >= 80 % of the same logins done bare), by rate and by CPU a login (on a
shared machine the CPU is the steadier measure). The ratio is measured at two sizes to show it
is flat.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_probe_mesh.py [--pairs 1000 2000]
        [--nodes 100] [--providers 4] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_rotate import stop_cluster  # noqa: E402  (one copy)
from bench_scale import declaration, start_fleet  # noqa: E402

from meshtui.controller.act.probe import CONCURRENCY
from meshtui.controller.core import Controller, init_keys
from meshtui.controller.plan.planner import Planner, target_of
from meshtui.kinds.postgres.lab import create_cluster
from tests.fix_pg import free_port

NODES_AT_ONCE = 8
"""The controller asks this many consumer nodes at once (controller/probe.py's pool)."""
GOAL = 0.80

LOOP = """
import json, sys, time
from concurrent.futures import ThreadPoolExecutor
import psycopg
from meshtui.contracts.probe_types import control_password
req = json.load(sys.stdin)
items, same = req["items"], req["same"]

def one(item):
    host, port, user, dbname, password = item
    kw = dict(host=host, port=port, user=user, dbname=dbname, autocommit=True,
              require_auth="scram-sha-256", sslmode="prefer", gssencmode="disable")
    with psycopg.connect(password=password, **kw) as conn:
        conn.execute("SELECT 1").fetchone()
    if not same:
        return 1
    try:
        psycopg.connect(password=control_password(password), **kw).close()
    except psycopg.OperationalError:
        return 2
    raise SystemExit("the wrong password was accepted")

t0 = time.perf_counter()
with ThreadPoolExecutor(req["concurrency"]) as pool:
    logins = sum(pool.map(one, items))
print(json.dumps({"elapsed": time.perf_counter() - t0, "logins": logins}))
"""


TICK = os.sysconf("SC_CLK_TCK")


def cpu_of(pid: int, children: bool = False) -> float:
    """Seconds of CPU process ``pid`` used (with its reaped children's: PostgreSQL's postmaster
    reaps every backend, so its children's time is every closed connection's)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    used = int(fields[11]) + int(fields[12])  # utime, stime
    if children:
        used += int(fields[13]) + int(fields[14])  # cutime, cstime
    return used / TICK


def children_cpu() -> float:
    """Seconds of CPU this process's reaped children used (the loop's process)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def postmaster(data: Path) -> int:
    """The pid of the cluster's postmaster (first line of postmaster.pid)."""
    return int((data / "postmaster.pid").read_text().split()[0])


def loop(items: list[list[object]], concurrency: int, same: bool) -> tuple[float, int]:
    """The bare loop in its own process: (seconds, logins)."""
    request = json.dumps({"items": items, "concurrency": concurrency, "same": same})
    done = subprocess.run(
        [sys.executable, "-c", LOOP], input=request.encode(), capture_output=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr.decode()[-2000:])
    out = json.loads(done.stdout)
    return out["elapsed"], out["logins"]


def credentials(ctl: Controller) -> list[list[object]]:
    """Each live pair's probe target and the password its consumer's file holds."""
    plan = Planner(ctl.inventory)
    items: list[list[object]] = []
    for pid in ctl.live_pairs():
        p = plan.pairs[pid]
        t = target_of(p, plan.nodes, plan.modules)
        password = Path(p["file"]).read_text()
        items.append([t["host"], t["port"], t["login"], t["dbname"], password])
    return items


def one_size(nodes: int, providers: int, pairs: int, repeat: int) -> dict[str, float]:
    """Build the mesh of ``pairs`` pairs, then probe and loop in turn; the medians."""
    base = Path(tempfile.mkdtemp(prefix="meshtui-benchprobemesh-"))
    base.chmod(0o711)
    cluster = create_cluster(base / "data", port=free_port())
    fleet: subprocess.Popen[bytes] | None = None
    try:
        cluster.start()
        admin = cluster.write_admin_file(base / "admin.conninfo")
        root = base / "mesh"
        (root / "run").mkdir(parents=True)
        root.chmod(0o711)
        state = root / "state"
        pub, _ = init_keys(state)
        decl = declaration(root, cluster.port, admin, nodes, providers, pairs)
        fleet = start_fleet(base, root, decl, admin, pub, nodes)
        with Controller.open(state) as ctl:
            ctl.declare(decl)
            assert ctl.push().ok
            items = credentials(ctl)
            concurrency = min(NODES_AT_ONCE, nodes - providers) * CONCURRENCY
            runs: dict[str, list[float]] = {"probe": [], "loop, same logins": [],
                                            "loop, pgbench -C style": []}  # fmt: skip
            cpu: dict[str, list[float]] = {k: [] for k in runs}
            pm = postmaster(base / "data")
            logins: dict[str, int] = {}
            print(f"{pairs} pairs on {nodes} nodes ({providers} providers), concurrency "
                  f"{concurrency}; load {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
            for turn in range(repeat):  # in turn, so drift hits every kind alike
                c0 = time.process_time() + cpu_of(fleet.pid) + cpu_of(pm, True)
                t0 = time.perf_counter()
                outcomes = ctl.probe()
                took = time.perf_counter() - t0
                cpu["probe"].append(time.process_time() + cpu_of(fleet.pid) + cpu_of(pm, True) - c0)
                bad = [o for o in outcomes if o.verdict != "accepted"]
                assert not bad, bad[:3]
                runs["probe"].append(took)
                logins["probe"] = 2 * len(outcomes)
                for name, same in (("loop, same logins", True), ("loop, pgbench -C style", False)):
                    c0 = children_cpu() + cpu_of(pm, True)
                    took, n = loop(items, concurrency, same)
                    cpu[name].append(children_cpu() + cpu_of(pm, True) - c0)
                    runs[name].append(took)
                    logins[name] = n
                print(f"  run {turn + 1}: " + ", ".join(
                    f"{k} {v[-1]:.2f} s (CPU {cpu[k][-1]:.1f} s)" for k, v in runs.items()) +
                    f"; load {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
        med = {k: statistics.median(v) for k, v in runs.items()}
        cpu_med = {k: statistics.median(v) for k, v in cpu.items()}
        print(f"  {'':26}{'seconds':>9}{'logins':>8}{'logins/s':>10}{'pairs/s':>9}"
              f"{'CPU ms/login':>14}")  # fmt: skip
        for k, s in med.items():
            print(f"  {k:26}{s:9.2f}{logins[k]:8d}{logins[k] / s:10.0f}{pairs / s:9.0f}"
                  f"{cpu_med[k] / logins[k] * 1000:14.2f}")  # fmt: skip
        same = med["loop, same logins"] / med["probe"]
        same_cpu = cpu_med["loop, same logins"] / cpu_med["probe"]
        by_logins = (logins["probe"] / med["probe"]) / (
            logins["loop, pgbench -C style"] / med["loop, pgbench -C style"]
        )
        by_pairs = med["loop, pgbench -C style"] / med["probe"]
        print(f"  probe vs the same logins done bare: {same:.0%} by rate, {same_cpu:.0%} by CPU "
              f"(goal >= {GOAL:.0%}); vs the "
              f"pgbench -C style loop: logins/s {by_logins:.0%}, pairs/s {by_pairs:.0%}; "
              f"load {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
        return {"same": same, "same_cpu": same_cpu, "by_logins": by_logins, "by_pairs": by_pairs}
    finally:
        try:
            if fleet is not None:
                fleet.terminate()
                try:
                    fleet.wait(60)
                except subprocess.TimeoutExpired:
                    fleet.kill()
                    fleet.wait()
        finally:
            stop_cluster(cluster)
            shutil.rmtree(base, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, nargs="+", default=[1000, 2000])
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--providers", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    ratios = {n: one_size(args.nodes, args.providers, n, args.repeat) for n in args.pairs}
    print("\npairs  probe/same logins (rate, CPU)  logins/s vs -C loop  pairs/s vs -C loop")
    for n, r in ratios.items():
        print(
            f"{n:5d}  {r['same']:17.0%} {r['same_cpu']:5.0%}  {r['by_logins']:19.0%}"
            f"  {r['by_pairs']:17.0%}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
