"""Rotation at the server's speed: one pair, one pair among 1,000 others, 1,000 pairs, 1,000 new.

Real agents (``meshtui host serve`` processes on Unix sockets), the embedded PostgreSQL (scram
only, loopback: a rotation logs nobody in, so no namespace is needed) and the built-in
provisioner, in one process with its baselines:

1. rotate one pair end to end in the demo mesh (5 pairs on db1/postgres), p50 of ``--repeat``;
2. the same pair with ``--others`` more pairs on the same provider (goal: <= 1.2x of 1). Rows 1
   and 2 run side by side: two meshes, each with its own PostgreSQL, agents and controller, one
   rotation in each in turn, so a moment of noise on this shared machine falls on both;
3. rotate those ``--others`` pairs all-or-nothing, against PostgreSQL's own cost of the same
   verifier changes in one transaction (``ALTER ROLE ... PASSWORD`` of the plaintext, so the
   server hashes, as the issue measured it; the write alone with verifiers computed before is
   printed too; on logins of its own, so the mesh's are not changed outside meshtui)
   (goal: <= 1.5x);
4. push ``--others`` new pairs, against PostgreSQL's own cost of creating those roles with
   their passwords in one transaction (goal: <= 1.5x).

Rows 3 and 4 also print their honest floor: the baseline plus the durable files meshtui must
write and the baseline does not (a credential file per consumer in its own folder, a secret
file per login beside the manifest), measured alone; and this side's verifier hashing alone,
which overlaps the server's own PBKDF2 of each verifier rather than adding to it.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_rotate.py [--repeat 15] [--others 1000]

The pinned row, before and after side by side (a third mesh whose provider agent runs an
older revision's code, rotated in the same turns; ``--profile`` adds where the time goes):

    PYTHONPATH=. .venv/bin/python benchmarks/bench_rotate.py --pin --others 10000 --repeat 11 \
        --before 80d3c6b --profile
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
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql

from meshtui import folders
from meshtui.atomic import PRIVATE, write_at, write_many_at
from meshtui.controller.agents.client import Agents
from meshtui.controller.core import Controller, init_keys
from meshtui.controller.plan.resolve import ask_state
from meshtui.errors import LabError
from meshtui.host.policy import node_policy
from meshtui.host.receive.delivery import CONSUMER_WRITERS
from meshtui.host.state import identity
from meshtui.kinds.postgres.lab import Cluster, create_cluster
from meshtui.kinds.postgres.scram import VerifiersAhead, scram_verifier
from tests.fix_agents import Mesh, mesh_policy
from tests.fix_pg import free_port

PUSH_TRIES = 6
PUSH_WAIT_S = 60.0
DEMO = {"app1": ["gitea", "keycloak", "grafana"], "app2": ["wiki", "gitea"]}
QUIET = (
    "SELECT set_config('log_statement', 'none', true),"
    " set_config('log_min_error_statement', 'panic', true)"
)


def declaration(
    root: Path, port: int, admin: Path, bulk: dict[str, int], pin: bool = False
) -> Path:
    """The demo mesh (each consumer with its database) plus ``bulk`` nodes of plain logins;
    ``pin``: the provider declares ``pin = true`` (every login confined in pg_hba.conf)."""
    nodes = ["db1", *DEMO, *bulk]
    out: list[str] = []
    for node in nodes:
        out += [
            f"[nodes.{node}]",
            'address = "127.0.0.1"',
            f'agent = "unix:{root}/run/{node}.sock"',
            f'keys = "nodes/{node}/node.pub"',
            "",
        ]
    out += [
        '[modules."db1/postgres"]',
        f'provides = [{{ name = "database", port = {port} }}]',
        'receives = { database = "srv/db1/postgres/mesh.json" }',
        'grants = { database = "srv/db1/postgres/grants" }',
        f'admin = "{admin}"',
        *(["pin = true"] if pin else []),
        "",
    ]
    for node, modules in DEMO.items():
        for m in modules:
            out += [
                f'[modules."{node}/{m}"]',
                f'requires = [{{ name = "database", values = {{ database = "{m}_{node}" }}, '
                f'file = "srv/{node}/{m}/db.password" }}]',
                "",
            ]
    for node, count in bulk.items():
        for i in range(count):
            out += [
                f'[modules."{node}/m{i}"]',
                f'requires = [{{ name = "database", file = "srv/{node}/m{i}/db.password" }}]',
                "",
            ]
    path = root / "mesh.toml"
    path.write_text("\n".join(out))
    return path


def p50_ms(runs: list[float]) -> float:
    return statistics.median(runs) * 1000.0


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def rotate_in_turn(*ctls: Controller, pid: str, repeat: int) -> list[list[float]]:
    """``pid`` rotated in each mesh in turn, ``repeat`` times each (after two warm-ups)."""
    runs: list[list[float]] = [[] for _ in ctls]
    for n in range(repeat + 2):
        for ctl, out in zip(ctls, runs, strict=True):
            t0 = time.perf_counter()
            report = ctl.rotate([pid])
            took = time.perf_counter() - t0
            assert report.outcome == "done", report
            if n >= 2:
                out.append(took)
    return runs


@dataclass
class Lab:
    """One benchmark mesh: its own PostgreSQL, node keys, agents and controller."""

    root: Path
    cluster: Cluster
    admin: Path
    mesh: Mesh
    ctl: Controller


@contextmanager
def lab(
    base: Path,
    bulk: dict[str, int],
    extra: list[str],
    pin: bool = False,
    provider_code: Path | None = None,
) -> Iterator[Lab]:
    """A mesh under ``base``: the demo pairs plus ``bulk``, declared and pushed; ``extra``
    nodes are made (keys, agents) for a later declaration to use; ``pin`` as in
    :func:`declaration`; ``provider_code``: a folder holding another revision's ``meshtui``
    package, which the provider's agent (db1) runs instead of this one."""
    base.mkdir()
    base.chmod(0o711)
    cluster = create_cluster(base / "data", port=free_port())
    mesh: Mesh | None = None
    try:
        cluster.start()
        admin = cluster.write_admin_file(base / "admin.conninfo")
        root = base / "mesh"
        root.mkdir()
        root.chmod(0o711)
        state = root / "state"
        pub, _ = init_keys(state)
        nodes = {n: root / "nodes" / n for n in ["db1", *DEMO, *bulk, *extra]}
        for node, folder in nodes.items():
            identity.init(node, folder, pub)
            node_policy.write(folder, mesh_policy(node, root, admin=(str(admin),)))
        mesh = Mesh(root=root, state=state, decl=root / "mesh.toml", nodes=nodes,
                    sockets={n: root / "run" / f"{n}.sock" for n in nodes})  # fmt: skip
        if provider_code is not None:
            mesh.wrap["db1"] = ["env", f"PYTHONPATH={provider_code}"]
        for node in nodes:
            mesh.start(node)
        with Controller.open(state) as ctl:
            ctl.declare(declaration(root, cluster.port, admin, bulk, pin))
            for attempt in range(PUSH_TRIES):  # a push converges: one that failed on a busy
                pushed = ctl.push()  # machine (a timeout) is finished by a later one, once the
                if pushed.ok:  # agent is done with the first (busy until then)
                    break
                print(f"warning: push {attempt + 1} not ok: {pushed}"[:300], file=sys.stderr)
                time.sleep(PUSH_WAIT_S)
            else:
                raise SystemExit(f"{base}: the mesh could not be pushed")
            yield Lab(root, cluster, admin, mesh, ctl)
    finally:
        if mesh is not None:
            for node in list(mesh.procs):
                mesh.stop(node)
        stop_cluster(cluster)


def stop_cluster(cluster: Cluster) -> None:
    """Stop a benchmark's PostgreSQL, three tries (a busy machine can be slow to let go)."""
    for attempt in range(3):
        try:
            cluster.stop()
            return
        except LabError as exc:
            print(f"warning: {exc} (attempt {attempt + 1})", file=sys.stderr)


def floor_ms(ctl: Controller, cluster: Cluster, login: str, repeat: int) -> tuple[float, float]:
    """What no rotation of one pair can go below, p50 each: a signed brief ``state`` round
    trip to both ends (a rotation makes three such trips one after another: resolve, provider,
    consumer), and PostgreSQL's own commit of one new verifier (computed beforehand)."""
    trips, commits = [], []
    with Agents(ctl.inventory.nodes(), ctl.keys(), sequence=ctl.sequence) as agents:
        for _ in range(repeat):
            t0 = time.perf_counter()
            ask_state(agents, ["db1", "app1"], listing=False)
            trips.append(time.perf_counter() - t0)
    with psycopg.connect(cluster.admin_conninfo(), autocommit=True) as conn:
        for _ in range(repeat):
            verifier = scram_verifier(secrets.token_urlsafe(32))
            t0 = time.perf_counter()
            with conn.transaction():
                conn.execute(QUIET)
                conn.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(
                    sql.Identifier(login), sql.Literal(verifier)))  # fmt: skip
            commits.append(time.perf_counter() - t0)
    return p50_ms(trips), p50_ms(commits)


def fsync_ms(folder: Path, repeat: int) -> float:
    """p50 of one small write + fsync on the filesystem the agents write to: a rotation's
    durable writes (journal commit, each request's guard line, secret + manifest, credential)
    each cost at least one."""
    path = folder / ".bench-fsync"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    runs = []
    try:
        for _ in range(repeat):
            os.write(fd, b"x" * 64)
            t0 = time.perf_counter()
            os.fsync(fd)
            runs.append(time.perf_counter() - t0)
    finally:
        os.close(fd)
        path.unlink()
    return p50_ms(runs)


def manifest_ms(manifest: Path, repeat: int) -> float:
    """p50 of reading and parsing the provider's manifest once (a delta's merge on the node and
    the provisioner's scoped load each do it: the part of a one-pair rotation that still grows
    with the provision's size)."""
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        json.loads(manifest.read_bytes())
        runs.append(time.perf_counter() - t0)
    return p50_ms(runs)


def checkout(rev: str, into: Path) -> Path:
    """The ``meshtui`` package of git revision ``rev`` of this repository, under ``into``."""
    repo = Path(__file__).resolve().parents[1]
    into.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(repo), "archive", rev, "meshtui"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    into.chmod(0o755)
    return into


def agent_times(log: Path, since: int) -> dict[str, list[float]]:
    """Each request kind's own time in an agent, in ms, from its log lines after ``since``
    bytes (the agent logs every request with the time it took to answer it)."""
    times: dict[str, list[float]] = {}
    for line in log.read_bytes()[since:].decode(errors="replace").splitlines():
        words = line.split("meshtui agent: ", 1)[-1]
        if ": ok (" in words and words.endswith(" ms)"):
            kind, took = words.split(": ok (", 1)
            times.setdefault(kind, []).append(float(took[: -len(" ms)")]))
    return times


def profile_rotations(labs: dict[str, Lab], pid: str, repeat: int) -> None:
    """Where one rotation's time goes in both meshes: each agent's own time per request
    (provider db1, consumer app1; p50 from their logs) and the controller's CPU by function
    (cProfile of the rotations among others, cumulative, top 20)."""
    import cProfile
    import pstats

    for name, one in labs.items():
        logs = {n: one.root / f"{n}.agent.log" for n in ("db1", "app1")}
        marks = {n: p.stat().st_size for n, p in logs.items()}
        prof = cProfile.Profile()
        walls = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            prof.enable()
            assert one.ctl.rotate([pid]).outcome == "done"
            prof.disable()
            walls.append(time.perf_counter() - t0)
        said = []
        for node, log in logs.items():
            for kind, ms in agent_times(log, marks[node]).items():
                said.append(f"{node} {kind} p50 {statistics.median(ms):.0f} ms x{len(ms)}")
        print(f"   profile {name}: rotation p50 {p50_ms(walls):.1f} ms (profiled); agents' own "
              f"time: {'; '.join(said)}")  # fmt: skip
        if name == "among":
            pstats.Stats(prof).sort_stats("cumulative").print_stats(20)


def pg_alter_all(cluster: Cluster, count: int, *, precomputed: bool) -> float:
    """PostgreSQL's own cost: new passwords for ``count`` logins in one transaction (quiet).

    The logins are its own, made (untimed) and dropped here: altering the mesh's would be a
    change outside meshtui, which the next push finds and repairs, and would then time too.
    """
    logins = [f"bench_alter_{os.getpid()}_{i}" for i in range(count)]
    with psycopg.connect(cluster.admin_conninfo(), autocommit=True) as conn:
        with conn.transaction():
            conn.execute(QUIET)
            for login in logins:
                conn.execute(
                    sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                        sql.Identifier(login),
                        sql.Literal(scram_verifier(secrets.token_urlsafe(32))),
                    )
                )
        passwords = [secrets.token_urlsafe(32) for _ in logins]
        t0 = time.perf_counter()
        values = [scram_verifier(p) for p in passwords] if precomputed else passwords
        with conn.transaction():
            conn.execute(QUIET)
            for login, value in zip(logins, values, strict=True):
                conn.execute(
                    sql.SQL("ALTER ROLE {} PASSWORD {}").format(
                        sql.Identifier(login), sql.Literal(value)
                    )
                )
        took = time.perf_counter() - t0
        with conn.transaction():
            for login in logins:
                conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(login)))
    return took


def pg_create_all(cluster: Cluster, count: int) -> float:
    """PostgreSQL's own cost: ``count`` new login roles with passwords in one transaction."""
    logins = [f"bench_new_{os.getpid()}_{i}" for i in range(count)]
    with psycopg.connect(cluster.admin_conninfo(), autocommit=True) as conn:
        t0 = time.perf_counter()
        with conn.transaction():
            conn.execute(QUIET)
            for login in logins:
                conn.execute(
                    sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                        sql.Identifier(login), sql.Literal(secrets.token_urlsafe(32))
                    )
                )
        took = time.perf_counter() - t0
        with conn.transaction():
            for login in logins:
                conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(login)))
    return took


def files_alone(folder: Path, count: int) -> float:
    """The durable file writes a bulk delivery cannot skip, alone, as the agents make them:
    ``count`` credential files, each in its own folder (opened from ``/`` and checked, file and
    folder fsynced, ``CONSUMER_WRITERS`` at once), and ``count`` secret files beside one manifest
    (fsynced together, one folder fsync). Run it again on the same folder for a rotation."""
    grants = folder / "grants"
    t0 = time.perf_counter()

    def credential(i: int) -> None:
        where = folders.open_folder(folder / f"m{i}", create=0o755)
        assert where is not None
        with where:
            write_at(where.fd, "db.password", secrets.token_urlsafe(32).encode())

    with ThreadPoolExecutor(max_workers=CONSUMER_WRITERS) as pool:
        list(pool.map(credential, range(count)))
    kept = folders.open_folder(grants, create=0o700, own=True)
    assert kept is not None
    with kept:
        made = {f"n.m{i}.secret": secrets.token_urlsafe(32).encode() for i in range(count)}
        write_many_at(kept.fd, made, access=PRIVATE)
    return time.perf_counter() - t0


def verifiers_alone(count: int) -> float:
    """This side's PBKDF2 for ``count`` verifiers on the provisioner's worker threads (the rule:
    the server is sent a verifier, never the password). It overlaps the server's own PBKDF2 of
    each verifier (its empty-password check), so it is CPU beside the floor, not on top of it."""
    passwords = [secrets.token_urlsafe(32) for _ in range(count)]
    t0 = time.perf_counter()
    with VerifiersAhead(passwords, iterations=4096, workers=min(4, os.cpu_count() or 1)) as made:
        for _ in passwords:
            made.take()
    return time.perf_counter() - t0


def bulk_floor(rows: list[tuple[str, float, float, float, float]], what: str, ours: float,
               baseline: float, written: float, hashed: float) -> None:  # fmt: skip
    """Print and add the honest floor of a bulk row: PostgreSQL's own cost plus the durable
    files meshtui must write and the baseline does not (measured alone)."""
    floor = baseline + written
    print(f"   floor: PostgreSQL's own {baseline:.2f} s + files alone {written:.2f} s = "
          f"{floor:.2f} s; {what} / floor {ours / floor:.2f} (client-side verifiers alone "
          f"{hashed:.2f} s, overlapping the server's)")  # fmt: skip
    rows.append(("  floor: baseline + files (s)", ours, floor, ours / floor, 0.0))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--others", type=int, default=1000)
    ap.add_argument(
        "--one", action="store_true", help="only 1 and 2 (one pair, alone and among others)"
    )
    ap.add_argument(
        "--pin",
        action="store_true",
        help="both meshes' provider declares pin = true (implies --one; goal for 2: <= 1.15x)",
    )
    ap.add_argument(
        "--before",
        metavar="REV",
        help="with --one/--pin: a third mesh like 2's whose provider agent runs git revision "
        "REV's code (e.g. 80d3c6b, before the manifest's delta was merged by place), rotated in "
        "the same turns: before and after side by side",
    )
    ap.add_argument(
        "--profile",
        action="store_true",
        help="after 2: profile rotations among others (the controller's CPU by function, and "
        "each agent's own time per request from its log: the agent side against the rest)",
    )
    args = ap.parse_args(argv)
    args.one = args.one or args.pin
    pinned = ", pin = true" if args.pin else ""
    base = Path(tempfile.mkdtemp(prefix="meshtui-benchrot-"))
    base.chmod(0o711)
    rows: list[tuple[str, float, float, float, float]] = []  # what, ours, base, ratio, goal
    pid = "database:app1/gitea->db1/postgres"
    try:
        with ExitStack() as stack:
            demo_lab = stack.enter_context(lab(base / "demo", {}, [], args.pin))
            among_lab = stack.enter_context(
                lab(base / "among", {"bulk1": args.others}, ["bulk2"], args.pin)
            )
            old_lab = None
            if args.before:
                code = checkout(args.before, base / "before-code")
                old_lab = stack.enter_context(
                    lab(base / "before", {"bulk1": args.others}, [], args.pin, code)
                )
            load = os.getloadavg()
            ctls = [demo_lab.ctl, among_lab.ctl] + ([old_lab.ctl] if old_lab else [])
            one, many, *old = rotate_in_turn(*ctls, pid=pid, repeat=args.repeat)
            demo, among = p50_ms(one), p50_ms(many)
            print(f"1. rotate one pair, demo mesh (5 pairs{pinned}): p50 {demo:.1f} ms "
                  f"(min {min(one) * 1000:.1f}, max {max(one) * 1000:.1f}; {args.repeat} runs)")  # fmt: skip
            rows.append((f"rotate one, demo mesh{pinned} (ms)", demo, 40.0, demo / 40.0, 1.0))
            ctl, cluster, root = demo_lab.ctl, demo_lab.cluster, demo_lab.root
            (other,) = ctl.inventory.pairs(["database:app2/wiki->db1/postgres"])
            trip, commit = floor_ms(ctl, cluster, other["login"], args.repeat)
            sync = fsync_ms(root, args.repeat)
            floor = 3 * trip + commit
            print(f"   floor: brief state round trip to both ends p50 {trip:.1f} ms (x3 = "
                  f"{3 * trip:.1f}), one verifier commit p50 {commit:.1f} ms: {floor:.1f} ms; "
                  f"rotation / floor {demo / floor:.2f}")  # fmt: skip
            print(f"   fsync on this filesystem p50 {sync:.2f} ms; a rotation waits on at least "
                  f"7 in sequence (journal commit; provider: its guard line with the audit "
                  f"head, secret + manifest with their folder; consumer: its guard line, the "
                  f"credential and its folder -- the last three inside the window): "
                  f"{7 * sync:.1f} ms")  # fmt: skip
            rows.append(("  floor: 3 trips + 1 commit (ms)", demo, floor, demo / floor, 0.0))

            print(f"2. the same pair with {args.others} others (its turn after each of 1's): "
                  f"p50 {among:.1f} ms (min {min(many) * 1000:.1f}, max {max(many) * 1000:.1f})")  # fmt: skip
            ctl, cluster, root, admin = (
                among_lab.ctl, among_lab.cluster, among_lab.root, among_lab.admin
            )  # fmt: skip
            parse = manifest_ms(root / "srv/db1/postgres/mesh.json", args.repeat)
            print(f"   floor: the {args.others + 5}-consumer manifest read + parsed once p50 "
                  f"{parse:.1f} ms (a delta's merge and the scoped provisioner each read it; "
                  f"the node writes it whole again)")  # fmt: skip
            if args.profile:
                profile_rotations(
                    {
                        "demo": demo_lab,
                        "among": among_lab,
                        **({"before": old_lab} if old_lab else {}),
                    },
                    pid,
                    args.repeat,
                )
            goal = 1.15 if args.pin else 1.2
            if args.pin and args.others >= 10000:
                goal = 1.3  # one pinned provider holding 10,000
            rows.append(
                (f"rotate one among {args.others}{pinned} (ms)", among, demo, among / demo, goal)
            )
            if old:
                before = p50_ms(old[0])
                print(f"2b. the same, its provider agent at {args.before} (in the same turns): "
                      f"p50 {before:.1f} ms (min {min(old[0]) * 1000:.1f}, max "
                      f"{max(old[0]) * 1000:.1f})")  # fmt: skip
                rows.append((f"  before: provider at {args.before} (ms)", before, demo,
                             before / demo, goal))  # fmt: skip
            if args.one:
                return _table(rows, load)

            bulk = [p for p in ctl.live_pairs() if "bulk1/" in p]
            t0 = time.perf_counter()
            assert ctl.rotate(bulk).outcome == "done"
            ours = time.perf_counter() - t0
            server = pg_alter_all(cluster, len(bulk), precomputed=False)
            write = pg_alter_all(cluster, len(bulk), precomputed=True)
            print(f"3. rotate {len(bulk)} pairs: {ours:.2f} s; PostgreSQL's own (plaintext, one "
                  f"transaction) {server:.2f} s; verifiers computed first + one transaction "
                  f"{write:.2f} s")  # fmt: skip
            rows.append((f"rotate {len(bulk)} pairs (s)", ours, server, ours / server, 1.5))
            scratch = base / "files-alone"
            files_alone(scratch, args.others)  # the files exist, as in a rotation
            bulk_floor(rows, "rotation", ours, server, files_alone(scratch, args.others),
                       verifiers_alone(len(bulk)))  # fmt: skip
            shutil.rmtree(scratch)

            ctl.declare(
                declaration(root, cluster.port, admin, {"bulk1": args.others, "bulk2": args.others})
            )
            pushed = timed(lambda: ctl.push())
            created = pg_create_all(cluster, args.others)
            print(f"4. push {args.others} new pairs: {pushed:.2f} s; PostgreSQL's own CREATE ROLE "
                  f"... PASSWORD in one transaction {created:.2f} s")  # fmt: skip
            rows.append(
                (f"push {args.others} new pairs (s)", pushed, created, pushed / created, 1.5)
            )
            fresh = files_alone(base / "files-new", args.others)
            bulk_floor(rows, "push", pushed, created, fresh, verifiers_alone(args.others))
        return _table(rows, load)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _table(rows: list[tuple[str, float, float, float, float]], load: tuple[float, ...]) -> int:
    print(f"\nload average at start {load[0]:.2f} (2 cores shared); after "
          f"{os.getloadavg()[0]:.2f}")  # fmt: skip
    head = f"{'what':<42}{'meshtui':>10}{'baseline':>10}{'ratio':>8}{'goal':>7}  met"
    print(head)
    print("-" * len(head))
    for what, a, b, ratio, goal in rows:
        met = "-" if not goal else "yes" if ratio <= goal else "NO"
        print(f"{what:<42}{a:>10.2f}{b:>10.2f}{ratio:>8.2f}{goal:>7.2f}  {met}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
