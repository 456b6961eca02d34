"""The commands that act on the mesh through the agents: push, rotate, probe, drill."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING

from meshtui.cli import render
from meshtui.cli.context import EXIT_FAILED, EXIT_INPUT, EXIT_OK, controller, progress_printer
from meshtui.errors import InputError, ReadOnlyError
from meshtui.model import Sessions, State, Verdict

if TYPE_CHECKING:
    from meshtui.controller.core import Controller


def cmd_push(args: argparse.Namespace) -> int:
    with controller(args) as ctl:
        report = ctl.push(progress_printer(args))
    if args.json:
        render.print_json(report.to_json())
    else:
        render.pushed(report)
    return EXIT_OK if report.ok else EXIT_FAILED


def rotation_ids(ctl: Controller, args: argparse.Namespace) -> list[str]:
    """The pairs ``rotate`` names: listed, one provider's, all live ones, or the due ones."""
    chosen = [bool(args.pairs), bool(args.provider), bool(args.all), bool(args.due)]
    if sum(chosen) != 1:
        raise InputError("name pairs, or --provider NODE/MODULE, or --all, or --due (exactly one)")
    if args.due:
        return [d.pair for d in ctl.schedule() if d.is_due(time.time())]
    if args.provider:
        return list(ctl.pairs_of_provider(args.provider))
    if args.all:
        return list(ctl.live_pairs())
    return list(args.pairs)


REVOKE_OLD_WARNING = (
    "--revoke-old: the old credential is revoked at every provider even when a consumer "
    "cannot take the new one; such a consumer is LOCKED OUT until a later push delivers it"
)


def cmd_rotate(args: argparse.Namespace) -> int:
    with controller(args) as ctl:
        if ctl.read_only:
            raise ReadOnlyError("rotate")
        ids = rotation_ids(ctl, args)
        if args.due and not ids:
            print("no pair is due for rotation")
            return EXIT_OK
        if not args.yes:
            render.rotation_plan(ctl.plan_rotation(ids))
            if args.revoke_old:
                print(REVOKE_OLD_WARNING)
            if not sys.stdin.isatty():
                print("meshtui: not a terminal; pass --yes to rotate", file=sys.stderr)
                return EXIT_INPUT
            if input("type yes to rotate: ").strip() != "yes":
                print("cancelled; nothing was changed")
                return EXIT_OK
        report = ctl.rotate(
            ids,
            progress_printer(args),
            revoke_old=args.revoke_old,
            probe_after=True,
            sessions=Sessions(args.sessions) if args.sessions else None,
        )
        after = ctl.status([o.pair for o in report.probes]) if report.probes else []
    if args.json:
        render.print_json(report.to_json())
    else:
        render.rotated(report)
        for r in after:  # what the probe after it found, in status's words
            print(f"now {r.state.value:8} {r.pair}  {r.reason}")
    return EXIT_OK if report.ok else EXIT_FAILED


def cmd_probe(args: argparse.Namespace) -> int:
    with controller(args) as ctl:
        outcomes = ctl.probe(args.pairs or None, progress_printer(args))
        # a login that works says nothing of a failed reload or pin: those pairs stay stale
        stale = {
            r.pair: r.reason
            for r in ctl.status([o.pair for o in outcomes] or None)
            if r.state is State.STALE and not r.withdrawn and r.pair in {o.pair for o in outcomes}
        }
        # the whole mesh probed: a module's own secret not working fails the check too
        secrets = [s for s in ctl.secrets() if s.state != State.WORKING] if not args.pairs else []
    if args.json:
        render.print_json([o.__dict__ | {"stale": stale.get(o.pair)} for o in outcomes])
    else:
        render.probed(outcomes)
        for pid, why in sorted(stale.items()):
            print(f"but stale {pid}: {why}")
        for s in secrets:
            print(f"but {s.state} {s.module} secret {s.name}: {s.reason}")
    accepted = all(o.verdict == Verdict.ACCEPTED for o in outcomes)
    return EXIT_OK if accepted and not stale and not secrets else EXIT_FAILED


def cmd_drill(args: argparse.Namespace) -> int:
    with controller(args) as ctl:
        asked = Sessions(args.sessions) if args.sessions else None
        reports = ctl.drill(args.pairs, progress_printer(args), asked)
    if args.json:
        render.print_json([r.to_json() for r in reports])
    else:
        render.drilled(reports)
    return EXIT_OK if all(r.ok for r in reports) else EXIT_FAILED
