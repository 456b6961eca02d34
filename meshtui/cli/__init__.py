"""``meshtui``: the command line. ``parser.py`` builds the argparse tree, one module per group
of commands holds the handlers (they call the controller, agent, provisioner or lab), and
``render.py`` prints their reports. Errors become one line on stderr and an exit code, here only.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from meshtui.cli.context import EXIT_FAILED, EXIT_OK
from meshtui.cli.parser import build_parser
from meshtui.errors import MeshtuiError
from meshtui.terminal import Shown

__all__ = ["build_parser", "main"]


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
    except PermissionError as exc:  # a file another user made in the state folder, say
        where = f"{exc.filename}: " if exc.filename else ""
        print(
            f"meshtui: {where}permission denied (run meshtui as the user who owns it)",
            file=sys.stderr,
        )
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("meshtui: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_OK
