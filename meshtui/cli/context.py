"""What every command needs: exit codes, the state folder, the controller, progress lines."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from meshtui.errors import InventoryError, StateFolderError

if TYPE_CHECKING:  # the agent's commands never load the controller
    from meshtui.controller.core import Controller

EXIT_OK, EXIT_FAILED, EXIT_INPUT = 0, 1, 2

LAB_FOLDER, LAB_CONNINFO, LAB_SERVER, LAB_DATA = "lab", "inventory.conninfo", "inventory", "pg"
"""The lab's folder in its state folder, and in it the lab's own inventory's conninfo file and
server folder, its data folder in that (as :mod:`meshtui.lab.mesh` and
:mod:`meshtui.lab.shared_inventory` name them; the lab stays out of every command's import)."""


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
    try:
        return Controller.open(folder, read_only=read_only)
    except InventoryError as exc:
        hint = _lab_inventory_hint(folder)
        if hint is None:
            raise
        raise InventoryError(f"{exc}; {hint}") from None


def _lab_inventory_hint(folder: Path) -> str | None:
    """What to run when the inventory that could not be opened is the one a lab raised
    itself (``lab up --controllers N``): a ``lab up`` starts it again. None otherwise."""
    from meshtui.controller import config

    try:
        named = config.inventory_postgres(folder)
    except Exception:  # unreadable settings: the open's own error says enough
        return None
    if named is None or named.name != LAB_CONNINFO:
        return None
    lab = named.parent  # a file so named elsewhere (/etc/meshtui) is no lab's: no lab up there
    if lab.name != LAB_FOLDER or not (lab / LAB_SERVER / LAB_DATA).is_dir():
        return None
    return (
        f"it is the lab's own inventory PostgreSQL ({lab / LAB_SERVER}): "
        f"meshtui --state {lab.parent} lab up starts it again"
    )


def progress_printer(args: argparse.Namespace) -> Callable[[str, int, int], None]:
    """Progress lines on stderr, only on a terminal and never with ``--json``."""

    def progress(message: str, done: int, total: int) -> None:
        if not getattr(args, "json", False) and sys.stderr.isatty():
            print(f"  [{done}/{total}] {message}", file=sys.stderr)

    return progress
