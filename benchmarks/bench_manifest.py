"""The provider agent's manifest step of one rotation, before and after, side by side in one
process: a delta of one consumer merged into a manifest of ``--consumers`` lines, by this
revision's ``meshtui/host/receive/manifest_writer.py`` and by ``--before`` REV's, alternating, each on its own
folder; and the same delta on a 5-consumer manifest (the demo mesh's size).

Each side is timed (p50 of ``--repeat``), counted (Python function calls of one delta, by
cProfile) and its reads of the manifest on the delivery's path counted; the step that follows
the answer (:meth:`Serials.settle`, off the path) is timed apart. The floor printed is what
stays O(manifest) by design: the whole file's text joined and written with its fsync.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_manifest.py [--consumers 10005]
        [--repeat 21] [--before 80d3c6b]
"""

from __future__ import annotations

import argparse
import cProfile
import importlib.util
import os
import pstats
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from meshtui import crypto, folders
from meshtui.atomic import PRIVATE, write_at
from meshtui.host.receive import manifest_writer as current
from meshtui.protocol.messages import ConsumerLine, ManifestEntry, ProviderSet, rebased_digest


def revision_module(rev: str) -> ModuleType:
    """``meshtui/host/receive/manifest_writer.py`` as it was at git revision ``rev``, loaded under its own
    name beside this one (both use the same :mod:`meshtui` around them)."""
    repo = Path(__file__).resolve().parents[1]
    text = subprocess.run(
        ["git", "-C", str(repo), "show", f"{rev}:meshtui/host/receive/manifest_writer.py"],
        check=True,
        capture_output=True,
    ).stdout
    spec = importlib.util.spec_from_loader(f"manifest_at_{rev}", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    exec(compile(text, f"{rev}:meshtui/host/receive/manifest_writer.py", "exec"), module.__dict__)
    return module


class Side:
    """One writer (a revision's module) and its provider's folder, consumers and serials."""

    def __init__(self, module: ModuleType, root: Path, count: int) -> None:
        self.m = module
        self.root = root
        root.mkdir(mode=0o700)
        self.secrets: dict[str, bytes] = {}
        self.entries = [self.entry(i) for i in range(count)]
        self.serials = module.Serials()
        self.base = ""
        whole = self.spec(list(self.entries))
        assert module.write_provider_files(*self.args(whole)).refused is None
        self.settle()
        self.base = _digest(self.entries)

    def settle(self) -> None:
        """What the agent does once its answer is sent (and, when this revision reads the
        manifest back on a timer, that read too)."""
        self.serials.settle()
        getattr(self.serials, "wait", lambda: None)()

    def entry(self, i: int, generation: int = 1) -> ManifestEntry:
        secret = secrets.token_urlsafe(32).encode()
        digest = crypto.secret_digest(secret)
        self.secrets[digest] = secret
        return {
            "pair": f"database:n{i}/m{i}->db1/postgres",
            "as": f"m{i}_n{i}_{i:06x}",
            "node": f"n{i}",
            "module": f"m{i}",
            "at": "10.213.0.3",
            "values": {"database": f"m{i}_n{i}"},
            "digest": digest,
            "sealed": "-",
            "generation": generation,
        }

    def spec(self, consumers: list[ManifestEntry], **more: Any) -> ProviderSet:
        spec: ProviderSet = {
            "provider": "db1/postgres",
            "provision": "database",
            "receives": str(self.root / "mesh.json"),
            "grants": str(self.root / "grants"),
            "admin": None,
            "provisioner": None,
            "pin": True,
            "consumers": consumers,
        }
        spec.update(more)  # type: ignore[typeddict-item]
        return spec

    def args(self, spec: ProviderSet) -> tuple[Any, ...]:
        unseal: Callable[[str, str, str], bytes] = lambda s, d, p: self.secrets[d]  # noqa: E731
        return spec, self.root / "mesh.json", self.root / "grants", unseal, self.serials

    def rotate(self, i: int) -> None:
        """One delta: consumer ``i`` rotated (as the controller sends it)."""
        old = self.entries[i]
        self.entries[i] = new = self.entry(i, old["generation"] + 1)
        delta = self.spec([new], base={"digest": self.base})
        assert self.m.write_provider_files(*self.args(delta)).refused is None
        self.base = rebased_digest(self.base, [_line(old)], [_line(new)])


def _line(c: ManifestEntry) -> ConsumerLine:
    return ConsumerLine(c["as"], c["node"], c["module"], c["at"], c["values"], c["digest"])


def _digest(entries: list[ManifestEntry]) -> str:
    from meshtui.protocol.messages import consumer_set_digest

    return consumer_set_digest(_line(c) for c in entries)


def calls_of(fn: Callable[[], object]) -> int:
    """Python function calls ``fn`` makes (cProfile)."""
    prof = cProfile.Profile()
    prof.enable()
    fn()
    prof.disable()
    return sum(row[1] for row in pstats.Stats(prof).stats.values())  # type: ignore[attr-defined]


def reads_during(fn: Callable[[], object]) -> int:
    """Bytes of ``mesh.json`` read by folder descriptor while ``fn`` runs."""
    got = 0
    real = folders.Folder.read_with_stat

    def counted(self: folders.Folder, name: str, *, limit: int = folders.MAX_SECRET) -> Any:
        nonlocal got
        out = real(self, name, limit=limit)
        if name == "mesh.json" and out is not None:
            got += len(out[0])
        return out

    folders.Folder.read_with_stat = counted  # type: ignore[method-assign]
    try:
        fn()
    finally:
        folders.Folder.read_with_stat = real  # type: ignore[method-assign]
    return got


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--consumers", type=int, default=10005)
    ap.add_argument("--repeat", type=int, default=21)
    ap.add_argument("--before", default="80d3c6b", help="the revision to compare with")
    args = ap.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="meshtui-benchman-"))
    try:
        old = revision_module(args.before)
        sides = {
            f"before ({args.before})": Side(old, base / "before", args.consumers),
            "after": Side(current, base / "after", args.consumers),
            "after, 5 consumers": Side(current, base / "demo", 5),
        }
        load = os.getloadavg()
        times: dict[str, list[float]] = {name: [] for name in sides}
        settles: dict[str, list[float]] = {name: [] for name in sides}
        for n in range(args.repeat + 2):
            for name, side in sides.items():
                i = n % len(side.entries)
                t0 = time.perf_counter()
                side.rotate(i)
                took = time.perf_counter() - t0
                t0 = time.perf_counter()
                side.settle()  # the agent's step once its answer is sent
                settled = time.perf_counter() - t0
                if n >= 2:
                    times[name].append(took)
                    settles[name].append(settled)
        text = (base / "after" / "mesh.json").read_bytes()
        floor: list[float] = []
        with folders.open_folder(base / "after") as where:  # type: ignore[union-attr]
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                data = b"x".join([text])  # the text joined again, as each write does
                write_at(where.fd, "floor.json", data, access=PRIVATE)
                floor.append(time.perf_counter() - t0)
        print(f"one delta on a {args.consumers}-consumer manifest ({len(text)} bytes), "
              f"p50 of {args.repeat}, sides alternating:")  # fmt: skip
        for name, side in sides.items():
            calls = calls_of(lambda side=side: side.rotate(3))  # type: ignore[misc]
            side.settle()
            read = reads_during(lambda side=side: side.rotate(4))  # type: ignore[misc]
            side.settle()
            print(f"  {name:<22} {statistics.median(times[name]) * 1000:7.2f} ms  "
                  f"{calls:>7} calls  {read:>9} bytes read on the path  "
                  f"(after the answer: {statistics.median(settles[name]) * 1000:.2f} ms)")  # fmt: skip
        print(f"  floor: the whole file written and fsynced alone "
              f"{statistics.median(floor) * 1000:.2f} ms")  # fmt: skip
        print(f"load average at start {load[0]:.2f}; after {os.getloadavg()[0]:.2f}")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
