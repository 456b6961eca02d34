"""What every command needs: exit codes, the state folder, the controller, progress lines."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from meshtui.errors import StateFolderError

if TYPE_CHECKING:  # the agent's commands never load the controller
    from meshtui.controller.core import Controller

EXIT_OK, EXIT_FAILED, EXIT_INPUT = 0, 1, 2


def state_dir(args: argparse.Namespace) -> Path:
    """``--state``, else ``$MESHTUI_STATE``, else ``./state``."""
    return Path(args.state or os.environ.get("MESHTUI_STATE") or "state")


def controller(args: argparse.Namespace, *, read_only: bool = False) -> Controller:
    """The controller over the state folder, read-only when asked here or by ``--read-only``."""
    from meshtui.controller.core import KEY_STEM, Controller

    folder = state_dir(args)
    read_only = read_only or getattr(args, "read_only", False)
    if not read_only and not (folder / f"{KEY_STEM}.key").exists():
        # opening would create an inventory in a folder no agent trusts (./state by default)
        raise StateFolderError(str(folder.absolute()))
    return Controller.open(folder, read_only=read_only)


def progress_printer(args: argparse.Namespace) -> Callable[[str, int, int], None]:
    """Progress lines on stderr, only on a terminal and never with ``--json``."""

    def progress(message: str, done: int, total: int) -> None:
        if not getattr(args, "json", False) and sys.stderr.isatty():
            print(f"  [{done}/{total}] {message}", file=sys.stderr)

    return progress
