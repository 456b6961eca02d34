"""The commands that read or change the declaration and the inventory: init, declare, status,
audit, and the dashboard (no command)."""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from meshtui.cli import render
from meshtui.cli.context import EXIT_FAILED, EXIT_OK, controller, progress_printer, state_dir
from meshtui.terminal import not_a_terminal, require_terminal


def cmd_init(args: argparse.Namespace) -> int:
    import os

    from meshtui.controller.config import ENV
    from meshtui.controller.core import init_keys, init_postgres

    folder = state_dir(args)
    conninfo = args.postgres or (Path(os.environ[ENV]) if os.environ.get(ENV) else None)
    if conninfo is not None:
        saved = init_postgres(folder, conninfo, args.name)
        print(f"inventory on PostgreSQL, named by {conninfo.absolute()} (settings: {saved})")
    elif args.name:
        from meshtui.controller.config import write_name

        print(f"this controller is {args.name} (settings: {write_name(folder, args.name)})")
    pub, created = init_keys(folder)
    print(
        f"{'wrote' if created else 'kept'} controller keys: {pub} (give this file to meshtui host init)"
    )
    return EXIT_OK


def cmd_move_inventory(args: argparse.Namespace) -> int:
    from meshtui.controller.core import MOVED, move_to_postgres

    folder = state_dir(args)
    saved = move_to_postgres(folder, args.to_postgres)
    print(
        f"inventory moved to PostgreSQL, named by {args.to_postgres.absolute()} (settings: "
        f"{saved}); the SQLite file is kept as {folder / MOVED} and no longer read"
    )
    return EXIT_OK


def cmd_declare(args: argparse.Namespace) -> int:
    with controller(args) as ctl:
        result = ctl.declare(args.file)
        report = ctl.doctor(progress_printer(args)).policy() if args.check_nodes else None
    if args.json:
        out = result.to_json()
        render.print_json(out if report is None else {**out, "check_nodes": report.to_json()})
    else:
        render.declared(str(args.file), result)
        if report is not None:
            render.doctor(report)
    return EXIT_OK if report is None or report.ok else EXIT_FAILED


def cmd_status(args: argparse.Namespace) -> int:
    if getattr(args, "due", False):
        return cmd_status_due(args)
    with controller(args, read_only=True) as ctl:
        rows = ctl.status(args.pairs or None)
        secrets = ctl.secrets()
        draining = ctl.draining([r.pair for r in rows] if args.pairs else None)
        rotations = ctl.rotations(rows)
        lead = ctl.leadership(ctl.state_dir).line()
    if args.json:
        render.print_json(render.status_json(rows, secrets, draining, rotations))
        if lead is not None:  # the list stays the list: the lead is said beside it
            print(lead, file=sys.stderr)
    else:
        render.statuses(rows, secrets, draining, rotations)
        if lead is not None:
            print(lead)
    if getattr(args, "check", False):  # a monitor's check: 0 only when everything works
        from meshtui.controller.reports import not_working

        failing = not_working(rows, secrets)
        for line in failing:
            print(f"not working: {line}", file=sys.stderr)
        return EXIT_FAILED if failing else EXIT_OK
    return EXIT_FAILED if any(r.alarm for r in rows) else EXIT_OK


def cmd_status_due(args: argparse.Namespace) -> int:
    with controller(args, read_only=True) as ctl:
        wanted = set(ctl.resolve_pairs(args.pairs)) if args.pairs else None
        rows = [
            d for d in ctl.schedule() if not d.withdrawn and (wanted is None or d.pair in wanted)
        ]
    now = time.time()
    if args.json:
        render.print_json([d.to_json(now) for d in rows])
    else:
        render.due(rows, now)
    return EXIT_FAILED if any(d.is_overdue(now) for d in rows) else EXIT_OK


def cmd_audit(args: argparse.Namespace) -> int:
    from meshtui.controller.records.restored import restores_of  # start-up: not on status's path

    if not (args.verify or args.json or args.export or args.list) and not_a_terminal() is None:
        from meshtui.tui.app import run_dashboard

        return run_dashboard(state_dir(args), read_only=True, screen="audit")
    with controller(args, read_only=True) as ctl:
        if args.export:
            sys.stdout.write(ctl.export_events(args.export))
            return EXIT_OK
        events = ctl.events()
        check = ctl.verify_chain() if args.verify else None
        anchors = ctl.verify_anchors() if args.verify else None
    restores = restores_of(events) if args.verify else []
    if args.json:
        listed = [e.to_json() for e in events]
        out: Any = listed
        if check is not None and anchors is not None:
            out = {
                "events": listed,
                "verified": check.ok and anchors.ok,
                "bad_event": check.bad_seq,
                "problem": check.problem,
                "anchors": anchors.to_json(),
                "restores": [asdict(r) for r in restores],
            }
        render.print_json(out)
    elif check is not None and anchors is not None:
        render.verdict(check, anchors, [r.line() for r in restores])
    else:
        render.events(events)
    broken = (check is not None and not check.ok) or (anchors is not None and not anchors.ok)
    return EXIT_FAILED if broken else EXIT_OK


def cmd_dashboard(args: argparse.Namespace) -> int:
    require_terminal("the dashboard")
    from meshtui.tui.app import run_dashboard

    return run_dashboard(state_dir(args), read_only=args.read_only)
