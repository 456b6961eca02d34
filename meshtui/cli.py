"""``meshtui``: argument parsing and output. Every command calls the controller (or the agent,
provisioner, lab) and prints; errors become one line on stderr and an exit code, here only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from meshtui.errors import MeshtuiError
from meshtui.terminal import Shown

EXIT_OK, EXIT_FAILED, EXIT_INPUT = 0, 1, 2


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=False, default=str))


def _state(args: argparse.Namespace) -> Path:
    return Path(args.state or os.environ.get("MESHTUI_STATE") or "state")


def _controller(args: argparse.Namespace, *, read_only: bool = False) -> Any:
    from meshtui.controller.core import Controller

    return Controller.open(_state(args), read_only=read_only or getattr(args, "read_only", False))


def cmd_init(args: argparse.Namespace) -> int:
    from meshtui.keys import init_keys

    pub, created = init_keys(_state(args))
    print(
        f"{'wrote' if created else 'kept'} controller keys: {pub} (give this file to meshtui host init)"
    )
    return EXIT_OK


def cmd_declare(args: argparse.Namespace) -> int:
    with _controller(args) as ctl:
        result = ctl.declare(args.file)
    if args.json:
        _print_json(result.to_json())
    else:
        print(
            f"{args.file}: {len(result.new)} new, {len(result.reissued)} reissued, "
            f"{len(result.changed)} changed, {len(result.withdrawn)} withdrawn, "
            f"{len(result.unchanged)} unchanged"
        )
        for label, ids in (
            ("new", result.new),
            ("reissued", result.reissued),
            ("withdrawn", result.withdrawn),
        ):
            for pid in ids:
                print(f"  {label:9} {pid}")
        if result.new or result.reissued or result.withdrawn:
            print("run meshtui push to deliver")
    return EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    if getattr(args, "due", False):
        return cmd_status_due(args)
    with _controller(args, read_only=True) as ctl:
        rows = ctl.status(args.pairs or None)
    if args.json:
        _print_json([r.to_json() for r in rows])
    else:
        for r in rows:
            gens = (
                f"g{r.generation} c{r.consumer_generation or '-'} p{r.provider_generation or '-'}"
            )
            print(f"{r.state:8} {r.pair}  login={r.login} {gens}  {r.reason}")
            print(
                f"         holders: {r.consumer} file {r.consumer_file}; {r.provider} login {r.login}"
            )
        print(f"{len(rows)} pairs")
    return EXIT_FAILED if any(r.alarm for r in rows) else EXIT_OK


def cmd_audit(args: argparse.Namespace) -> int:
    if not (args.verify or args.json or args.export or args.list):
        from meshtui.tui.app import run_dashboard

        return run_dashboard(_state(args), read_only=True, screen="audit")
    with _controller(args, read_only=True) as ctl:
        if args.export:
            sys.stdout.write(ctl.export_events(args.export))
            return EXIT_OK
        events = ctl.events()
        check = ctl.verify_chain() if args.verify else None
        anchors = ctl.verify_anchors() if args.verify else None
    if args.json:
        out: Any = events
        if check is not None and anchors is not None:
            out = {
                "events": events,
                "verified": check.ok and anchors.ok,
                "bad_event": check.bad_seq,
                "problem": check.problem,
                "anchors": anchors.to_json(),
            }
        _print_json(out)
    else:
        if not args.verify:
            for e in events:
                pairs = ", ".join(e["pairs"][:3]) + (" …" if len(e["pairs"]) > 3 else "")
                print(
                    f"{e['seq']:>5} {e['at']} {e['operator']:<10} {e['kind']:<10} {e['outcome']:<8} {pairs}"
                )
        if check is not None:
            if check.ok:
                print(f"audit chain verified: {check.events} events")
            else:
                print(
                    f"audit chain BROKEN at event {check.bad_seq}: {check.problem}", file=sys.stderr
                )
        if anchors is not None:
            _print_anchors(anchors)
    broken = (check is not None and not check.ok) or (anchors is not None and not anchors.ok)
    return EXIT_FAILED if broken else EXIT_OK


def _print_anchors(anchors: Any) -> None:
    """Each node's kept audit head against the chain; disagreements on stderr."""
    for n in anchors.nodes:
        out = sys.stderr if n.disagrees else sys.stdout
        mark = "DISAGREES" if n.disagrees else n.verdict
        print(f"  node {n.node:<12} {mark:<11} {n.reason}", file=out)
    if not anchors.ok:
        print(
            "audit chain DISAGREES with what nodes saw: "
            + ", ".join(anchors.disagreeing)
            + " (events were deleted or rewritten: restore the inventory from a backup that "
            "holds them, and find out who changed it; only if it was started anew on purpose, "
            "delete audit-head.json in those nodes' state folders)",
            file=sys.stderr,
        )
    elif not anchors.answered:
        print("no node answered: the chain is not checked against what the nodes saw")


def cmd_dashboard(args: argparse.Namespace) -> int:
    from meshtui.tui.app import run_dashboard

    return run_dashboard(_state(args), read_only=args.read_only)


def cmd_host_init(args: argparse.Namespace) -> int:
    from meshtui.host.identity import init

    pub, created = init(args.name, Path(args.state_dir), Path(args.controller))
    print(
        f"{'wrote' if created else 'kept'} keys of node {args.name}: {pub} "
        '(name it in the declaration: keys = "...")'
    )
    return EXIT_OK


def _host_parsers(sub: Any) -> None:
    host = sub.add_parser("host", help="the agent on a node").add_subparsers(
        dest="host_command", metavar="COMMAND", required=True
    )
    s = host.add_parser("init", help="write this node's keys and pin the controller key")
    s.add_argument("--name", required=True)
    s.add_argument("--state", dest="state_dir", required=True, help="the node's state folder")
    s.add_argument("--controller", required=True, help="the controller's .pub file")
    s.set_defaults(func=cmd_host_init)
    s = host.add_parser("serve", help="run the agent")
    s.add_argument("--state", dest="state_dir", required=True, help="the node's state folder")
    s.add_argument("--listen", required=True, help="HOST:PORT or unix:PATH")
    s.add_argument(
        "--allow-loopback",
        action="store_true",
        help="let probes target loopback (lab fallback only)",
    )
    s.set_defaults(func=cmd_host_serve)


def cmd_host_serve(args: argparse.Namespace) -> int:
    from meshtui.host.serve import serve

    return serve(Path(args.state_dir), args.listen, allow_loopback=args.allow_loopback)


def build_parser() -> argparse.ArgumentParser:
    """The whole command line, as DESIGN "CLI" lists it."""
    p = argparse.ArgumentParser(
        prog="meshtui",
        description="The operator's console for the credentials of a small service mesh.",
    )
    p.add_argument("--state", help="state folder (default ./state, or $MESHTUI_STATE)")
    p.add_argument(
        "--read-only",
        action="store_true",
        help="open the inventory read-only; every action is refused",
    )
    p.set_defaults(func=cmd_dashboard)
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    s = sub.add_parser("init", help="write the controller's keys")
    s.set_defaults(func=cmd_init)

    s = sub.add_parser("declare", help="load a declaration (TOML)")
    s.add_argument("file", type=Path)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_declare)

    s = sub.add_parser("status", help="every pair, its state and who is behind")
    s.add_argument("pairs", nargs="*", metavar="PAIR")
    s.add_argument("--json", action="store_true")
    s.add_argument(
        "--due", action="store_true", help="each pair's policy, age and when it is due (overdue)"
    )
    s.set_defaults(func=cmd_status)

    s = sub.add_parser("audit", help="the read-only audit view, or the log as text/JSON/CSV")
    s.add_argument("--verify", action="store_true", help="check the hash chain; exit 1 when broken")
    s.add_argument("--json", action="store_true")
    s.add_argument(
        "--list", action="store_true", help="print the events instead of opening the view"
    )
    s.add_argument("--export", choices=["json", "csv"], help="write every event to stdout")
    s.set_defaults(func=cmd_audit)

    for extra in EXTRA_PARSERS:
        extra(sub)
    return p


def _printer(args: argparse.Namespace) -> Callable[[str, int, int], None]:
    def progress(message: str, done: int, total: int) -> None:
        if not getattr(args, "json", False) and sys.stderr.isatty():
            print(f"  [{done}/{total}] {message}", file=sys.stderr)

    return progress


def cmd_push(args: argparse.Namespace) -> int:
    with _controller(args) as ctl:
        report = ctl.push(_printer(args))
    if args.json:
        _print_json(report.to_json())
    else:
        for o in report.delivered:
            print(f"{'delivered' if o.ok else 'FAILED':9} {o.pair} g{o.generation} {o.reason}")
        for o in report.withdrawn:
            print(f"{'revoked' if o.ok else 'NOT REVOKED':9} {o.pair} {o.reason}")
        if not report.delivered and not report.withdrawn:
            print("every end already holds its generation")
        for pid, why in sorted(report.behind.items()):
            print(f"behind    {pid}: {why}")
        print("all ends agree" if report.ok else f"{len(report.behind)} pairs behind")
    return EXIT_OK if report.ok else EXIT_FAILED


def _rotation_ids(ctl: Any, args: argparse.Namespace) -> list[str]:
    chosen = [bool(args.pairs), bool(args.provider), bool(args.all), bool(args.due)]
    if sum(chosen) != 1:
        from meshtui.errors import InputError

        raise InputError("name pairs, or --provider NODE/MODULE, or --all, or --due (exactly one)")
    if args.due:
        import time

        return [d.pair for d in ctl.schedule() if d.is_due(time.time())]
    if args.provider:
        return list(ctl.pairs_of_provider(args.provider))
    if args.all:
        return list(ctl.live_pairs())
    return list(args.pairs)


def cmd_rotate(args: argparse.Namespace) -> int:
    with _controller(args) as ctl:
        if ctl.read_only:
            from meshtui.errors import ReadOnlyError

            raise ReadOnlyError("rotate")
        ids = _rotation_ids(ctl, args)
        if args.due and not ids:
            print("no pair is due for rotation")
            return EXIT_OK
        if not args.yes:
            plan = ctl.plan_rotation(ids)
            print(f"rotate {len(plan.pairs)} pairs:")
            for pid in plan.pairs:
                print(f"  {pid}")
            for r in plan.nodes:
                print(f"  node {r.node}: {'resolved' if r.ok else 'NOT RESOLVED'} ({r.reason})")
            if not sys.stdin.isatty():
                print("meshtui: not a terminal; pass --yes to rotate", file=sys.stderr)
                return EXIT_INPUT
            if input("type yes to rotate: ").strip() != "yes":
                print("cancelled; nothing was changed")
                return EXIT_OK
        report = ctl.rotate(ids, _printer(args))
    if args.json:
        _print_json(report.to_json())
    else:
        for o in report.pairs:
            window = f" window {o.window_ms:.1f} ms" if o.window_ms is not None else ""
            print(f"{report.outcome:11} {o.pair} g{o.previous}->g{o.generation}{window} {o.reason}")
        if report.reason:
            print(f"reason: {report.reason}")
    return EXIT_OK if report.ok else EXIT_FAILED


def cmd_probe(args: argparse.Namespace) -> int:
    with _controller(args) as ctl:
        outcomes = ctl.probe(args.pairs or None, _printer(args))
    if args.json:
        _print_json([o.__dict__ for o in outcomes])
    else:
        for o in outcomes:
            lat = f"{o.latency_ms:6.1f} ms" if o.latency_ms is not None else "       -"
            print(f"{o.verdict:9} {lat} {o.pair}  {o.reason}")
    return EXIT_OK if all(o.verdict == "accepted" for o in outcomes) else EXIT_FAILED


def cmd_drill(args: argparse.Namespace) -> int:
    with _controller(args) as ctl:
        reports = ctl.drill(args.pairs, _printer(args))
    if args.json:
        _print_json([r.to_json() for r in reports])
    else:
        for r in reports:
            print(f"{'PASSED' if r.ok else 'FAILED'} {r.pair}")
            for s in r.steps:
                lat = f"{s.latency_ms:.1f} ms" if s.latency_ms is not None else "-"
                mark = "ok " if s.ok else "BAD"
                print(f"  [{mark}] {s.name:10} expected {s.expected:8} got {s.verdict:8} {lat}")
            if r.window_ms is not None:
                print(f"  window {r.window_ms:.1f} ms (rotation {r.rotation})")
            if r.reason:
                print(f"  {r.reason}")
    return EXIT_OK if all(r.ok for r in reports) else EXIT_FAILED


def _action_parsers(sub: Any) -> None:
    s = sub.add_parser("push", help="converge every end")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_push)
    s = sub.add_parser("rotate", help="all-or-nothing rotation")
    s.add_argument("pairs", nargs="*", metavar="PAIR")
    s.add_argument("--provider", metavar="NODE/MODULE")
    s.add_argument("--all", action="store_true")
    s.add_argument("--due", action="store_true", help="the pairs whose policy says rotate now")
    s.add_argument("--yes", action="store_true", help="do not ask")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_rotate)
    s = sub.add_parser("probe", help="live logins from each consumer's node")
    s.add_argument("pairs", nargs="*", metavar="PAIR")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_probe)
    s = sub.add_parser("drill", help="rotation + three logins, with the window")
    s.add_argument("pairs", nargs="+", metavar="PAIR")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_drill)


def cmd_lab(args: argparse.Namespace) -> int:
    from meshtui.lab import mesh as lab

    state = _state(args)
    if args.lab_command == "up":
        built = lab.up(
            state, loopback=True if args.loopback else None, provisioner=args.provisioner
        )
        if built.mode == "loopback":
            print(
                "lab is up in LOOPBACK mode (no namespaces: not root?); every probe says loopback"
            )
        else:
            print(f"lab is up: namespaces {built.network}-*, private network {lab.SUBNET}")
        for node, address in built.addresses.items():
            print(
                f"  {node:6} {address:12} agent unix:{built.socket(node)} (pid {built.pids[node]})"
            )
        print(f"declaration: {built.declaration}")
        print(
            f"next: meshtui --state {state} declare {built.declaration} && meshtui --state {state} push"
        )
        return EXIT_OK
    if args.lab_command == "down":
        for line in lab.down(state, purge=args.purge) or ["nothing was running"]:
            print(line)
        return EXIT_OK
    info = lab.status(state)
    if args.json:
        _print_json(info)
    elif not info["up"]:
        print("no lab is up")
    else:
        print(f"lab up ({info['mode']}), PostgreSQL {'running' if info['postgres'] else 'DOWN'}")
        for node, a in info["agents"].items():
            print(
                f"  {node:6} {a['address']:12} pid {a['pid']} {'answers' if a['answers'] else 'NOT ANSWERING'}"
            )
    ok = info["up"] and info["postgres"] and all(a["answers"] for a in info["agents"].values())
    return EXIT_OK if ok else EXIT_FAILED


def _lab_parsers(sub: Any) -> None:
    lab = sub.add_parser("lab", help="the lab alone (for scripts and tests)").add_subparsers(
        dest="lab_command", metavar="COMMAND", required=True
    )
    s = lab.add_parser("up", help="build the lab: PostgreSQL, namespaces, agents")
    s.add_argument("--loopback", action="store_true", help="no namespaces even when root")
    s.add_argument(
        "--provisioner",
        help="a provisioner command for the database node "
        "(default: built-in; also $MESHTUI_LAB_PROVISIONER); {admin} is replaced by the admin file",
    )
    s.set_defaults(func=cmd_lab)
    s = lab.add_parser("down", help="stop and remove every process and namespace the lab made")
    s.add_argument("--purge", action="store_true", help="also delete the lab folder")
    s.set_defaults(func=cmd_lab)
    s = lab.add_parser("status", help="what is up")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_lab)


def cmd_provision(args: argparse.Namespace) -> int:
    from meshtui.provisioner.harness import Report, reconcile, watch

    manifest, admin = Path(args.manifest), Path(args.admin)

    def show(report: Report) -> None:
        if args.json:
            print(report.to_json(), flush=True)
        else:
            print("\n".join(report.lines()), flush=True)

    if not args.watch:
        report = reconcile(manifest, admin)
        show(report)
        return EXIT_OK if report.ok else EXIT_FAILED
    import signal
    import threading

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())

    def complain(exc: MeshtuiError) -> None:
        print(f"meshtui provision: {exc}", file=sys.stderr, flush=True)

    watch(
        manifest,
        admin,
        interval=args.interval,
        drift_every=args.drift_every,
        stop=stop,
        on_report=show,
        on_error=complain,
    )
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    from meshtui.controller.core import Controller
    from meshtui.lab import mesh as lab
    from meshtui.tui.app import run_dashboard

    state = _state(args)
    print("meshtui demo: building the lab (PostgreSQL, namespaces, agents) ...", file=sys.stderr)
    built = lab.up(state, loopback=True if args.loopback else None)
    try:
        if built.mode == "loopback":
            print("LOOPBACK mode (no namespaces): every probe says loopback", file=sys.stderr)
        with Controller.open(state) as ctl:
            ctl.declare(built.declaration)
            ctl.push()
            ctl.probe()
        return run_dashboard(state, read_only=False)
    finally:
        if args.keep:
            print(
                f"the lab is still up; meshtui --state {state} lab down removes it", file=sys.stderr
            )
        else:
            for line in lab.down(state):
                print(line, file=sys.stderr)


def _provision_parser(sub: Any) -> None:
    s = sub.add_parser("demo", help="embedded lab + dashboard; quitting tears the lab down")
    s.add_argument("--loopback", action="store_true", help="no namespaces even when root")
    s.add_argument("--keep", action="store_true", help="leave the lab up after quitting")
    s.set_defaults(func=cmd_demo)

    s = sub.add_parser(
        "provision", help="reconcile one PostgreSQL with a manifest (built-in provisioner)"
    )
    s.add_argument("--manifest", required=True, help="the manifest (mesh.json)")
    s.add_argument("--admin", required=True, help="a 0600 file holding the admin libpq conninfo")
    s.add_argument(
        "--watch", action="store_true", help="keep reconciling on change and against drift"
    )
    s.add_argument("--interval", type=float, default=2.0, help="seconds between polls (--watch)")
    s.add_argument(
        "--drift-every", type=float, default=300.0, help="seconds between drift checks (--watch)"
    )
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_provision)


def cmd_status_due(args: argparse.Namespace) -> int:
    import time

    from meshtui.model import format_duration

    with _controller(args, read_only=True) as ctl:
        wanted = set(ctl.resolve_pairs(args.pairs)) if args.pairs else None
        rows = [
            d for d in ctl.schedule() if not d.withdrawn and (wanted is None or d.pair in wanted)
        ]
    now = time.time()
    if args.json:
        _print_json([d.to_json(now) for d in rows])
    else:
        for d in rows:
            age = format_duration(d.age(now))
            if d.due_at is None:
                when = "never (no rotation policy)"
            elif d.is_overdue(now):
                when = f"OVERDUE by {format_duration(now - d.due_at)}"
            elif d.is_due(now):
                when = "due now"
            else:
                when = f"due in {format_duration(d.due_at - now)}"
            print(f"{when:28} {d.pair}  age {age}  {d.policy.describe()}")
        late = sum(1 for d in rows if d.is_overdue(now))
        print(f"{len(rows)} pairs, {sum(1 for d in rows if d.is_due(now))} due, {late} overdue")
    return EXIT_FAILED if any(d.is_overdue(now) for d in rows) else EXIT_OK


def cmd_watch(args: argparse.Namespace) -> int:
    import signal

    from meshtui.controller.metrics import Metrics, parse_listen
    from meshtui.controller.notify import Notifier
    from meshtui.controller.watch import Watch, log_line

    listen = (
        parse_listen(args.metrics, allow_remote=args.metrics_allow_remote) if args.metrics else None
    )
    notifier = Notifier(args.notify, log_line, timeout=args.notify_timeout) if args.notify else None
    metrics = Metrics() if listen else None
    with _controller(args) as ctl:
        if ctl.read_only:
            from meshtui.errors import ReadOnlyError

            raise ReadOnlyError("watch")
        if metrics is not None and listen is not None:
            try:
                host, port = metrics.serve(*listen)
            except OSError as exc:
                from meshtui.errors import InputError

                raise InputError(
                    f"--metrics {args.metrics}: cannot listen: {exc.strerror}"
                ) from exc
            log_line(f"metrics at http://{host}:{port}/metrics")
        watch = Watch(ctl, notify=notifier, metrics=metrics, tick=args.tick)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: watch.stop.set())
        try:
            return watch.run()
        finally:
            if notifier is not None:
                notifier.close()
            if metrics is not None:
                metrics.close()


def _watch_parser(sub: Any) -> None:
    s = sub.add_parser("watch", help="the unattended loop: rotate by policy, probe, converge")
    s.add_argument(
        "--notify",
        nargs="+",
        metavar="CMD",
        help="argv run (no shell) on every alert, the alert as JSON on stdin; put it last",
    )
    s.add_argument("--notify-timeout", type=float, default=10.0, help="seconds (default 10)")
    s.add_argument("--metrics", metavar="HOST:PORT", help="serve Prometheus text at /metrics")
    s.add_argument(
        "--metrics-allow-remote",
        action="store_true",
        help="let --metrics bind an address other than loopback",
    )
    s.add_argument(
        "--tick", type=float, default=1.0, help="longest sleep between two looks (seconds)"
    )
    s.set_defaults(func=cmd_watch)


def cmd_doctor(args: argparse.Namespace) -> int:
    with _controller(args) as ctl:
        report = ctl.doctor(_printer(args))
    if args.json:
        _print_json(report.to_json())
        return EXIT_OK if report.ok else EXIT_FAILED
    if report.problems:
        rows = [("node", "check", "subject", "problem", "what to do")]
        rows += [(p.node, p.check, p.subject, p.problem, p.fix) for p in report.problems]
        widths = [min(40, max(len(r[i]) for r in rows)) for i in range(3)]
        for r in rows:
            cells = "  ".join(c.ljust(w) for c, w in zip(r[:3], widths, strict=True))
            print(f"{cells}  {r[3]}  -> {r[4]}")
    answered = [n for n in report.nodes if n.answered]
    passed = sum(n.passed for n in answered)
    print(
        f"{len(report.problems)} problems; {len(answered)} of {len(report.nodes)} nodes answered, "
        f"{passed} checks passed ({report.elapsed_ms / 1000:.2f} s)"
    )
    return EXIT_OK if report.ok else EXIT_FAILED


def _doctor_parser(sub: Any) -> None:
    s = sub.add_parser(
        "doctor", help="preflight: keys, folders, users, reloads, admin, ports, clocks"
    )
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_doctor)


EXTRA_PARSERS: list[Callable[[Any], None]] = [
    _host_parsers,
    _action_parsers,
    _lab_parsers,
    _provision_parser,
    _watch_parser,
    _doctor_parser,
]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``meshtui`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = Shown(out), Shown(err)
    try:
        return _run(args)
    finally:
        sys.stdout, sys.stderr = out, err


def _run(args: argparse.Namespace) -> int:
    """Run the chosen command; a MeshtuiError is one line on stderr and its exit code."""
    try:
        return int(args.func(args))
    except MeshtuiError as exc:
        print(f"meshtui: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("meshtui: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
