"""Declaring N pairs through the real path against the cost of sealing alone.

    .venv/bin/python benchmarks/bench_declare.py [--pairs 10000] [--repeat 3] [--profile]

A generated declaration of 3 nodes (db1 provides ``database``; app1 and app2 run N consumer
modules between them) is declared into a fresh inventory with ``Controller.declare`` (read the
TOML, resolve, derive logins, mint, seal to both ends, digest, store, audit). Beside it, in the
same process, the floor: mint + two seals per pair and nothing else. The goal is declare within
2x of sealing alone. Also shown: declaring the same file again (nothing changes) and
``status`` over every pair.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from meshtui import crypto
from meshtui.controller.core import Controller, init_keys
from meshtui.controller.read.status import statuses
from meshtui.host.state import identity

NODES = {"db1": "10.213.0.2", "app1": "10.213.0.3", "app2": "10.213.0.4"}


def build(root: Path, pairs: int) -> tuple[Path, Path, dict[str, crypto.PublicKeys]]:
    """Controller keys, three node key folders and a declaration of ``pairs`` consumers."""
    state = root / "state"
    init_keys(state)
    keys = {}
    lines = []
    for name, address in NODES.items():
        folder = root / "nodes" / name
        identity.init(name, folder, state / "controller.pub")
        keys[name] = crypto.load_public(folder / "node.pub")
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
        node = "app1" if i % 2 else "app2"
        lines += [
            f'[modules."{node}/m{i}"]',
            f'requires = [{{ name = "database", values = {{ database = "db{i}" }}, '
            f'file = "/etc/m{i}/db.password" }}]',
        ]
    decl = root / "mesh.toml"
    decl.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return state, decl, keys


def seal_only(pairs: int, keys: dict[str, crypto.PublicKeys]) -> None:
    """The floor: mint and two seals per pair, nothing kept."""
    provider = keys["db1"].seal or b""
    consumers = [keys["app2"].seal or b"", keys["app1"].seal or b""]
    for i in range(pairs):
        secret = crypto.mint().encode("ascii")
        crypto.seal(secret, consumers[i % 2])
        crypto.seal(secret, provider)


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def run(pairs: int, repeat: int, profile: bool) -> float:
    rows: dict[str, list[float]] = {
        "seal only": [],
        "declare": [],
        "declare again": [],
        "status": [],
    }
    for _ in range(repeat):
        with tempfile.TemporaryDirectory(prefix="bench-declare-") as tmp:
            state, decl, keys = build(Path(tmp), pairs)
            rows["seal only"].append(timed(lambda: seal_only(pairs, keys)))  # noqa: B023
            with Controller.open(state) as ctl:
                if profile:
                    from pyinstrument import Profiler

                    profiler = Profiler()
                    profiler.start()
                start = time.perf_counter()
                result = ctl.declare(decl)
                rows["declare"].append(time.perf_counter() - start)
                if profile:
                    profiler.stop()
                    print(profiler.output_text(unicode=True, color=False, show_all=False))
                    profile = False
                assert len(result.new) == pairs, "every pair is new"
                again = ctl.declare(decl)
                assert len(again.unchanged) == pairs and not again.touched
                rows["declare again"].append(timed(lambda: ctl.declare(decl)))  # noqa: B023
                rows["status"].append(timed(lambda: statuses(ctl.inventory)))  # noqa: B023
    best = {k: min(v) for k, v in rows.items()}
    floor = best["seal only"]
    print(f"{pairs} pairs, best of {repeat}")
    print(f"{'step':<16}{'seconds':>10}{'us/pair':>10}{'x seal':>9}")
    for name, secs in best.items():
        print(f"{name:<16}{secs:>10.3f}{secs / pairs * 1e6:>10.1f}{secs / floor:>9.2f}")
    ratio = best["declare"] / floor
    print(f"declare / seal only = {ratio:.2f} (goal <= 2.00)")
    return ratio


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=10_000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--profile", action="store_true", help="pyinstrument the first declare")
    args = p.parse_args(argv)
    ratio = run(args.pairs, args.repeat, args.profile)
    return 0 if ratio <= 2.0 else 1


if __name__ == "__main__":
    sys.exit(main())
