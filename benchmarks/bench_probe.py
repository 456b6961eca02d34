"""Probe throughput against ``pgbench -C``, over the same private link, as root.

Builds its own network (namespaces ``mtb<pid>-net``, ``-db1``, ``-app1``), a scram-only
PostgreSQL listening on db1's address and started in db1's namespace, and N roles with their own
passwords (SCRAM verifiers computed here; the server never sees a password). Then, from app1's
namespace:

* ``probe_many`` over the N (login, password) pairs, without and with the negative control;
  the passwords reach the probing process on stdin;
* Debian's ``pgbench -C`` (a new connection per transaction), the same number of connections
  and clients, ``-f`` a script of ``SELECT 1``, the password in a 0600 PGPASSFILE.

It prints a table of logins/s and the ratios, then removes everything it made. Run:

    .venv/bin/python benchmarks/bench_probe.py [--pairs 1000] [--concurrency 8] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from meshtui.kinds.postgres.lab import Cluster, create_cluster
from meshtui.lab import netns

PORT = 5432
PGBENCH = "/usr/bin/pgbench"

CHILD = """
import json, sys, time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
import psycopg
from meshtui.host import probe_runner as probe
req = json.load(sys.stdin)
pairs = req.pop("pairs")
host, port, n = req["host"], req["port"], req["concurrency"]

def raw(pair):  # what pgbench -C does per transaction, with psycopg's libpq
    with psycopg.connect(host=host, hostaddr=host, port=port, user=pair[0], password=pair[1],
                         dbname="postgres", autocommit=True) as conn:
        conn.execute("SELECT 1").fetchone()
    return 1

def run(items):
    if req["mode"] == "raw":
        with ThreadPoolExecutor(n) as pool:
            return list(pool.map(raw, items))
    targets = [probe.ProbeTarget(host, port, u, pw, "postgres") for u, pw in items]
    return probe.probe_many(targets, concurrency=n, control=req["mode"] == "control")

run(pairs[: req["warmup"]])
t0 = time.perf_counter()
results = run(pairs)
elapsed = time.perf_counter() - t0
if req["mode"] == "raw":
    logins, verdicts = len(results), {"accepted": len(results)}
else:
    logins = sum(1 + (r.control is not None) for r in results)
    verdicts = Counter(str(r.verdict()) for r in results)
print(json.dumps({"elapsed": elapsed, "probes": len(results), "logins": logins,
                  "verdicts": verdicts}))
"""


@dataclass
class Sample:
    elapsed: float
    probes: int
    logins: int
    note: str = ""

    @property
    def logins_per_s(self) -> float:
        return self.logins / self.elapsed

    @property
    def probes_per_s(self) -> float:
        return self.probes / self.elapsed


class Deadline:
    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        remaining = self.end - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("the benchmark ran out of its time budget")
        return remaining


def make_roles(cluster: Cluster, count: int) -> list[tuple[str, str]]:
    pairs = [(f"bench{i:05d}", secrets.token_urlsafe(32)) for i in range(count)]
    with psycopg.connect(cluster.admin_conninfo(), autocommit=True) as conn, conn.transaction():
        for role, password in pairs:
            verifier = conn.pgconn.encrypt_password(
                password.encode(), role.encode(), b"scram-sha-256"
            ).decode()
            conn.execute(
                sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                    sql.Identifier(role), sql.Literal(verifier)
                )
            )
    return pairs


def run_probes(
    net: netns.Network,
    pairs: list[tuple[str, str]],
    *,
    concurrency: int,
    mode: str,
    deadline: Deadline,
) -> Sample:
    request = {
        "host": net.address("db1"),
        "port": PORT,
        "pairs": pairs,
        "concurrency": concurrency,
        "mode": mode,
        "warmup": min(20, len(pairs)),
    }
    proc = netns.spawn(
        net.namespace("app1"),
        [sys.executable, "-c", CHILD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        out, err = proc.communicate(json.dumps(request).encode(), timeout=deadline.left())
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    if proc.returncode != 0:
        raise RuntimeError(f"probe run failed: {err.decode()[-2000:]}")
    data = json.loads(out)
    verdicts: dict[str, int] = data["verdicts"]
    note = "" if set(verdicts) == {"accepted"} else f"verdicts {verdicts}"
    return Sample(data["elapsed"], data["probes"], data["logins"], note)


def run_pgbench(
    net: netns.Network,
    role: str,
    password: str,
    *,
    connections: int,
    clients: int,
    workdir: Path,
    deadline: Deadline,
) -> Sample:
    passfile = workdir / "pgpass"
    fd = os.open(passfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(f"{net.address('db1')}:{PORT}:postgres:{role}:{password}\n")
    script = workdir / "select1.sql"
    script.write_text("SELECT 1;\n")
    per_client = max(1, connections // clients)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env.update(PGPASSFILE=str(passfile), LC_ALL="C")
    argv = [
        PGBENCH, "-n", "-C", "-c", str(clients), "-j", str(clients), "-t", str(per_client),
        "-f", str(script),
        "-h", net.address("db1"), "-p", str(PORT), "-U", role, "postgres",
    ]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(
        netns.exec_argv(net.namespace("app1"), argv),
        capture_output=True,
        text=True,
        env=env,
        timeout=deadline.left(),
    )
    wall = time.perf_counter() - started
    passfile.unlink()
    if done.returncode != 0:
        raise RuntimeError(f"pgbench failed: {done.stderr[-2000:]}")
    processed = re.search(r"number of transactions actually processed: (\d+)", done.stdout)
    tps = re.search(r"tps = ([0-9.]+)", done.stdout)
    total = int(processed.group(1)) if processed else per_client * clients
    if not tps:
        return Sample(wall, total, total, "tps not found; wall time used")
    return Sample(total / float(tps.group(1)), total, total, f"wall {wall:.2f} s")


def median_sample(samples: list[Sample]) -> Sample:
    ordered = sorted(samples, key=lambda s: s.logins_per_s)
    return ordered[len(ordered) // 2]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--max-seconds", type=float, default=600.0)
    args = ap.parse_args(argv)

    if os.geteuid() != 0 or not netns.available():
        print("bench_probe needs root and working network namespaces (ip netns)", file=sys.stderr)
        return 2
    if not os.access(PGBENCH, os.X_OK):
        print(f"{PGBENCH} is missing (apt-get install postgresql-client)", file=sys.stderr)
        return 2

    def on_term(signum: int, frame: Any) -> None:
        raise SystemExit(f"stopped by signal {signum}")

    signal.signal(signal.SIGTERM, on_term)
    deadline = Deadline(args.max_seconds)
    name = f"mtb{os.getpid()}"[:12]
    base = Path(tempfile.mkdtemp(prefix="meshtui-benchprobe-"))
    base.chmod(0o711)
    cluster: Cluster | None = None
    try:
        t0 = time.perf_counter()
        net = netns.create(name, ["db1", "app1"])
        cluster = create_cluster(
            base / "data", port=PORT, listen=(net.address("db1"),), hba_networks=(net.cidr(),)
        )
        cluster.start(netns=net.namespace("db1"))
        setup = time.perf_counter() - t0
        t0 = time.perf_counter()
        pairs = make_roles(cluster, args.pairs)
        roles_s = time.perf_counter() - t0
        version = subprocess.run(
            [PGBENCH, "--version"], capture_output=True, text=True
        ).stdout.strip()
        print(
            f"network + cluster: {setup:.2f} s; {args.pairs} roles with SCRAM verifiers: "
            f"{roles_s:.2f} s; cpus: {os.cpu_count()}; {version}"
        )
        print(
            f"{args.pairs} pairs, concurrency {args.concurrency} "
            f"(pgbench: -C -c {args.concurrency} -j {args.concurrency}), "
            f"median of {args.repeat}, from {net.namespace('app1')} to "
            f"{net.address('db1')}:{PORT} in {net.namespace('db1')}\n"
        )

        kinds = {"psycopg raw": "raw", "probe": "plain", "probe+control": "control"}
        runs: dict[str, list[Sample]] = {kind: [] for kind in ["pgbench", *kinds]}
        for _ in range(args.repeat):  # interleaved, so drift hits every kind alike
            runs["pgbench"].append(
                run_pgbench(
                    net, *pairs[0], connections=args.pairs, clients=args.concurrency,
                    workdir=base, deadline=deadline,
                )
            )  # fmt: skip
            for kind, mode in kinds.items():
                runs[kind].append(
                    run_probes(
                        net, pairs, concurrency=args.concurrency, mode=mode, deadline=deadline
                    )
                )

        med = {kind: median_sample(samples) for kind, samples in runs.items()}
        base_rate = med["pgbench"].logins_per_s
        head = f"{'run':<15}{'logins':>8}{'probes':>8}{'seconds':>9}{'logins/s':>10}"
        head += f"{'probes/s':>10}{'vs pgbench':>12}  samples (logins/s)"
        print(head)
        print("-" * len(head))
        for kind, s in med.items():
            all_rates = ", ".join(f"{x.logins_per_s:.0f}" for x in runs[kind])
            notes = "; ".join(sorted({x.note for x in runs[kind] if x.note}))
            print(
                f"{kind:<15}{s.logins:>8}{s.probes:>8}{s.elapsed:>9.2f}{s.logins_per_s:>10.0f}"
                f"{s.probes_per_s:>10.0f}{s.logins_per_s / base_rate:>11.0%}  {all_rates}"
                + (f"  [{notes}]" if notes and kind != "pgbench" else "")
            )
        plain = med["probe"].logins_per_s / base_rate
        ctl_logins = med["probe+control"].logins_per_s / base_rate
        ctl_probes = med["probe+control"].probes_per_s / base_rate
        print()
        raw = med["probe"].logins_per_s / med["psycopg raw"].logins_per_s
        print(f"ratio claimed (probe without control, logins/s vs pgbench -C): {plain:.0%}")
        print(f"with the negative control: logins/s {ctl_logins:.0%}, probes/s {ctl_probes:.0%}")
        print(f"probe vs the same logins done bare with psycopg (its own overhead): {raw:.0%}")
        print(
            "The claim compares like with like: one accepted SCRAM login plus one small query "
            "per connection on both sides. A probe with its control makes two logins, one of "
            "them refused, so its probes/s is about half; counted as logins/s it is the same "
            "work rate, which is why the claim is the control-free ratio. pgbench is Debian's "
            "libpq 15, psycopg bundles libpq 18: client SCRAM costs differ, see 'psycopg raw'."
        )
        return 0
    finally:
        if cluster is not None:
            try:
                cluster.stop()
            except Exception as exc:  # keep cleaning up
                print(f"warning: stopping PostgreSQL: {exc}", file=sys.stderr)
        netns.destroy(name)
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
