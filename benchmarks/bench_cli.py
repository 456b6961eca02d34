"""The command line's start: each command run as a whole process, side by side with a bare
interpreter (``python -c pass``) in the same run, in turn (bare, command, bare, command, ...),
so the ratio holds when the machine's speed drifts.

Commands: ``meshtui --version`` and ``--help``; ``meshtui status`` on an empty inventory (keys
only); ``status`` and ``status --json`` on the demo mesh (the lab's declaration: its nodes, its
PostgreSQL, Redis, OpenBao and SeaweedFS pairs and the vault consumers' own secrets, declared
and delivered in a fresh state folder; ``status`` reads the inventory only, so no server is
started; ``--state DIR`` reads a real demo's state folder instead); ``status --json`` at
``--pairs`` pairs (100 nodes, 4 providers, every end delivered, as ``bench_scale.py
--status-only`` builds it). The first run of each is a warm-up, not counted (bytecode written,
and the status image a later ``status`` reads). ``--before REV`` runs REV's ``meshtui`` package
too, by the same console script, in turn with this checkout's, on copies of the same folders.

Each run's wall time, and its CPU time (user + system, the kernel's own accounting of the
reaped child); min and median of ``--runs``, the median of the ratios run by run, and the goal
(goals: ``--version`` <= 2x the bare start, ``status`` on the demo mesh <= 150 ms,
``status --json`` at 10,000 pairs <= 300 ms). Results: docs/benchmarks-cli.md.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_cli.py [--runs 15] [--pairs 10000]
        [--state DIR] [--before 9eb2190]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import astuple, dataclass
from pathlib import Path

from bench_scale import _delivered, declaration  # noqa: E402  (one copy of the 10,000-pair mesh)

from meshtui.contracts.lab_server import LabProvider
from meshtui.controller.core import Controller, init_keys
from meshtui.host.state import identity
from meshtui.kinds import registry
from meshtui.kinds.openbao import lab as lab_bao
from meshtui.kinds.postgres import lab as lab_pg
from meshtui.kinds.redis import lab as lab_redis
from meshtui.kinds.seaweedfs import lab as lab_s3
from meshtui.lab import mesh as lab_mesh


@dataclass(frozen=True)
class Case:
    """One command line (its words after ``meshtui``; ``{demo}``, ``{big}``, ``{empty}`` are
    state folders), and its goal: a ratio to the bare start, or a wall time in seconds."""

    label: str
    words: list[str]
    ratio_goal: float | None = None
    wall_goal: float | None = None


@dataclass(frozen=True)
class Run:
    """One whole process: wall and CPU seconds, and how it exited."""

    wall: float
    cpu: float
    code: int


@dataclass(frozen=True)
class Side:
    """One revision's command line: its argv, its environment and its state folders."""

    label: str
    argv: list[str]
    env: dict[str, str]
    folders: dict[str, Path]

    def command(self, case: Case) -> list[str]:
        return [*self.argv, *(w.format(**self.folders) for w in case.words)]


def meshtui_argv() -> list[str]:
    """The installed console script beside this interpreter, as an operator runs it."""
    script = Path(sys.executable).parent / "meshtui"
    return [str(script)] if script.exists() else [sys.executable, "-m", "meshtui.cli"]


def run_once(argv: list[str], env: dict[str, str]) -> Run:
    """Spawn ``argv`` (output to /dev/null) and reap it: wall from spawn to reap, CPU from the
    child's rusage."""
    actions = [
        (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
        (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
    ]
    t0 = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, env, file_actions=actions)
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - t0
    return Run(wall, usage.ru_utime + usage.ru_stime, os.waitstatus_to_exitcode(status))


def nodes_of(decl: Path) -> list[str]:
    """The node names a declaration's ``[nodes.NAME]`` tables give."""
    out = []
    for line in decl.read_text().splitlines():
        if line.startswith("[nodes.") and line.endswith("]"):
            out.append(line[len("[nodes.") : -1].strip('"'))
    return out


def declared_state(root: Path, decl: Path) -> Path:
    """A state folder with controller keys, a key folder per node, ``decl`` declared and
    every end recorded as delivered (as a clean push leaves it)."""
    state = root / "state"
    pub, _ = init_keys(state)
    for node in nodes_of(decl):
        identity.init(node, root / "nodes" / node, pub)
    with Controller.open(state) as ctl:
        ctl.declare(decl)
        _delivered(ctl)
    return state


def demo_state(root: Path) -> Path:
    """The demo mesh's inventory: the lab's declaration (its nodes; PostgreSQL, Redis, OpenBao
    and SeaweedFS pairs; the vault consumers' own secrets), with the servers' records only."""
    lab = root / "lab"
    lab.mkdir(parents=True)
    nodes = [lab_mesh.PROVIDER_NODE, *lab_mesh.DEFAULT_MESH]
    state = root / "state"
    pub, _ = init_keys(state)
    for node in nodes:
        identity.init(node, lab / "nodes" / node, pub)
    admin = root / "admin.conninfo"
    admin.write_text("host=/run/postgresql user=postgres dbname=postgres\n")
    admin.chmod(0o600)
    srv = lab / "srv" / lab_mesh.PROVIDER_NODE
    cache = lab_redis.RedisServer(lab / "redis", "127.0.0.1", lab_redis.PORT)
    vault = lab_bao.BaoServer(lab / "openbao", "127.0.0.1", 8200, 8201, None)
    store = lab_s3.WeedServer(lab / "weed", "127.0.0.1", lab_s3.Ports(1, 2, 3, 4), None)
    tables = {
        "postgres": (
            lab_pg.provider_table(srv / "postgres", lab_pg.PORT, admin),
            lab_pg.PORT,
            None,
        ),
        "redis": (
            lab_redis.declaration_table(cache, srv / "redis", "db1/redis")[1],
            cache.port,
            cache.ca,
        ),
        "openbao": (
            lab_bao.declaration_table(vault, srv / "openbao", "db1/openbao")[1],
            vault.port,
            vault.ca,
        ),
        "seaweedfs": (
            lab_s3.declaration_table(store, srv / "s3", "db1/s3")[1],
            store.ports.s3,
            store.ca,
        ),
    }
    raised = {
        name: (kind, kind.lab.load(), LabProvider(table, "127.0.0.1", port, ca))
        for name, kind in registry.KINDS.items()
        for table, port, ca in [tables[name]]
    }
    decl, _ = lab_mesh._write_declaration(
        lab, {n: "127.0.0.1" for n in nodes}, lab_mesh.DEFAULT_MESH, raised, provisioner=None
    )
    with Controller.open(state) as ctl:
        ctl.declare(decl)
        _delivered(ctl)
    return state


def empty_state(root: Path) -> Path:
    """A state folder with the controller's keys and an inventory holding nothing."""
    state = root / "state"
    init_keys(state)
    Controller.open(state).close()
    return state


def before_side(rev: str, root: Path, folders: dict[str, Path], env: dict[str, str]) -> Side:
    """``rev``'s meshtui (``git archive`` of its package, first on the path) run by the same
    console script, on copies of the state folders (each side keeps its own status image)."""
    tree = root / "before"
    tree.mkdir()
    archive = subprocess.run(
        ["git", "archive", rev, "meshtui"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    copies = {}
    for name, folder in folders.items():
        copies[name] = root / "before-state" / name
        shutil.copytree(folder, copies[name], symlinks=True)
    return Side(f"before ({rev})", meshtui_argv(), {**env, "PYTHONPATH": str(tree)}, copies)


def row(label: str, got: list[Run], base: list[Run] | None = None, goal: str = "") -> str:
    """One line of the table: min and median wall and CPU, and against ``base`` run by run."""
    walls, cpus = [r.wall * 1000 for r in got], [r.cpu * 1000 for r in got]
    out = (
        f"  {label:<46}{min(walls):8.1f}{statistics.median(walls):8.1f}"
        f"{min(cpus):8.1f}{statistics.median(cpus):8.1f}"
    )
    if base is None:
        return out
    wall_x = statistics.median(m.wall / b.wall for m, b in zip(got, base, strict=True))
    cpu_x = statistics.median(m.cpu / max(b.cpu, 1e-3) for m, b in zip(got, base, strict=True))
    codes = ",".join(map(str, sorted({r.code for r in got})))
    return out + f"{wall_x:8.2f}{cpu_x:8.2f}{goal:>10}  {codes}"


def measure(cases: list[Case], sides: list[Side], bare: list[str], runs: int) -> None:
    """Each case on each side against the bare start, in turn (bare, each side, bare, ...),
    ``runs`` counted runs after one warm-up each."""
    env = sides[0].env
    print(f"{'':<48}{'wall ms':>16}{'cpu ms':>16}{'x bare (p50)':>16}{'goal':>10}  exit")
    print(f"{'':<48}{'min':>8}{'p50':>8}{'min':>8}{'p50':>8}{'wall':>8}{'cpu':>8}")
    for case in cases:
        run_once(bare, env)
        for side in sides:  # warm-up: bytecode, caches, and the status image written
            run_once(side.command(case), side.env)
        base: list[Run] = []
        got: dict[str, list[Run]] = {side.label: [] for side in sides}
        for _ in range(runs):
            base.append(run_once(bare, env))
            for side in sides:
                got[side.label].append(run_once(side.command(case), side.env))
        goal = ""
        if case.ratio_goal is not None:
            goal = f"<= {case.ratio_goal:g}x"
        elif case.wall_goal is not None:
            goal = f"<= {case.wall_goal * 1000:g} ms"
        print(case.label)
        print(row("python -c pass", base))
        for side in sides:
            print(row(side.label, got[side.label], base, goal if side is sides[0] else ""))


CASES = [
    Case("meshtui --version", ["--version"], ratio_goal=2.0),
    Case("meshtui --help", ["--help"]),
    Case("meshtui status (empty inventory)", ["--state", "{empty}", "status"]),
    Case("meshtui status (demo mesh)", ["--state", "{demo}", "status"], wall_goal=0.150),
    Case("meshtui status --json (demo mesh)", ["--state", "{demo}", "status", "--json"]),
    Case("meshtui status --json (PAIRS pairs)", ["--state", "{big}", "status", "--json"],
         wall_goal=0.300),
]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15, help="counted runs of each (default 15)")
    ap.add_argument("--pairs", type=int, default=10000, help="the large inventory's pairs")
    ap.add_argument("--state", type=Path, help="a real demo's state folder for the demo rows")
    ap.add_argument("--before", metavar="REV", help="also run REV's meshtui, in turn (9eb2190)")
    args = ap.parse_args(argv)
    # bytecode written and read, as an installed wheel has it (this machine's shells set
    # PYTHONDONTWRITEBYTECODE, which would compile every module on every run)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    base = Path(tempfile.mkdtemp(prefix="meshtui-benchcli-"))
    try:
        t0 = time.perf_counter()
        big_root = base / "big"
        big_root.mkdir()
        folders = {
            "demo": args.state or demo_state(base / "demo"),
            "big": declared_state(
                big_root,
                declaration(big_root, 5432, base / "admin.conninfo", 100, 4, args.pairs),
            ),
            "empty": empty_state(base / "empty"),
        }
        built = time.perf_counter() - t0
        sides = [Side("after (this checkout)", meshtui_argv(), env, folders)]
        if args.before:
            sides.append(before_side(args.before, base, folders, env))
        cases = [Case(c.label.replace("PAIRS", f"{args.pairs:,}"), *astuple(c)[1:]) for c in CASES]
        load = os.getloadavg()
        print(
            f"{' '.join(sides[0].argv)}; {args.runs} runs each after a warm-up, in turn with "
            f"python -c pass ({sys.executable}); bytecode cached; inventories built in "
            f"{built:.1f} s; cpus {os.cpu_count()}, load {load[0]:.2f}"
        )
        measure(cases, sides, [sys.executable, "-c", "pass"], args.runs)
        print(f"load average at start {load[0]:.2f}; after {os.getloadavg()[0]:.2f}")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
