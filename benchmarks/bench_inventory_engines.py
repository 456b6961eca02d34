"""The inventory on PostgreSQL beside SQLite, in one run: the same mesh in two state folders,
one per engine, both open at once, and the ratio PostgreSQL / SQLite of each figure: the
repeated figures are measured run by run on one engine then the other (which goes first
alternates), so the machine's load falls on both alike, and given as p50 and min.

No agents: the figures are the inventory's own share, which is where the engines differ (the
agents' round trips and the provider's work are the same for both).

- declare of ``--pairs`` pairs into an empty inventory, and recording every end delivered
  (the inventory's writes of the first push), once each;
- status at ``--pairs`` pairs, first read after a change (one delivery recorded): the kept
  reader (``watch``) and the one-shot reader reading every pair (the CLI without its image);
- the inventory's part of rotating one pair: the reads a rotation's planner makes of that
  pair, then its transactions in order (generation minted and journaled with its audit event;
  both ends recorded; the pair moved to the new generation, the rotation closed, audited),
  and each of these four parts on its own.

PostgreSQL is the embedded wheel's (18), started here on a Unix socket of this machine.

``--no-fsync``: both engines commit without waiting for the disk (SQLite's ``synchronous =
OFF``, PostgreSQL's ``synchronous_commit = off``), to see the inventory's own work and round
trips apart from the disk's flushes, which on a shared machine vary more than the rest. A
diagnosis only: neither engine runs so in service.

``--push N``: besides, a push of N new pairs to real agents on each engine in turn (the lab's
agents and provisioner as ``bench_scale.py`` raises them: every node's agent served by one
helper process, the providers on a PostgreSQL of their own, a fresh one per engine): declare,
then ``meshtui push`` timed in a fresh process, as an operator runs it. Minutes per engine at
10,000 pairs.

``--cli R``: besides, ``meshtui status --json`` as an operator runs it, a whole process,
at ``--pairs`` pairs, after one delivery was recorded (the first read after a change, through
the status image the warm-up run left), ``R`` times per engine, interleaved.

``--rotate R``: besides, a whole rotation of one pair with real agents (as ``--push`` raises
them, ``--rotate-pairs`` pairs pushed first), ``Controller.rotate`` as the CLI calls it, ``R``
times on each engine, the two meshes raised at once and the engines interleaved: the
inventory's share beside what the agents and the provider do, as an operator waits for it.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_inventory_engines.py [--pairs 10000]
    [--nodes 100] [--repeat 15] [--no-fsync] [--push N] [--cli R]
    [--rotate R [--rotate-pairs 1000]]
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

import psycopg
from bench_scale import declaration, fresh, raised  # noqa: E402  (one copy)
from psycopg import sql

from meshtui.controller.config import ControllerConfig, save
from meshtui.controller.core import Controller, init_keys
from meshtui.controller.read import status as status_mod
from meshtui.host.state import identity
from meshtui.inventory.rows import DeliveryRow, GenerationRow
from meshtui.inventory.store import now
from meshtui.kinds.postgres.lab import Cluster
from meshtui.model import RotationState
from tests.fix_pg import start_cluster


def _ms(runs: list[float]) -> float:
    return statistics.median(runs) * 1000.0


def _delivered(ctl: Controller) -> None:
    stamp = now()
    rows = [
        DeliveryRow(pair=p["id"], end=end, generation=p["generation"], digest=None,
                    since=stamp, attempted_at=stamp, error=None)
        for p in ctl.inventory.pairs()
        for end in ("provider", "consumer")
    ]  # fmt: skip
    with ctl.inventory.transaction("bench") as tx:
        tx.put_deliveries(rows)


def _touched(ctl: Controller, pid: str, generation: int) -> None:
    stamp = now()
    with ctl.inventory.transaction("bench") as tx:
        tx.put_deliveries([DeliveryRow(pair=pid, end="consumer", generation=generation,
                                       digest=None, since=stamp, attempted_at=stamp, error=None)])  # fmt: skip


STAGES = (
    "its planner's five reads",
    "generation minted, journaled, audited",
    "both ends recorded",
    "moved to it, rotation closed, audited",
)
"""A rotation's parts, each timed on its own (:func:`_rotate_one`)."""


def _rotate_one(ctl: Controller, pid: str, lap: Callable[[], None] = lambda: None) -> None:
    """The inventory's part of rotating ``pid``, in rotate's order; ``lap`` is called at the
    end of each of :data:`STAGES`."""
    inv = ctl.inventory
    (pair,) = inv.pairs([pid])
    inv.module_specs([pair["consumer"], pair["provider"]])
    inv.held_generations([pid])
    inv.held_ends([pid])
    inv.minted([pid])
    lap()
    new = pair["generation"] + 1
    items = [{"pair": pid, "from": pair["generation"], "to": new}]
    stamp = now()
    with inv.transaction("rotate") as tx:
        tx.add_generations([GenerationRow(pair=pid, generation=new, consumer_sealed=b"c" * 120,
                                          provider_sealed=b"p" * 120, digest="d" * 64,
                                          created_at=stamp, discarded_at=None)])  # fmt: skip
        rid = tx.journal_rotation(items, os.getpid(), RotationState.DELIVERING)  # type: ignore[arg-type]
        tx.audit("rotate", [pid], {"rotation": rid, "state": "delivering"}, "started")
    lap()
    with inv.transaction("rotate") as tx:
        tx.put_deliveries([
            DeliveryRow(pair=pid, end=end, generation=new, digest="d" * 64, since=stamp,
                        attempted_at=stamp, error=None)
            for end in ("provider", "consumer")
        ])  # fmt: skip
    lap()
    with inv.transaction("rotate") as tx:
        tx.set_generation(pid, new, stamp)
        tx.update_rotation(rid, {"state": RotationState.DONE, "finished_at": now()})
        tx.audit("rotate", [pid], {"rotation": rid}, "ok")
    lap()


def prepared(ctl: Controller, decl: Path) -> dict[str, float]:
    """Declare every pair and record every end delivered (once each, ms); then, on
    PostgreSQL, what autovacuum does done now, not in the middle of the measurements."""
    out: dict[str, float] = {}
    t0 = time.perf_counter()
    ctl.declare(decl)
    out["declare (every pair new)"] = (time.perf_counter() - t0) * 1000
    t0 = time.perf_counter()
    _delivered(ctl)
    out["record every end delivered"] = (time.perf_counter() - t0) * 1000
    if ctl.inventory.dialect.name == "postgres":
        ctl.inventory._conn.execute("VACUUM ANALYZE")
    ctl.status(keep=True)
    return out


def repeated(ctls: dict[str, Controller], repeat: int) -> dict[str, dict[str, list[float]]]:
    """Each repeated figure's runs (seconds) per engine, the engines interleaved run by run
    (which goes first alternates), so a change of the machine's load falls on both alike."""
    first = {engine: ctl.inventory.pairs()[0] for engine, ctl in ctls.items()}

    def after_change(read: Callable[[Controller], object]) -> Callable[[str], float]:
        def run(engine: str) -> float:
            _touched(ctls[engine], first[engine]["id"], first[engine]["generation"])
            t0 = time.perf_counter()
            read(ctls[engine])
            return time.perf_counter() - t0

        return run

    def rotation(engine: str) -> float:
        laps = [time.perf_counter()]
        _rotate_one(ctls[engine], first[engine]["id"], lambda: laps.append(time.perf_counter()))
        for stage, (start, end) in zip(STAGES, itertools.pairwise(laps), strict=True):
            parts[engine][f"  {stage}"].append(end - start)
        return laps[-1] - laps[0]

    figures: dict[str, Callable[[str], float]] = {
        "status, kept reader (watch)": after_change(lambda ctl: ctl.status(keep=True)),
        "status, every pair read (one-shot)": after_change(
            lambda ctl: status_mod.statuses(ctl.inventory)
        ),
        "rotate one pair (the inventory's part)": rotation,
    }
    runs: dict[str, dict[str, list[float]]] = {e: defaultdict(list) for e in ctls}
    parts: dict[str, dict[str, list[float]]] = {e: defaultdict(list) for e in ctls}
    engines = list(ctls)
    for label, figure in figures.items():
        for engine in engines:  # a warm-up run each, not counted
            figure(engine)
        for stages in parts.values():
            stages.clear()
        for i in range(repeat):
            for engine in engines if i % 2 == 0 else engines[::-1]:
                runs[engine][label].append(figure(engine))
    for engine, stages in parts.items():
        runs[engine].update(stages)
    return runs


def status_processes(
    ctls: dict[str, Controller], states: dict[str, Path], repeat: int
) -> dict[str, list[float]]:
    """Seconds each ``meshtui status --json`` took as a whole process, by engine, each run
    after one delivery recorded (a warm-up run first on each, not counted: it leaves the
    status image the next reads start from); the engines interleaved."""
    script = Path(sys.executable).parent / "meshtui"
    # as an installed meshtui runs: from bytecode (the warm-up writes it where it is stale)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    first = {engine: ctl.inventory.pairs()[0] for engine, ctl in ctls.items()}
    took: dict[str, list[float]] = {engine: [] for engine in ctls}
    engines = list(ctls)
    for turn in range(repeat + 1):
        for engine in engines if turn % 2 == 0 else engines[::-1]:
            _touched(ctls[engine], first[engine]["id"], first[engine]["generation"])
            started = time.perf_counter()
            subprocess.run(
                [str(script), "--state", str(states[engine]), "status", "--json"],
                check=True,
                stdout=subprocess.DEVNULL,
                env=env,
            )
            if turn:
                took[engine].append(time.perf_counter() - started)
    return took


def pushed(inventory: Path | None, nodes: int, providers: int, pairs: int) -> float:
    """Seconds ``meshtui push`` of ``pairs`` new pairs took with real agents, the inventory on
    SQLite or (``inventory``: its conninfo file, an empty database) on PostgreSQL."""
    with raised("meshtui-benchpush-", nodes, providers, pairs, inventory=inventory) as mesh:
        rows: list[tuple[str, float, str]] = []
        fresh(mesh.state, "declare", rows, mesh.decl)
        fresh(mesh.state, "push", rows)
        return rows[-1][1]


def rotated(
    conninfo: Path, nodes: int, providers: int, pairs: int, repeat: int
) -> dict[str, list[float]]:
    """Seconds each whole rotation of one pair took with real agents, by engine: both meshes
    raised and pushed first, then rotated in turns (which engine goes first alternates)."""
    took: dict[str, list[float]] = {"sqlite": [], "postgres": []}
    with ExitStack() as stack:
        ctls: dict[str, Controller] = {}
        for engine, inventory in (("sqlite", None), ("postgres", conninfo)):
            mesh = stack.enter_context(
                raised(
                    f"meshtui-benchrotate-{engine}-", nodes, providers, pairs, inventory=inventory
                )
            )
            ctl = stack.enter_context(Controller.open(mesh.state))
            ctl.declare(mesh.decl)
            assert ctl.push().ok
            ctls[engine] = ctl
        pid = sorted(p["id"] for p in ctls["sqlite"].inventory.pairs())[0]
        for turn in range(repeat + 1):
            order = ("sqlite", "postgres") if turn % 2 else ("postgres", "sqlite")
            for engine in order:
                started = time.perf_counter()
                report = ctls[engine].rotate([pid])
                elapsed = time.perf_counter() - started
                assert report.ok, report
                if turn:  # the first turn warms up
                    took[engine].append(elapsed)
    return took


def _database(cluster: Cluster, base: Path, name: str) -> Path:
    """A new database ``bench_<name>`` on ``cluster`` and its conninfo file (0600) in ``base``."""
    with psycopg.connect(cluster.admin_conninfo(), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(f"bench_{name}")))
    path = base / f"{name}.conninfo"
    path.write_text(
        psycopg.conninfo.make_conninfo(cluster.admin_conninfo(), dbname=f"bench_{name}")
    )
    path.chmod(0o600)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=10000)
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--providers", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--no-fsync", action="store_true",
                    help="commit without waiting for the disk, on both engines (a diagnosis)")  # fmt: skip
    ap.add_argument("--push", type=int, default=0, metavar="N",
                    help="also push N new pairs to real agents on each engine")  # fmt: skip
    ap.add_argument("--cli", type=int, default=0, metavar="R",
                    help="also run meshtui status --json R times per engine, whole processes")  # fmt: skip
    ap.add_argument("--rotate", type=int, default=0, metavar="R",
                    help="also rotate one pair R times with real agents on each engine")  # fmt: skip
    ap.add_argument("--rotate-pairs", type=int, default=1000, metavar="N",
                    help="the pairs of the mesh --rotate raises (default 1000)")  # fmt: skip
    args = ap.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="meshtui-benchengines-"))
    cluster, cluster_base = start_cluster("18")
    try:
        cluster.set_config(autovacuum="on")  # as a server in service runs (the tests' is off)
        if args.no_fsync:
            cluster.set_config(synchronous_commit="off")
        conninfo = _database(cluster, base, "inventory")
        results: dict[str, dict[str, float]] = {}
        ctls: dict[str, Controller] = {}
        states: dict[str, Path] = {}
        with ExitStack() as opened:
            for engine in ("sqlite", "postgres"):
                root = base / engine
                state = root / "state"
                pub, _ = init_keys(state)
                if engine == "postgres":
                    save(state, ControllerConfig(name="bench", postgres=conninfo))
                decl = declaration(root, 5432, base / "admin.conninfo", args.nodes,
                                   args.providers, args.pairs)  # fmt: skip
                for line in decl.read_text().splitlines():
                    if line.startswith("[nodes."):
                        name = line[len("[nodes.") : -1]
                        identity.init(name, root / "nodes" / name, pub)
                ctl = opened.enter_context(Controller.open(state))
                assert ctl.inventory.dialect.name == engine, ctl.inventory.dialect
                if args.no_fsync and engine == "sqlite":
                    ctl.inventory._conn.execute("PRAGMA synchronous = OFF")
                ctls[engine], states[engine] = ctl, state
                results[engine] = prepared(ctl, decl)
            low: dict[str, dict[str, float]] = {engine: {} for engine in ctls}
            for engine, figures in repeated(ctls, args.repeat).items():
                for label, took in figures.items():
                    results[engine][label] = _ms(took)
                    low[engine][label] = min(took) * 1000.0
            if args.cli:
                label = "meshtui status --json, whole process"
                for engine, took in status_processes(ctls, states, args.cli).items():
                    results[engine][label] = _ms(took)
                    low[engine][label] = min(took) * 1000.0
        if args.push:
            pushing = _database(cluster, base, "push")
            label = f"push {args.push} new pairs, real agents"
            for engine, inventory in (("sqlite", None), ("postgres", pushing)):
                took = pushed(inventory, args.nodes, args.providers, args.push)
                results[engine][label] = took * 1000
        if args.rotate:
            rotating = _database(cluster, base, "rotate")
            label = f"rotate one pair, real agents ({args.rotate_pairs})"
            for engine, runs in rotated(
                rotating, args.nodes, args.providers, args.rotate_pairs, args.rotate
            ).items():
                results[engine][label] = _ms(runs)
                low[engine][label] = min(runs) * 1000.0
        print(f"{args.pairs} pairs, {args.nodes} nodes; p50 (and min) of {args.repeat} where "
              f"repeated, the engines interleaved; load {os.getloadavg()[0]:.2f}"
              f"{'; no fsync (a diagnosis)' if args.no_fsync else ''}")  # fmt: skip
        print(f"  {'':<42}{'SQLite ms':>11}{'PG 18 ms':>11}{'PG/SQLite':>11}"
              f"{'min SQLite':>12}{'min PG':>9}{'min ratio':>11}")  # fmt: skip
        for label, lite in results["sqlite"].items():
            pg = results["postgres"][label]
            line = f"  {label:<42}{lite:>11.2f}{pg:>11.2f}{pg / lite:>10.2f}x"
            if label in low["sqlite"]:
                lo, hi = low["sqlite"][label], low["postgres"][label]
                line += f"{lo:>12.2f}{hi:>9.2f}{hi / lo:>10.2f}x"
            print(line)
    finally:
        cluster.stop()
        shutil.rmtree(cluster_base, ignore_errors=True)
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
