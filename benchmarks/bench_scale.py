"""One controller for many nodes and pairs: declare, push, status, probe, rotate-one, rotate-all.

The nodes are real agents (the real :class:`~meshtui.host.server.routes.Agent` behind the real Starlette
app), each on its own Unix socket with its own keys and state folder, all served by ONE helper
process (one uvicorn server per node in one event loop): 100 Python processes would not fit on
this machine beside the controller. Several provider nodes (``db0``, ``db1``, ...) run the
built-in provisioner against one embedded PostgreSQL (scram only, loopback). The controller runs
in this process; declare, push (twice: then every end is held) and rotate all each run in a
fresh process of their own (``controller_step.py``), as an operator's command does, and print
that process's peak RSS (``VmHWM``) and its RSS after the imports; ``--in-process`` runs them in
this process instead (then the peak printed is the largest of every step so far, on top of this
script's own imports: PostgreSQL's client, uvicorn, the test fixtures). ``--beside-old`` runs
rotate all first as before batches (every payload built and signed at once), then as now;
``--trace`` adds tracemalloc's peak of each phase of each fresh step (it costs memory itself:
read RSS from a run without it).

Baselines printed beside each figure, from the same run: PostgreSQL's own cost of setting the
same number of passwords (plaintext, server-side hashing) in one transaction (creating the
roles, beside push; altering the mesh's own roles, after rotate all), and one signed ``state``
round trip to every node in parallel.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_scale.py [--nodes 100] [--pairs 10000]
    [--providers 4] [--skip-probe] [--skip-rotate-all] [--pin] [--beside-demo N]
    [--beside-old] [--trace] [--in-process]

``--pin``: every provider declares ``pin = true`` (each login confined in pg_hba.conf, the
four providers' blocks in the one cluster's file). ``--beside-demo N``: after the three single
rotations, rotate one pair N times in turn with the same pair of the demo mesh (5 pairs, its own
PostgreSQL and agents, pinned alike), p50 of each side and their ratio (goal <= 1.3x).

``--status-only`` measures just ``status`` in seconds, with no agent or PostgreSQL: the same
declaration is declared, then every end is recorded as delivered (as push leaves it) and, in a
second round, every pair probed a few times (as probe and watch leave it). Each time, the first
read after a change (one delivery recorded), ``--repeat`` times for each reader in turn: the
kept reader (``watch``), the one-shot reader (the CLI: a fresh read-only controller, from the
status image in the state folder) and the one-shot reader as before the image (every pair read
and made, as a read without the image does); median and minimum wall, median CPU of this
process (the machine may be shared), each against the goal, the old one-shot reader and the
floor from the same run: the bare read of the same pairs' rows (``SELECT`` of the pairs table
through the stdlib cursor). Before them, the one-shot reader with no image yet (the first read
in a state folder: every pair read, the image written), three times.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
from bench_rotate import QUIET, lab, p50_ms, pg_create_all, stop_cluster  # noqa: E402  (one copy)
from psycopg import sql

from meshtui.controller.agents.client import Agents
from meshtui.controller.config import ControllerConfig, save
from meshtui.controller.core import Controller, init_keys
from meshtui.controller.plan.resolve import ask_state
from meshtui.controller.read import status as status_mod
from meshtui.controller.read.status_image import IMAGE
from meshtui.host.policy import node_policy
from meshtui.host.state import identity
from meshtui.inventory.rows import DeliveryRow, PairRow, ProbeRecord
from meshtui.inventory.store import now
from meshtui.kinds.postgres.lab import Cluster, create_cluster
from meshtui.lab.mesh import agent_answers
from meshtui.model import PairStatus
from tests.fix_agents import mesh_policy
from tests.fix_pg import free_port


def serve(root: Path) -> None:
    """The helper process: every node folder under ``root/nodes`` served on its socket."""
    import uvicorn

    from meshtui.host.server.routes import Agent
    from meshtui.host.server.serve import build_app, uvicorn_config

    async def run() -> None:
        servers = []
        for folder in sorted((root / "nodes").iterdir()):
            agent = Agent(identity.load(folder), allow_loopback=True)
            config = uvicorn_config(build_app(agent), f"unix:{root}/run/{folder.name}.sock")
            servers.append(uvicorn.Server(config))
        await asyncio.gather(*(s.serve() for s in servers))

    asyncio.run(run())


def declaration(
    root: Path, port: int, admin: Path, nodes: int, providers: int, pairs: int, pin: bool = False
) -> Path:
    names = [f"n{i:03d}" for i in range(nodes - providers)]
    dbs = [f"db{i}" for i in range(providers)]
    out: list[str] = []
    for node in [*dbs, *names]:
        out += [f"[nodes.{node}]", 'address = "127.0.0.1"',
                f'agent = "unix:{root}/run/{node}.sock"', f'keys = "nodes/{node}/node.pub"', ""]  # fmt: skip
    for db in dbs:
        out += [f'[modules."{db}/postgres"]', f'provides = [{{ name = "database", port = {port} }}]',
                f'receives = {{ database = "srv/{db}/mesh.json" }}',
                f'grants = {{ database = "srv/{db}/grants" }}', f'admin = "{admin}"',
                *(["pin = true"] if pin else []), ""]  # fmt: skip
    for i in range(pairs):
        node, db = names[i % len(names)], dbs[i % len(dbs)]
        out += [f'[modules."{node}/m{i}"]',
                f'requires = [{{ name = "database", from = "{db}/postgres", '
                f'file = "srv/{node}/m{i}.password" }}]', ""]  # fmt: skip
    path = root / "mesh.toml"
    path.write_text("\n".join(out))
    return path


def pg_own_alter(cluster: Cluster, logins: list[str]) -> float:
    """PostgreSQL's own cost of the same password changes: ``ALTER ROLE`` on every login the
    rotation changed, in one transaction (run after it, on the mesh's own roles)."""
    with psycopg.connect(cluster.admin_conninfo(), autocommit=True) as conn:
        t0 = time.perf_counter()
        with conn.transaction():
            conn.execute(QUIET)
            for login in logins:
                conn.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(
                    sql.Identifier(login), sql.Literal(secrets.token_urlsafe(32))))  # fmt: skip
        return time.perf_counter() - t0


def fresh(
    state: Path, what: str, rows: list[tuple[str, float, str]], decl: Path | None = None,
    trace: bool = False, old: bool = False, label: str = "",
) -> None:  # fmt: skip
    """Run one controller step (``declare``, ``push``, ``rotate-all``) in a fresh process, as
    an operator's command runs: its own peak RSS, not the peak of every step before it."""
    import json

    argv = [sys.executable, str(Path(__file__).with_name("controller_step.py")), what, str(state)]
    argv += [*(["--decl", str(decl)] if decl else []), *(["--trace"] if trace else [])]
    argv += ["--old"] if old else []
    what = (label or what) + (" (old path)" if old else "")
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed: {done.stderr[-3000:]}")
    got = json.loads(done.stdout.strip().splitlines()[-1])
    for line in done.stderr.splitlines():  # --trace: the peak of each phase
        if line.startswith("# "):
            print(f"    {line[2:]}")
    traced = f", traced peak {got['traced']:.1f} MiB" if got["traced"] is not None else ""
    note = f"fresh process: {got['imported']:.0f} MiB after imports{traced}"
    rows.append((what, got["took"], note))
    print(f"  {what:<26}{got['took'] * 1000:>12.1f} ms  peak RSS {got['peak']:4.0f} MiB  {note}",
          flush=True)  # fmt: skip


def timed(what: str, fn, rows: list[tuple[str, float, str]], note: str = "") -> object:  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    out = fn()
    took = time.perf_counter() - t0
    rows.append((what, took, note))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"  {what:<26}{took * 1000:>12.1f} ms  peak RSS so far {peak:4.0f} MiB  {note}", flush=True
    )
    return out


def start_fleet(
    base: Path, root: Path, decl: Path, admin: Path, pub: Path, nodes: int
) -> subprocess.Popen[bytes]:
    """Every node the declaration names given its keys and a policy allowing the mesh, then
    the one process serving them all (``--serve``), returned once each node's agent answers;
    its log is ``base/fleet.log``."""
    for line in decl.read_text().splitlines():
        if line.startswith("[nodes."):
            name = line[len("[nodes.") : -1]
            identity.init(name, root / "nodes" / name, pub)
            node_policy.write(root / "nodes" / name, mesh_policy(name, root, admin=(str(admin),)))
    log = open(base / "fleet.log", "ab")  # noqa: SIM115
    fleet = subprocess.Popen([sys.executable, __file__, "--serve", str(root)], stdout=log,
                             stderr=log, stdin=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 120
    while (
        not all(agent_answers(s) for s in (root / "run").glob("*.sock"))
        or len(list((root / "run").glob("*.sock"))) < nodes
    ):
        if time.monotonic() > deadline or fleet.poll() is not None:
            raise RuntimeError((base / "fleet.log").read_text()[-2000:])
        time.sleep(0.2)
    return fleet


@dataclass(frozen=True)
class Raised:
    """A mesh :func:`raised`: its folder, the providers' PostgreSQL, the controller's state
    folder and the declaration (not declared yet)."""

    base: Path
    cluster: Cluster
    state: Path
    decl: Path


@contextmanager
def raised(
    prefix: str, nodes: int, providers: int, pairs: int, pin: bool = False,
    inventory: Path | None = None,
) -> Iterator[Raised]:  # fmt: skip
    """A mesh of real agents (:func:`start_fleet`) and a PostgreSQL for its providers, in a
    new folder; ``inventory``: the controller's inventory on the PostgreSQL that conninfo file
    names (an empty database) instead of SQLite. Everything stopped and removed after."""
    base = Path(tempfile.mkdtemp(prefix=prefix))
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
        if inventory is not None:
            save(state, ControllerConfig(name="bench", postgres=inventory))
        decl = declaration(root, cluster.port, admin, nodes, providers, pairs, pin)
        fleet = start_fleet(base, root, decl, admin, pub, nodes)
        yield Raised(base, cluster, state, decl)
    finally:
        if fleet is not None:
            fleet.terminate()
            fleet.wait(30)
        stop_cluster(cluster)
        shutil.rmtree(base, ignore_errors=True)


def run(
    nodes: int,
    providers: int,
    pairs: int,
    probe: bool = True,
    pin: bool = False,
    rotate_all: bool = True,
    demo_repeat: int = 0,
    in_process: bool = False,
    trace: bool = False,
    beside_old: bool = False,
) -> list[tuple[str, float, str]]:
    rows: list[tuple[str, float, str]] = []
    with raised("meshtui-benchscale-", nodes, providers, pairs, pin) as mesh:
        base, cluster, state, decl = mesh.base, mesh.cluster, mesh.state, mesh.decl
        print(
            f"{nodes} nodes ({providers} providers{', pin = true' if pin else ''}), {pairs} pairs;"
            f" load {os.getloadavg()[0]:.1f}"
        )
        with Controller.open(state) as ctl:
            if in_process:
                timed("declare", lambda: ctl.declare(decl), rows)
            else:
                fresh(state, "declare", rows, decl, trace)
            with Agents(ctl.inventory.nodes(), ctl.keys(), sequence=ctl.sequence) as agents:
                names = list(ctl.inventory.nodes())
                timed("state round trip, all", lambda: ask_state(agents, names), rows,
                      "baseline: one round trip per node in parallel")  # fmt: skip
            if in_process:
                report = timed("push", ctl.push, rows)
                assert report.ok, report  # type: ignore[attr-defined]
            else:
                fresh(state, "push", rows, trace=trace)
            own = pg_create_all(cluster, pairs)
            rows.append(("pg own: create, one txn", own, "baseline for push"))
            print(f"  {'pg own: create, one txn':<26}{own * 1000:>12.1f} ms")
            timed("status", ctl.status, rows, "one-shot, as the CLI reads (kept: --status-only)")
            if not in_process:  # every end held: what a routine push (or watch's) holds
                fresh(state, "push", rows, trace=trace, label="push again, converged")
            if probe:
                timed("probe", ctl.probe, rows)
            one = ctl.live_pairs()[0]
            for turn in range(3):  # the first may still find a provider's block unverified
                timed(f"rotate one ({turn + 1})", lambda: ctl.rotate([one]), rows)
            if demo_repeat:
                rotate_beside_demo(base, ctl, one, pin, demo_repeat, rows)
            if rotate_all:
                if in_process:
                    timed("rotate all", lambda: ctl.rotate(ctl.live_pairs()), rows)
                else:
                    if beside_old:  # the same rotation, every payload built and signed at once
                        fresh(state, "rotate-all", rows, trace=trace, old=True)
                    fresh(state, "rotate-all", rows, trace=trace)
                logins = [r.login for r in ctl.status()]
                alter = pg_own_alter(cluster, logins)
                rows.append(("pg own: alter, one txn", alter, "baseline for rotate all"))
                print(f"  {'pg own: alter, one txn':<26}{alter * 1000:>12.1f} ms  "
                      "baseline for rotate all")  # fmt: skip
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        rows.append(("controller peak RSS (MiB)", peak / 1000, ""))
        print(f"  controller peak RSS {peak:.0f} MiB; load {os.getloadavg()[0]:.1f}")
        return rows


ROTATE_GOAL = 1.3
"""Rotate one pair among 10,000 against the same in the demo mesh."""


def rotate_beside_demo(
    base: Path,
    ctl: Controller,
    one: str,
    pin: bool,
    repeat: int,
    rows: list[tuple[str, float, str]],
) -> None:
    """Rotate one pair of this mesh and one of the demo mesh (5 pairs, its own PostgreSQL and
    agents, ``pin`` the same) in turn, ``repeat`` times each after two warm-ups, so a moment of
    noise on a shared machine falls on both; p50 of each and their ratio."""
    demo_pid = "database:app1/gitea->db1/postgres"
    runs: tuple[list[float], list[float]] = ([], [])
    with lab(base / "demo", {}, [], pin) as demo:
        for n in range(repeat + 2):
            for c, pid, out in ((demo.ctl, demo_pid, runs[0]), (ctl, one, runs[1])):
                t0 = time.perf_counter()
                report = c.rotate([pid])
                took = time.perf_counter() - t0
                assert report.outcome == "done", report
                if n >= 2:
                    out.append(took)
    alone, among = p50_ms(runs[0]), p50_ms(runs[1])
    rows.append(("rotate one, demo mesh p50", alone / 1000, ""))
    rows.append(("rotate one, this mesh p50", among / 1000, ""))
    print(f"  {'rotate one, demo mesh':<26}{alone:>12.1f} ms  p50 of {repeat}, in turn with:")
    print(f"  {'rotate one, this mesh':<26}{among:>12.1f} ms  p50 of {repeat}: {among / alone:.2f}x"
          f" the demo mesh (goal <= {ROTATE_GOAL}x); load {os.getloadavg()[0]:.1f}")  # fmt: skip


ONE_SHOT_BEFORE = "one-shot, every pair (before)"
"""The one-shot reader as it read before the status image: every pair read and made."""
STATUS_GOAL = 0.050
"""``status`` at 10,000 pairs, first read after a change."""


def _median(fn, repeat: int) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """Median wall and CPU seconds of ``repeat`` calls (CPU: this process, so a busy shared
    machine shows in wall but much less in CPU)."""
    walls, cpus = [], []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return statistics.median(walls), statistics.median(cpus)


def _delivered(ctl: Controller) -> None:
    """Both ends of every pair hold its generation, as a clean push leaves them."""
    stamp = now()
    rows = [
        DeliveryRow(
            pair=p["id"],
            end=end,
            generation=p["generation"],
            digest=None,
            since=stamp,
            attempted_at=stamp,
            error=None,
        )
        for p in ctl.inventory.pairs()
        for end in ("provider", "consumer")
    ]
    with ctl.inventory.transaction("bench rows") as tx:
        tx.put_deliveries(rows)


def _probed(ctl: Controller, rounds: int) -> None:
    """``rounds`` accepted probes of every pair, as probe (or watch) leaves them."""
    for _ in range(rounds):
        stamp = now()
        rows = [
            ProbeRecord(
                pair=p["id"],
                at=stamp,
                generation=p["generation"],
                verdict="accepted",
                reason="logged in",
                latency_ms=2.5,
                used_password=1,
                loopback=1,
                client_addr="127.0.0.1",
                control=None,
                withdrawn=0,
            )
            for p in ctl.inventory.pairs()
        ]
        with ctl.inventory.transaction("bench rows") as tx:
            tx.add_probes(rows)


def _touched(ctl: Controller, first: PairRow) -> None:
    """One delivery recorded again, as a push or rotation does: a change every reader sees."""
    stamp = now()
    with ctl.inventory.transaction("bench rows") as tx:
        tx.put_deliveries([DeliveryRow(pair=first["id"], end="consumer",
                                       generation=first["generation"], digest=None, since=stamp,
                                       attempted_at=stamp, error=None)])  # fmt: skip


def status_only(nodes: int, providers: int, pairs: int, repeat: int, rounds: int) -> None:
    """``status`` alone on an inventory of ``pairs`` pairs, delivered, then probed: the first
    read after a change, ``repeat`` times for each reader in turn (each after a change of its
    own): the kept reader (``watch``: what it made kept, only the pairs written since read and
    made), the one-shot reader (the CLI: every pair read and made, nothing kept: the path every
    read takes without the image), and the bare ``SELECT`` of the pairs table as the floor."""
    base = Path(tempfile.mkdtemp(prefix="meshtui-benchstatus-"))
    try:
        root = base / "mesh"
        state = root / "state"
        pub, _ = init_keys(state)
        decl = declaration(root, 5432, base / "admin.conninfo", nodes, providers, pairs)
        for line in decl.read_text().splitlines():
            if line.startswith("[nodes."):
                name = line[len("[nodes.") : -1]
                identity.init(name, root / "nodes" / name, pub)
        with Controller.open(state) as ctl:
            ctl.declare(decl)
            _delivered(ctl)
            first = ctl.inventory.pairs()[0]
            conn = ctl.inventory._db.conn
            floor_sql = "SELECT * FROM pairs ORDER BY id"

            def imaged() -> list[PairStatus]:
                with Controller.open(state, read_only=True) as fresh:  # as the CLI opens it
                    return fresh.status()

            readers = {
                "kept (watch)": lambda: ctl.status(keep=True),
                "one-shot (CLI), status image": imaged,
                ONE_SHOT_BEFORE: lambda: status_mod.statuses(ctl.inventory),
            }
            print(f"{pairs} pairs, {nodes} nodes; first read after a change, {repeat} each, "
                  f"in turn; load {os.getloadavg()[0]:.2f}")  # fmt: skip
            print(f"  {'':<50}{'p50 ms':>8}{'min ms':>8}{'cpu ms':>8}{'x goal':>8}"
                  f"{'x 1-shot':>9}{'x floor':>8}")  # fmt: skip
            for label, prepare in (
                ("pushed, never probed", lambda: None),
                (f"probed x{rounds}", lambda: _probed(ctl, rounds)),
            ):
                prepare()
                cold = []
                for _ in range(3):  # no image (the first read ever): read whole, image written
                    (state / IMAGE).unlink(missing_ok=True)
                    t0 = time.perf_counter()
                    imaged()
                    cold.append(time.perf_counter() - t0)
                ctl.status(keep=True)  # the kept reader has read every pair once
                walls: dict[str, list[float]] = {how: [] for how in readers}
                cpus: dict[str, list[float]] = {how: [] for how in readers}
                for _ in range(repeat):
                    for how, read in readers.items():
                        _touched(ctl, first)  # the change this first read comes after
                        t0, c0 = time.perf_counter(), time.process_time()
                        got = len(read())
                        walls[how].append(time.perf_counter() - t0)
                        cpus[how].append(time.process_time() - c0)
                        assert got == pairs, got
                floor, _ = _median(lambda: conn.execute(floor_sql).fetchall(), repeat)
                one_shot = statistics.median(walls[ONE_SHOT_BEFORE])
                for how in readers:
                    took = statistics.median(walls[how])
                    print(f"  {label + ', ' + how:<50}{took * 1000:>8.1f}"
                          f"{min(walls[how]) * 1000:>8.1f}"
                          f"{statistics.median(cpus[how]) * 1000:>8.1f}{took / STATUS_GOAL:>8.2f}"
                          f"{took / one_shot:>9.3f}{took / floor:>8.2f}")  # fmt: skip
                print(f"  {label + ', bare SELECT (floor)':<50}{floor * 1000:>8.1f}")
                print(f"  {label + ', one-shot, no image yet':<50}"
                      f"{statistics.median(cold) * 1000:>8.1f}{min(cold) * 1000:>8.1f}"
                      "  (3 reads: every pair read, the image written)")  # fmt: skip
            print(f"  load {os.getloadavg()[0]:.2f}")
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--providers", type=int, default=4)
    ap.add_argument("--pairs", type=int, default=10000)
    ap.add_argument("--skip-probe", action="store_true", help="leave out the probe step")
    ap.add_argument("--pin", action="store_true", help="every provider declares pin = true")
    ap.add_argument("--skip-rotate-all", action="store_true", help="leave out rotate all")
    ap.add_argument("--beside-demo", type=int, default=0, metavar="N",
                    help="rotate one pair N times in turn with the demo mesh's (side by side)")  # fmt: skip
    ap.add_argument("--status-only", action="store_true",
                    help="only status, on an inventory built without agents (seconds)")  # fmt: skip
    ap.add_argument("--repeat", type=int, default=15, help="reads per --status-only figure")
    ap.add_argument("--rounds", type=int, default=3, help="probes per pair for --status-only")
    ap.add_argument("--in-process", action="store_true",
                    help="declare, push and rotate all in this process (peak RSS so far)")  # fmt: skip
    ap.add_argument("--trace", action="store_true", help="tracemalloc's peak of each fresh step")
    ap.add_argument("--beside-old", action="store_true",
                    help="rotate all first as before batches (controller_step.py --old), then as now")  # fmt: skip
    ap.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve:
        serve(args.serve)
        return 0
    if args.status_only:
        status_only(args.nodes, args.providers, args.pairs, args.repeat, args.rounds)
        return 0
    run(args.nodes, args.providers, args.pairs, probe=not args.skip_probe, pin=args.pin,
        rotate_all=not args.skip_rotate_all, demo_repeat=args.beside_demo,
        in_process=args.in_process, trace=args.trace, beside_old=args.beside_old)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
