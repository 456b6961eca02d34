"""Who leads the controllers of one shared inventory: the leader lease's ``watch`` turn as the
database's clock sees it now, for ``status`` and the dashboard (which asks every second, so the
connection is kept, one per conninfo file, and opened again after a failure)."""

from __future__ import annotations

import threading
from pathlib import Path

from meshtui.controller.reports import Leadership
from meshtui.errors import InventoryError
from meshtui.inventory.lease import WATCH, Leases

_KEPT: dict[Path, Leases] = {}
_KEPT_LOCK = threading.Lock()


def leadership(conninfo_file: Path) -> Leadership:
    """The lead of the shared inventory on the PostgreSQL ``conninfo_file`` names."""
    try:
        with _KEPT_LOCK:
            leases = _KEPT.get(conninfo_file)
            if leases is None:
                leases = _KEPT[conninfo_file] = Leases.from_file(conninfo_file)
        row = leases.read(WATCH)
    except InventoryError as exc:
        return Leadership(shared=True, problem=str(exc))
    if row is None:
        return Leadership(shared=True)
    return Leadership(
        shared=True,
        holder=row.holder,
        host=row.host,
        pid=row.pid,
        epoch=row.epoch,
        left_s=row.left_s,
    )
