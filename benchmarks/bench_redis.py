"""Redis: probe throughput against plain redis-py, and applying users against plain ACL SETUSER.

Builds its own network (namespaces ``mtr<pid>-net``, ``-db1``, ``-app1``) and a lab Redis with
TLS (its own CA) listening on db1's address, started in db1's namespace, whose aclfile already
holds N users with their own passwords (as SHA-256; the server never sees a password). Then:

* **probe**, from app1's namespace, interleaved and each the median of ``--repeat``:
  ``probe_many`` over the N (login, password) pairs without and with the negative control,
  against a plain redis-py loop at the same concurrency: one ``SSLConnection`` per pair that
  connects (TLS, certificate verified) and AUTHs (redis-py sends AUTH on connect), then closes.
  Compared as logins per second (a probe with its control makes two logins).
* **apply**, on a second lab Redis on loopback (the provisioner runs on the provider's node):
  ``reconcile`` of a manifest of N consumers (their secret files beside it) into an empty
  Redis, the idle re-run, and a plain loop of N ``ACL SETUSER <u> reset on #<sha256> ~<u>:*
  +@all -@dangerous -@admin`` on one connection with the same admin URL, then one ``ACL SAVE``
  (timed apart). A reconcile persists what it changed (the issue asks that changes survive a
  restart), so the like-for-like baseline is the loop *with* its ACL SAVE; the ratio against the
  loop alone is printed too, and so is reconcile without its own ACL SAVE against the loop
  alone (both then hold the users in memory only). For reference, not a goal: the same writes
  pipelined by plain redis-py (what reconcile sends), the floor of any client.

It prints both tables and the two ratios, then removes everything it made. Run as root:

    .venv/bin/python benchmarks/bench_redis.py [--pairs 1000] [--concurrency 8] [--repeat 3]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, ClassVar

import redis

from meshtui.crypto import secret_digest
from meshtui.kinds.redis import lab as lab_redis
from meshtui.kinds.redis.adapter import RedisAdapter
from meshtui.lab import netns
from meshtui.provisioner.harness import reconcile

PORT = 6379

CHILD = """
import json, sys, time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from redis.connection import SSLConnection
from meshtui.host import probe_runner as probe
req = json.load(sys.stdin)
pairs = req.pop("pairs")
host, port, n, ca = req["host"], req["port"], req["concurrency"], req["ca"]

def raw(pair):  # plain redis-py: TLS connect with the certificate checked, AUTH, close
    conn = SSLConnection(host=host, port=port, username=pair[0], password=pair[1],
                         ssl_ca_certs=ca, ssl_cert_reqs="required", ssl_check_hostname=True,
                         protocol=2, socket_timeout=5, socket_connect_timeout=5)
    try:
        conn.connect()
    finally:
        conn.disconnect()
    return 1

import ssl
from meshtui.kinds.redis.private import ContextTLSConnection
shared = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
shared.load_verify_locations(cafile=ca)

def raw_shared(pair):  # the same, with one context for every connection
    conn = ContextTLSConnection(context=shared, host=host, port=port, username=pair[0],
                                password=pair[1], protocol=2, socket_timeout=5,
                                socket_connect_timeout=5)
    try:
        conn.connect()
    finally:
        conn.disconnect()
    return 1

def run(items):
    if req["mode"] in ("raw", "raw-shared"):
        with ThreadPoolExecutor(n) as pool:
            return list(pool.map(raw if req["mode"] == "raw" else raw_shared, items))
    targets = [probe.ProbeTarget(host, port, u, p, "", kind="redis", ca=ca) for u, p in items]
    return probe.probe_many(targets, concurrency=n, control=req["mode"] == "control")

run(pairs[: req["warmup"]])
started = time.perf_counter()
results = run(pairs)
elapsed = time.perf_counter() - started
if req["mode"] in ("raw", "raw-shared"):
    out = {"probes": len(results), "logins": len(results), "verdicts": {"accepted": len(results)}}
else:
    logins = sum(1 + (r.control is not None) for r in results)
    out = {"probes": len(results), "logins": logins,
           "verdicts": dict(Counter(str(r.verdict()) for r in results))}
out["elapsed"] = elapsed
print(json.dumps(out))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def seed_users(server: lab_redis.RedisServer, count: int) -> list[tuple[str, str]]:
    """N users written into the aclfile before the server starts (their SHA-256 only)."""
    pairs = [(f"bench_{i:05d}", secrets.token_urlsafe(32)) for i in range(count)]
    lines = [
        f"user {u} on #{hashlib.sha256(p.encode()).hexdigest()} ~{u}:* +@all -@dangerous"
        for u, p in pairs
    ]
    with server.aclfile.open("a") as fh:
        fh.write("\n".join(lines) + "\n")
    return pairs


def run_probes(
    net: netns.Network, server: lab_redis.RedisServer, pairs: list[tuple[str, str]], *,
    concurrency: int, mode: str,
) -> dict[str, Any]:  # fmt: skip
    request = {
        "host": net.address("db1"),
        "port": PORT,
        "ca": str(server.ca),
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
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
    )
    out, err = proc.communicate(json.dumps(request).encode(), timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"probe run failed: {err.decode()[-2000:]}")
    data: dict[str, Any] = json.loads(out)
    return data


def bench_probe(args: argparse.Namespace, base: Path) -> None:
    name = f"mtr{os.getpid()}"[:12]
    net = netns.create(name, ["db1", "app1"])
    server = lab_redis.create(base / "probe-redis", address=net.address("db1"), port=PORT)
    try:
        pairs = seed_users(server, args.pairs)
        server.start(netns=net.namespace("db1"))
        modes = {
            "redis-py raw": "raw",
            "raw, 1 context": "raw-shared",
            "probe": "plain",
            "probe+control": "control",
        }
        runs: dict[str, list[dict[str, Any]]] = {label: [] for label in modes}
        for _ in range(args.repeat):  # interleaved, so drift hits every kind alike
            for label, mode in modes.items():
                runs[label].append(
                    run_probes(net, server, pairs, concurrency=args.concurrency, mode=mode)
                )
        print(
            f"probe: {args.pairs} pairs, concurrency {args.concurrency}, median of "
            f"{args.repeat}, from {net.namespace('app1')} to {net.address('db1')}:{PORT} (TLS)"
        )
        print(f"  {'kind':<15} {'logins/s':>9} {'probes/s':>9}  verdicts")
        rates: dict[str, float] = {}
        for label, samples in runs.items():
            med = sorted(samples, key=lambda s: s["logins"] / s["elapsed"])[len(samples) // 2]
            rates[label] = med["logins"] / med["elapsed"]
            print(
                f"  {label:<15} {rates[label]:>9.0f} {med['probes'] / med['elapsed']:>9.0f}"
                f"  {med['verdicts']}"
            )
        plain = rates["probe"] / rates["redis-py raw"]
        ctl = rates["probe+control"] / rates["redis-py raw"]
        print(f"  ratio (probe without control, logins/s vs redis-py connect+AUTH): {plain:.0%}")
        print(f"  with the negative control: logins/s {ctl:.0%} (two logins per probe)")
        same = rates["probe"] / rates["raw, 1 context"]
        print(
            f"  vs redis-py with one shared TLS context (what the probe does): {same:.0%}; plain "
            "redis-py builds a context per connection from the system trust store\n"
        )
    finally:
        server.stop()
        netns.destroy(name)


def write_manifest(folder: Path, count: int) -> None:
    consumers = []
    for i in range(count):
        secret = secrets.token_urlsafe(32).encode()
        name = f"n{i}.m.secret"
        (folder / name).write_bytes(secret)
        consumers.append(
            {"as": f"m_n{i}_x", "node": f"n{i}", "module": "m", "at": "127.0.0.1",
             "values": {}, "secret": name, "digest": secret_digest(secret)}
        )  # fmt: skip
    doc = {"version": 1, "kind": "redis", "provision": "cache", "provider": "db1/redis",
           "serial": 1, "consumers": consumers}  # fmt: skip
    (folder / "mesh.json").write_text(json.dumps(doc))


def empty(server: lab_redis.RedisServer) -> None:
    with redis.Redis.from_url(server.admin_file.read_text(), protocol=2) as admin:
        users = [u if isinstance(u, str) else u.decode() for u in admin.acl_users()]
        doomed = [u for u in users if u not in ("default", lab_redis.ADMIN_USER)]
        for i in range(0, len(doomed), 500):
            admin.acl_deluser(*doomed[i : i + 500])
        admin.acl_save()


class TimedAdapter(RedisAdapter):
    """The real adapter, with the time its closing ACL SAVE took kept for the table."""

    saves: ClassVar[list[float]] = []

    def close(self) -> None:
        started = time.perf_counter()
        saving = self.dirty and self.persist is not None
        try:
            super().close()
        finally:
            if saving:
                TimedAdapter.saves.append(time.perf_counter() - started)


def plain_loop(url: str, count: int, *, pipelined: bool) -> tuple[float, float]:
    """N plain ACL SETUSERs on one connection (each a round trip, or one pipeline), then one
    ACL SAVE: (seconds for the writes, seconds for the save)."""
    with redis.Redis.from_url(url, protocol=2) as admin:
        admin.ping()
        started = time.perf_counter()
        target: Any = admin.pipeline(transaction=False) if pipelined else admin
        for i in range(count):
            login = f"m_n{i}_x"
            sha = hashlib.sha256(secrets.token_urlsafe(32).encode()).hexdigest()
            target.execute_command(
                "ACL", "SETUSER", login, "reset", "on", f"#{sha}", f"~{login}:*",
                "+@all", "-@dangerous", "-@admin",
            )  # fmt: skip
        if pipelined:
            target.execute()
        writes = time.perf_counter() - started
        started = time.perf_counter()
        admin.acl_save()  # what reconcile does once at the end, so the users persist
        return writes, time.perf_counter() - started


def bench_apply(args: argparse.Namespace, base: Path) -> None:
    server = lab_redis.create(base / "apply-redis", address="127.0.0.1", port=free_port())
    folder = base / "provider"
    folder.mkdir()
    write_manifest(folder, args.pairs)
    server.start()
    try:
        url = server.admin_file.read_text()
        samples: dict[str, list[float]] = {
            "reconcile": [],
            "  its ACL SAVE": [],
            "  without it": [],
            "idle re-run": [],
            "ACL SETUSER loop": [],
            "  + ACL SAVE": [],
            "pipelined loop": [],
            "  + ACL SAVE ": [],
        }
        load = os.getloadavg()
        for _ in range(args.repeat):  # interleaved, so drift hits every kind alike
            empty(server)
            TimedAdapter.saves.clear()
            started = time.perf_counter()
            report = reconcile(folder / "mesh.json", server.admin_file, factory=TimedAdapter)
            took = time.perf_counter() - started
            assert report.counts() == {"created": args.pairs}, report.counts()
            assert len(TimedAdapter.saves) == 1, TimedAdapter.saves
            samples["reconcile"].append(took)
            samples["  its ACL SAVE"].append(TimedAdapter.saves[0])
            samples["  without it"].append(took - TimedAdapter.saves[0])
            started = time.perf_counter()
            report = reconcile(folder / "mesh.json", server.admin_file)
            samples["idle re-run"].append(time.perf_counter() - started)
            assert report.counts() == {"unchanged": args.pairs}, report.counts()
            empty(server)
            writes, save = plain_loop(url, args.pairs, pipelined=False)
            samples["ACL SETUSER loop"].append(writes)
            samples["  + ACL SAVE"].append(writes + save)
            empty(server)
            writes, save = plain_loop(url, args.pairs, pipelined=True)
            samples["pipelined loop"].append(writes)
            samples["  + ACL SAVE "].append(writes + save)
        after = os.getloadavg()
        print(
            f"apply: {args.pairs} users into an empty Redis (TLS, loopback), median of "
            f"{args.repeat}; load average {load[0]:.2f} at start, {after[0]:.2f} at end"
        )
        med = {k: statistics.median(v) for k, v in samples.items()}
        for label, seconds in med.items():
            print(
                f"  {label:<17} {seconds * 1000:>8.0f} ms  {seconds / args.pairs * 1e6:>6.0f} us/user"
            )

        def ratio(mine: str, base: str) -> float:
            # per-repeat ratios (the runs of one repeat are back to back), then their median
            pairs = zip(samples[mine], samples[base], strict=True)
            return statistics.median(r / b for r, b in pairs)

        print(
            "  ratio, the goal's (reconcile vs the plain loop + its one ACL SAVE, both persist): "
            f"{ratio('reconcile', '  + ACL SAVE'):.2f}x"
        )
        print(
            "  ratio, nothing persisted (reconcile without its ACL SAVE vs the plain loop): "
            f"{ratio('  without it', 'ACL SETUSER loop'):.2f}x"
        )
        print(
            "  ratio, unlike work (reconcile, persisted, vs the plain loop, not persisted): "
            f"{ratio('reconcile', 'ACL SETUSER loop'):.2f}x"
        )
        print(
            "  reference: reconcile vs the same writes pipelined by plain redis-py + ACL SAVE: "
            f"{ratio('reconcile', '  + ACL SAVE '):.2f}x"
        )
        print(
            "  reconcile also connects (TLS), reads the manifest and every secret file, lists "
            "the ACL (ACL LIST), checks ownership and learns Redis's rule form once; an ACL SAVE "
            "after N new users is mostly Redis 7.0 describing each one's rules (no fsync)"
        )
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", choices=("probe", "apply"))
    args = ap.parse_args(argv)
    if os.geteuid() != 0 or not netns.available():
        print("bench_redis needs root and working network namespaces (ip netns)", file=sys.stderr)
        return 2

    def on_term(signum: int, frame: Any) -> None:
        raise SystemExit(f"stopped by signal {signum}")

    signal.signal(signal.SIGTERM, on_term)
    base = Path(tempfile.mkdtemp(prefix="meshtui-benchredis-"))
    try:
        print(f"cpus: {os.cpu_count()}; {lab_redis.find_server()}; redis-py {redis.__version__}\n")
        if args.only in (None, "probe"):
            bench_probe(args, base)
        if args.only in (None, "apply"):
            bench_apply(args, base)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
