"""Who leads the controllers of one shared inventory: the leader lease's ``watch`` turn as the
database's clock sees it now, for ``status`` and the dashboard."""

from __future__ import annotations

from pathlib import Path

from meshtui.controller.reports import Leadership
from meshtui.errors import InventoryError
from meshtui.inventory.lease import WATCH, Leases


def leadership(conninfo_file: Path) -> Leadership:
    """The lead of the shared inventory on the PostgreSQL ``conninfo_file`` names."""
    try:
        leases = Leases.from_file(conninfo_file)
        try:
            row = leases.read(WATCH)
        finally:
            leases.close()
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
