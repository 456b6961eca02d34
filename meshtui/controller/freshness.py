"""Whether the inventory changed since a reader last looked, without opening it.

The dashboard polls this every second to reload after another process (or its own job)
wrote; a stat of the database file and its write-ahead log is far cheaper than a query. A
shared inventory on PostgreSQL has no file: there it is one small query on a kept read-only
connection (:func:`shared_stamp`), another controller's commit included, and besides the poll
a feed (:func:`change_feed`) wakes the reader at every commit, any controller's, at once.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path

from meshtui.errors import InventoryError
from meshtui.inventory import Inventory
from meshtui.inventory.pg_feed import ChangeFeed


@dataclass(frozen=True)
class InventoryStamp:
    """Modification time and size of the inventory file and its ``-wal`` (0 when absent)."""

    parts: tuple[int, ...]


def inventory_stamp(path: Path) -> InventoryStamp | None:
    """The inventory at ``path``'s stamp now, or None when there is no inventory yet."""
    if not path.exists():
        return None
    out: list[int] = []
    for suffix in ("", "-wal"):
        try:
            st = os.stat(str(path) + suffix)
            out += [st.st_mtime_ns, st.st_size]
        except OSError:
            out += [0, 0]
    return InventoryStamp(tuple(out))


_KEPT: dict[Path, Inventory] = {}
_KEPT_LOCK = threading.Lock()


def shared_stamp(state_path: Path, conninfo_file: Path) -> InventoryStamp:
    """The stamp of the shared inventory ``conninfo_file`` names: its data version (moves at
    every commit), read on a read-only connection kept per file and opened again after a
    failure; InventoryError naming the server when it cannot be read."""
    with _KEPT_LOCK:
        inv = _KEPT.get(conninfo_file)
        if inv is None:
            inv = _KEPT[conninfo_file] = Inventory.open(
                state_path, read_only=True, postgres=conninfo_file
            )
        try:
            return InventoryStamp((inv.data_version(),))
        except InventoryError:
            _KEPT.pop(conninfo_file, None)
            inv.close()
            raise


def change_feed(conninfo_file: Path | None) -> ChangeFeed | None:
    """A feed of the commits to the shared inventory ``conninfo_file`` names (None: a SQLite
    inventory, whose readers keep to its stamp); it listens from its first wait on."""
    return None if conninfo_file is None else ChangeFeed(conninfo_file)
