"""The object store: probe throughput against a plain signed-request loop, and applying
identities against the same ``weed shell`` commands in a plain loop.

Builds its own network (namespaces ``mts<pid>-net``, ``-db1``, ``-app1``) and a lab SeaweedFS
(its own CA, gRPC behind mutual TLS, as its own user) with S3 on db1's address. Then:

* **probe**, from app1's namespace, each the median of ``--repeat``: ``probe_many`` over the N
  (access key, secret) pairs of N identities the provisioner made, without and with the
  negative control, against a plain loop at the same concurrency of one SigV4-signed
  ``ListObjectsV2`` per pair (botocore's signer, a new TLS connection each, the certificate
  verified against the same CA), the same library on the same link, in two forms: ``raw``
  over httpx (``httpx.Client`` per pair, the loop the goal was first measured against) and
  ``raw-same`` over the probe's own transport (``http.client``, one connection per pair). A
  meshtui login is two requests on one connection (its own bucket, signed; a bucket outside
  its rights, signed); compared as logins per second, and as CPU per login: the client's (the
  child's process time) and the store's (``weed``'s, from ``/proc``), which moves less with
  the load of other jobs than a rate does.
* **apply**, on a second store on loopback (the provisioner runs on the store's node):
  ``reconcile`` of a manifest of N consumers (their secret files beside it) into an empty store,
  and the idle re-run, against the same commands reconcile sends (``s3.bucket.create`` and
  ``s3.configure ... -apply`` per identity) piped into one ``weed shell`` in a plain loop.

Run as root:

    .venv/bin/python benchmarks/bench_s3.py [--pairs 1000] [--concurrency 8] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from meshtui.crypto import secret_digest
from meshtui.kinds.seaweedfs import lab as lab_s3
from meshtui.kinds.seaweedfs.shell import Session
from meshtui.kinds.seaweedfs.values import default_bucket
from meshtui.lab import netns
from meshtui.provisioner.harness import reconcile

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import http.client, json, sys, time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
import httpx
from meshtui.host import probe_runner as probe
from meshtui.kinds.seaweedfs import probe as s3probe
from meshtui.kinds.seaweedfs.values import default_bucket
req = json.load(sys.stdin)
pairs = req.pop("pairs")
host, port, n, ca = req["host"], req["port"], req["concurrency"], req["ca"]
context = s3probe.tls_context(ca)

def raw(pair):  # the same library: botocore's signer, httpx, a new TLS connection each
    url = f"https://{host}:{port}/{default_bucket(pair[0])}?list-type=2&max-keys=1"
    with httpx.Client(verify=context, timeout=5, trust_env=False) as client:
        answer = client.get(url, headers=s3probe._signed("GET", url, pair[0], pair[1]))
    return answer.status_code

def raw_same(pair):  # the same, over the probe's transport: http.client, one connection each
    path = f"/{default_bucket(pair[0])}?list-type=2&max-keys=1"
    conn = http.client.HTTPSConnection(host, port, timeout=5, context=context)
    try:
        conn.request("GET", path, headers=s3probe._signed("GET", f"https://{host}:{port}{path}",
                                                          pair[0], pair[1]))
        answer = conn.getresponse()
        answer.read()
        return answer.status
    finally:
        conn.close()

def run(items):
    if req["mode"] in ("raw", "raw-same"):
        with ThreadPoolExecutor(n) as pool:
            return list(pool.map(raw if req["mode"] == "raw" else raw_same, items))
    targets = [probe.ProbeTarget(host, port, u, p, "", kind="seaweedfs", ca=ca) for u, p in items]
    return probe.probe_many(targets, concurrency=n, control=req["mode"] == "control")

run(pairs[: req["warmup"]])
started, cpu = time.perf_counter(), time.process_time()
results = run(pairs)
elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
if req["mode"] in ("raw", "raw-same"):
    out = {"probes": len(results), "logins": len(results), "verdicts": dict(Counter(results))}
else:
    logins = sum(1 + (r.control is not None) for r in results)
    out = {"probes": len(results), "logins": logins,
           "verdicts": dict(Counter(str(r.verdict()) for r in results))}
out["elapsed"], out["cpu"] = elapsed, cpu
print(json.dumps(out))
"""


def write_manifest(folder: Path, count: int, prefix: str = "bench") -> list[tuple[str, str]]:
    """A manifest of ``count`` consumers and their secret files; their (login, secret)."""
    consumers, pairs = [], []
    for i in range(count):
        secret = secrets.token_urlsafe(32)
        login = f"{prefix}{i}_app1_{i:06x}"
        (folder / f"app1.{prefix}{i}.secret").write_text(secret)
        consumers.append(
            {"as": login, "node": "app1", "module": f"{prefix}{i}", "at": "10.0.0.3",
             "values": {}, "secret": f"app1.{prefix}{i}.secret",
             "digest": secret_digest(secret.encode())}
        )  # fmt: skip
        pairs.append((login, secret))
    doc = {"version": 1, "kind": "seaweedfs", "provision": "objects", "provider": "db1/s3",
           "serial": 1, "consumers": consumers}  # fmt: skip
    (folder / "mesh.json").write_text(json.dumps(doc))
    return pairs


def session_of(server: lab_s3.WeedServer) -> Session:
    p = server.ports
    return Session(
        f"127.0.0.1:{p.master}.{p.master + 10000}",
        f"127.0.0.1:{p.filer}.{p.filer + 10000}",
        server.conf,
    )


def empty(server: lab_s3.WeedServer) -> None:
    """Every identity but the static one deleted, every bucket removed."""
    shell = session_of(server)
    data, buckets = shell.export()
    names = [i["name"] for i in data["identities"] if not i.get("isStatic")]
    commands = [f"s3.configure -user={n} -delete -apply" for n in names]
    commands += [f"s3.bucket.delete -name {b}" for b in buckets]
    if commands:
        shell.run(commands, check=False)


def new_store(base: Path, name: str, address: str, seed: int) -> lab_s3.WeedServer:
    return lab_s3.create(base / name, address=address, ports=lab_s3.pick_ports(seed))


def cpu_seconds(pid: int) -> float:
    """The CPU time (user + system, every thread) process ``pid`` has used, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def settle(pid: int, limit: float = 120.0) -> None:
    """Wait (at most ``limit`` s) until the store is idle: after 1,000 identities are written it
    works on its own for a while, which the first mode measured would be charged with."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        before = cpu_seconds(pid)
        time.sleep(2)
        if cpu_seconds(pid) - before < 0.1:  # under 5 % of a core
            return


def bench_probe(args: argparse.Namespace, base: Path) -> None:
    name = f"mts{os.getpid()}"[:12]
    net = netns.create(name, ["db1", "app1"])
    store = new_store(base, "probe", net.address("db1"), os.getpid())
    try:
        store.start(netns=net.namespace("db1"))
        folder = base / "probe-srv"
        folder.mkdir()
        pairs = write_manifest(folder, args.pairs)
        done = subprocess.run(
            ["ip", "netns", "exec", net.namespace("db1"), sys.executable, "-m", "meshtui.cli",
             "provision", "--manifest", str(folder / "mesh.json"), "--admin",
             str(store.admin_file), "--json"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        assert json.loads(done.stdout)["ok"], done.stdout[-500:]
        modes = ("probe", "control", "raw", "raw-same")
        results: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
        pid = store.pid()
        assert pid is not None
        settle(pid)
        loads = [os.getloadavg()]
        for _ in range(args.repeat):
            for mode in results:
                req = {"mode": mode, "pairs": pairs, "host": store.address,
                       "port": store.ports.s3, "concurrency": args.concurrency,
                       "ca": str(store.ca), "warmup": 20}  # fmt: skip
                before = cpu_seconds(pid)
                out = subprocess.run(
                    ["ip", "netns", "exec", net.namespace("app1"), sys.executable, "-c", CHILD],
                    input=json.dumps(req), capture_output=True, text=True, check=True,
                    env={**os.environ, "PYTHONPATH": str(ROOT)},
                )  # fmt: skip
                result = json.loads(out.stdout)
                result["server"] = cpu_seconds(pid) - before  # the warm-up's share included
                results[mode].append(result)
        loads.append(os.getloadavg())
        print(f"probe, {args.pairs} pairs from app1's namespace, concurrency {args.concurrency}")
        print("  load average (1, 5, 15 min) before: {:.2f} {:.2f} {:.2f}".format(*loads[0]))
        print("                              after:  {:.2f} {:.2f} {:.2f}".format(*loads[1]))
        rate, cost = {}, {}
        for mode, runs in results.items():
            rate[mode] = statistics.median(r["logins"] / r["elapsed"] for r in runs)
            probes = statistics.median(r["probes"] / r["elapsed"] for r in runs)
            client = statistics.median(1000 * r["cpu"] / r["logins"] for r in runs)
            server = statistics.median(
                1000 * r["server"] / (r["logins"] + 20 * r["logins"] / r["probes"]) for r in runs
            )
            cost[mode] = client + server
            print(
                f"  {mode:8} {rate[mode]:8.1f} logins/s  {probes:8.1f} probes/s  CPU a login: "
                f"client {client:.2f} ms, store {server:.2f} ms  {runs[-1]['verdicts']}"
            )
        for plain in ("raw", "raw-same"):
            print(
                f"  probe vs {plain}: {100 * rate['probe'] / rate[plain]:.0f} % of its rate, "
                f"{100 * cost[plain] / cost['probe']:.0f} % by CPU a login (goal >= 80 %); "
                f"probe+control: {100 * rate['control'] / rate[plain]:.0f} % (logins)"
            )
    finally:
        store.stop()
        netns.destroy(name)


def bench_apply(args: argparse.Namespace, base: Path) -> None:
    store = new_store(base, "apply", "127.0.0.1", os.getpid() + 11)
    try:
        store.start()
        full, idle, loop = [], [], []
        for r in range(args.repeat):
            empty(store)
            folder = base / f"apply-srv-{r}"
            folder.mkdir()
            pairs = write_manifest(folder, args.pairs, prefix=f"a{r}x")
            started = time.perf_counter()
            report = reconcile(folder / "mesh.json", store.admin_file)
            full.append(time.perf_counter() - started)
            assert report.ok and report.counts().get("created") == args.pairs, report.counts()
            started = time.perf_counter()
            again = reconcile(folder / "mesh.json", store.admin_file)
            idle.append(time.perf_counter() - started)
            assert again.counts().get("unchanged") == args.pairs, again.counts()
            empty(store)
            commands = []
            for login, secret in pairs:
                bucket = default_bucket(login)
                commands.append(f"s3.bucket.create -name {bucket}")
                commands.append(
                    f"s3.configure -user={login} -access_key={login} -secret_key={secret} "
                    f"-buckets={bucket} -actions=Read,Write,List -apply"
                )
            started = time.perf_counter()
            session_of(store).run(commands, check=False)
            loop.append(time.perf_counter() - started)
        f, i, p = (statistics.median(x) for x in (full, idle, loop))
        print(
            f"apply {args.pairs} identities into an empty store (loopback), median of {args.repeat}"
        )
        print(f"  reconcile               {f * 1000:9.0f} ms")
        print(f"  idle re-run (unchanged) {i * 1000:9.0f} ms")
        print(f"  plain weed shell loop   {p * 1000:9.0f} ms (the same commands, one shell)")
        print(f"  ratio reconcile / loop: {f / p:.2f}x (goal <= 1.5x)")
    finally:
        store.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", choices=("probe", "apply"))
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("run as root (it builds network namespaces and a system user)", file=sys.stderr)
        return 2
    base = Path(tempfile.mkdtemp(prefix="meshtui-bench-s3-"))
    base.chmod(0o711)
    try:
        if args.only in (None, "apply"):
            bench_apply(args, base)
        if args.only in (None, "probe"):
            bench_probe(args, base)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
