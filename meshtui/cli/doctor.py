"""``meshtui doctor``: the preflight over every node, as a table of problems and what to do."""

from __future__ import annotations

import argparse

from meshtui.cli import render
from meshtui.cli.context import EXIT_FAILED, EXIT_OK, controller, progress_printer


def cmd_doctor(args: argparse.Namespace) -> int:
    with controller(args) as ctl:
        report = ctl.doctor(progress_printer(args))
    if args.json:
        render.print_json(report.to_json())
    else:
        render.doctor(report)
    return EXIT_OK if report.ok else EXIT_FAILED
