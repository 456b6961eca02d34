"""OpenBao: AppRole probe throughput against a plain httpx login loop, and applying roles
against the same API calls in a plain loop. One process, one lab OpenBao on loopback.

* **apply**: ``reconcile`` of a manifest of N consumers (their secret files beside it) into an
  empty OpenBao (each: its policy, its role with ``role_id``, its ``custom-secret-id``), and the
  idle re-run; against a plain loop of the same three writes per role on one httpx connection
  with the same admin token, for N other logins. Goal: reconcile ≤ 1.5× the loop.
* **probe**: ``probe_many`` over the N (role_id, secret_id) pairs at ``--concurrency``, without
  and with the negative control, against a plain httpx loop at the same concurrency: a fresh
  TLS connection per login (certificate verified against the lab CA), one AppRole login, close.
  Compared as logins per second (a probe with its control makes two logins; each accepted
  probe login also revokes its token, which the plain loop does not). Goal: ≥ 80 %.

Each measurement is the median of ``--repeat``. It prints both tables and the ratios, then
removes everything it made. Run as root (the server runs as its own user):

    .venv/bin/python benchmarks/bench_openbao.py [--pairs 1000] [--concurrency 8] [--repeat 3]
        [--skip-probe]
"""

from __future__ import annotations

import argparse
import json
import secrets
import shutil
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from meshtui.contracts.adapter import Scope
from meshtui.crypto import secret_digest
from meshtui.host.probe_runner import ProbeTarget, probe_many
from meshtui.kinds.openbao import lab as lab_bao
from meshtui.kinds.openbao.adapter import ROLE_SETTINGS, policy_text
from meshtui.kinds.openbao.client import APPROLE_MOUNT, Bao, read_admin, tls_context
from meshtui.provisioner.harness import reconcile


def write_manifest(folder: Path, n: int, tag: str) -> dict[str, str]:
    """A manifest of ``n`` consumers with their secret files; login -> secret."""
    folder.mkdir(parents=True, exist_ok=True)
    consumers, out = [], {}
    for i in range(n):
        login = f"m{i}_n{tag}_x"
        secret = secrets.token_urlsafe(32)
        (folder / f"n{i}.m.secret").write_text(secret)
        consumers.append(
            {"as": login, "node": f"n{i}", "module": "m", "at": "127.0.0.1", "values": {},
             "secret": f"n{i}.m.secret", "digest": secret_digest(secret.encode())}
        )  # fmt: skip
        out[login] = secret
    doc = {"version": 1, "kind": "openbao", "provision": "secret", "provider": f"db1/b{tag}",
           "serial": 1, "consumers": consumers}  # fmt: skip
    (folder / "mesh.json").write_text(json.dumps(doc))
    return out


def plain_apply(server: lab_bao.BaoServer, n: int, tag: str) -> float:
    """The same three writes per role, in a plain loop on one connection; seconds."""
    admin = read_admin(server.admin_file.read_text())
    scope = Scope(f"db1/p{tag}", "secret")
    started = time.perf_counter()
    with Bao(admin["address"], ca=admin["ca"], token=admin["token"]) as bao:
        for i in range(n):
            login = f"m{i}_p{tag}_x"
            name = f"meshtui-{login}"
            bao.call(
                "PUT", f"sys/policies/acl/{name}", {"policy": policy_text(scope, login, "meshtui")}
            )
            bao.call(
                "POST", f"auth/{APPROLE_MOUNT}/role/{name}",
                {**ROLE_SETTINGS, "token_policies": [name], "role_id": login},
            )  # fmt: skip
            bao.call(
                "POST", f"auth/{APPROLE_MOUNT}/role/{name}/custom-secret-id",
                {"secret_id": secrets.token_urlsafe(32), "metadata": "{}"},
            )  # fmt: skip
    return time.perf_counter() - started


def plain_logins(
    server: lab_bao.BaoServer, pairs: list[tuple[str, str]], concurrency: int
) -> float:
    """A fresh verified TLS connection, one AppRole login, close: per pair; logins per second."""
    context = tls_context(str(server.ca))

    def one(pair: tuple[str, str]) -> int:
        with httpx.Client(verify=context, timeout=10, trust_env=False) as client:
            answer = client.post(
                f"{server.url}/v1/auth/{APPROLE_MOUNT}/login",
                json={"role_id": pair[0], "secret_id": pair[1]},
            )
        assert answer.status_code == 200, answer.text
        return 1

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        done = sum(pool.map(one, pairs))
    return done / (time.perf_counter() - started)


def meshtui_probes(
    server: lab_bao.BaoServer, pairs: list[tuple[str, str]], concurrency: int, control: bool
) -> float:
    targets = [
        ProbeTarget(
            host=server.address,
            port=server.port,
            user=u,
            password=p,
            dbname="",
            kind="openbao",
            ca=str(server.ca),
        )  # fmt: skip
        for u, p in pairs
    ]
    started = time.perf_counter()
    results = probe_many(targets, concurrency=concurrency, allow_loopback=True, control=control)
    elapsed = time.perf_counter() - started
    bad = [r.reason() for r in results if r.verdict().value != "accepted"]
    assert not bad, bad[:3]
    return len(targets) * (2 if control else 1) / elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-probe", action="store_true", help="measure applying roles only")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="meshtui-bench-bao-"))
    base.chmod(0o711)
    server = lab_bao.create(
        base / "openbao", address="127.0.0.1", port=lab_bao.free_port(),
        cluster_port=lab_bao.free_port(),
    )  # fmt: skip
    server.start()
    try:
        applied, idle, plain = [], [], []
        pairs: list[tuple[str, str]] = []
        for r in range(args.repeat):
            folder = base / f"run{r}"
            logins = write_manifest(folder, args.pairs, f"r{r}")
            started = time.perf_counter()
            report = reconcile(folder / "mesh.json", server.admin_file)
            applied.append(time.perf_counter() - started)
            assert report.ok and len(report.outcomes) == args.pairs, report.lines()[:3]
            started = time.perf_counter()
            again = reconcile(folder / "mesh.json", server.admin_file)
            idle.append(time.perf_counter() - started)
            assert {o.outcome for o in again.outcomes} == {"unchanged"}
            plain.append(plain_apply(server, args.pairs, f"r{r}"))
            pairs = list(logins.items())
        a, i, p = (statistics.median(x) for x in (applied, idle, plain))
        print(f"apply {args.pairs} roles (median of {args.repeat}):")
        print(f"  meshtui reconcile     {a:8.2f} s  ({args.pairs / a:7.0f} roles/s)")
        print(f"  meshtui idle re-run   {i:8.2f} s")
        print(f"  plain loop, same API  {p:8.2f} s  ({args.pairs / p:7.0f} roles/s)")
        print(f"  ratio reconcile / plain loop: {a / p:.2f}x  (goal <= 1.5x)")
        if args.skip_probe:
            return
        probes, probes_control, raw = [], [], []
        for _ in range(args.repeat):
            raw.append(plain_logins(server, pairs, args.concurrency))
            probes.append(meshtui_probes(server, pairs, args.concurrency, control=False))
            probes_control.append(meshtui_probes(server, pairs, args.concurrency, control=True))
        rw, pr, pc = (statistics.median(x) for x in (raw, probes, probes_control))
        print(f"probe {len(pairs)} pairs at concurrency {args.concurrency} (logins/s, median):")
        print(f"  plain httpx login loop          {rw:8.0f}")
        print(f"  meshtui probe, no control       {pr:8.0f}  ({pr / rw:.0%} of plain)")
        print(
            f"  meshtui probe, with control     {pc:8.0f}  ({pc / rw:.0%} of plain; 2 logins each)"
        )
        print("  goal: >= 80 %")
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
