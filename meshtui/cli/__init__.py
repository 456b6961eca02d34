"""``meshtui``: the command line. ``parser.py`` builds the argparse tree, one module per group
of commands holds the handlers (they call the controller, agent, provisioner or lab), and
``render.py`` prints their reports. Errors become one line on stderr and an exit code, here only.

Importing this package imports nothing but ``sys``: ``meshtui --version`` is answered before
argparse is loaded, and each command's handler module is imported only when that command runs
(``parser.HANDLERS``; the list of imports kept out of the start is in docs/ARCHITECTURE.md,
"Start-up").
"""

from __future__ import annotations

import sys

from meshtui import __version__

TYPE_CHECKING = False  # typing.TYPE_CHECKING, read by mypy, without importing typing at start
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Sequence

__all__ = ["DISTRIBUTION", "VERSION", "main"]

DISTRIBUTION = "meshtui-credentials"
"""This project's distribution name (PyPI's "meshtui" is another program)."""

VERSION = f"{DISTRIBUTION} {__version__}"
"""What ``meshtui --version`` prints: which distribution this ``meshtui`` command comes from
(``meshtui.__version__``, held equal to pyproject.toml's and the installed metadata's by
tests/test_cli_imports.py: reading the metadata costs ~45 ms)."""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``meshtui`` console script."""
    words = sys.argv[1:] if argv is None else list(argv)
    if words == ["--version"]:  # the one answer that needs no parser (argparse prints the same)
        print(VERSION)
        return 0
    from meshtui.cli.parser import build_parser  # start-up: after the --version answer
    from meshtui.terminal import Shown

    parser = build_parser()
    args = parser.parse_args(words)
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = Shown(out), Shown(err)
    try:
        return _run(args)
    finally:
        sys.stdout, sys.stderr = out, err


def __getattr__(name: str) -> Callable[[], argparse.ArgumentParser]:
    """``meshtui.cli.build_parser``, the parser module imported on first use."""
    if name != "build_parser":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from meshtui.cli.parser import build_parser

    return build_parser


def _run(args: argparse.Namespace) -> int:
    """Run the chosen command; a MeshtuiError is one line on stderr and its exit code."""
    from meshtui.cli.context import EXIT_FAILED, EXIT_OK
    from meshtui.errors import MeshtuiError

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
