"""A pinned provider's side of one rotation: one login rotated among N, as the agent runs it.

Two scram-only clusters side by side (a demo-sized one with 5 logins, one with ``--logins``),
each with ``pin = true`` and its pg_hba block written; then one login's new secret applied the
way the host agent applies a delta (the built-in provisioner in this process, kept admin
sessions, ``only`` = that login, the manifest's cut handed over), in each cluster in turn, so
a moment of noise on a shared machine falls on both. Prints p50 per side and the ratio (goal:
<= 1.15x), then a cProfile of one rotation in the large cluster (``--profile``) and what each
rotation did to pg_hba.conf (read, written, checked by the server, reloaded).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_pin.py [--logins 1000] [--repeat 15]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import secrets
import shutil
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from meshtui.crypto import secret_digest
from meshtui.host.receive.run_provisioner import ProvisionReport, builtin_provisioner
from meshtui.kinds.postgres import hba
from meshtui.kinds.postgres.lab import Cluster, create_cluster

PROVIDER = "db1/postgres"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Side:
    """One cluster and its provider folder: a pinned manifest of ``count`` logins."""

    label: str
    cluster: Cluster
    folder: Path
    admin: Path
    consumers: list[dict[str, Any]] = field(default_factory=list)
    serial: int = 0

    def fill(self, count: int) -> None:
        for i in range(count):
            secret = secrets.token_urlsafe(32).encode()
            name = f"app{i:05d}.svc.secret"
            (self.folder / name).write_bytes(secret)
            self.consumers.append(
                {
                    "as": f"svc_app{i:05d}_{i:06x}",
                    "node": f"app{i:05d}",
                    "module": "svc",
                    "at": f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}",
                    "values": {},
                    "secret": name,
                    "digest": secret_digest(secret),
                }
            )
        self.consumers[0]["at"] = "127.0.0.1"

    def write(self) -> bytes:
        self.serial += 1
        doc = {
            "version": 1,
            "provision": "database",
            "provider": PROVIDER,
            "serial": self.serial,
            "pin": True,
            "consumers": self.consumers,
        }
        data = json.dumps(doc).encode()
        (self.folder / "mesh.json").write_bytes(data)
        cut = dict(doc, consumers=self.consumers[:1])
        return json.dumps(cut).encode()

    def whole(self) -> ProvisionReport:
        self.write()
        return builtin_provisioner(self.folder / "mesh.json", self.admin)

    def rotate_one(self) -> tuple[ProvisionReport, float]:
        """The first login's new secret, delivered as a delta (what a rotation sends): the
        report and the seconds the provisioner took (writing the files, the agent's part, is
        not timed: ``bench_rotate.py`` and ``bench_scale.py`` time the whole rotation)."""
        first = self.consumers[0]
        secret = secrets.token_urlsafe(32).encode()
        (self.folder / first["secret"]).write_bytes(secret)
        first["digest"] = secret_digest(secret)
        scoped = self.write()
        only = frozenset({first["as"]})
        t0 = time.perf_counter()
        report = builtin_provisioner(self.folder / "mesh.json", self.admin, only, scoped)
        return report, time.perf_counter() - t0


def side(base: Path, label: str, count: int) -> Side:
    root = base / label
    root.mkdir()
    cluster = create_cluster(root / "data", port=free_port())
    cluster.start()
    folder = root / "mesh"
    folder.mkdir()
    s = Side(label, cluster, folder, cluster.write_admin_file(root / "admin.conninfo"))
    s.fill(count)
    return s


def ok(report: ProvisionReport, what: str) -> None:
    if not report["ok"]:
        bad = [o for o in report["outcomes"] if o["outcome"] not in ("updated", "unchanged")]
        sys.exit(f"{what}: not ok: {report.get('error', '')} {bad[:3]}")


class Counted:
    """Counts what the pin step does to pg_hba.conf (reads, writes, server checks, reloads)."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def wrap(self, name: str) -> None:
        inner: Callable[..., Any] = getattr(hba, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.counts[name] = self.counts.get(name, 0) + 1
            return inner(*args, **kwargs)

        setattr(hba, name, counted)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logins", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--profile", action="store_true", help="cProfile one large rotation")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="meshtui-pin-"))
    base.chmod(0o711)
    sides: list[Side] = []
    try:
        sides = [side(base, "demo", 5), side(base, "large", args.logins)]
        t0 = time.perf_counter()
        for s in sides:
            ok(s.whole(), f"{s.label}: whole apply")
        print(f"whole applies: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        for s in sides:  # warm-up: kept sessions opened, the block verified once
            ok(s.rotate_one()[0], f"{s.label}: warm-up")
        runs: dict[str, list[float]] = {s.label: [] for s in sides}
        load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
        for _ in range(args.repeat):
            for s in sides:
                report, took = s.rotate_one()
                ok(report, f"{s.label}: rotation")
                runs[s.label].append(took)
        counted = Counted()
        for name in ("_read", "_write", "_rules", "_reload"):
            counted.wrap(name)
        large = sides[1]
        ok(large.rotate_one()[0], "counted")
        demo_ms = statistics.median(runs["demo"]) * 1000
        large_ms = statistics.median(runs["large"]) * 1000
        size = (large.cluster.datadir / "pg_hba.conf").stat().st_size
        print(f"\npinned rotation, provider side ({os.cpu_count()} cores, load {load})")
        print(f"  demo mesh, 5 logins:          p50 {demo_ms:7.2f} ms")
        print(f"  {args.logins:>6} logins:                p50 {large_ms:7.2f} ms")
        ratio = large_ms / demo_ms
        print(f"  ratio {ratio:.2f}x (goal <= 1.15x: {'met' if ratio <= 1.15 else 'MISSED'})")
        print(f"  pg_hba.conf {size} bytes; one rotation's pin step: {counted.counts or 'nothing'}")
        if args.profile:
            first = large.consumers[0]
            secret = secrets.token_urlsafe(32).encode()
            (large.folder / first["secret"]).write_bytes(secret)
            first["digest"] = secret_digest(secret)
            scoped = large.write()
            prof = cProfile.Profile()
            prof.enable()
            report = builtin_provisioner(
                large.folder / "mesh.json", large.admin, frozenset({first["as"]}), scoped
            )
            prof.disable()
            ok(report, "profiled")
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(25)
            print(out.getvalue())
    finally:
        for s in sides:
            s.cluster.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
