"""Whether the inventory changed since a reader last looked, without opening it.

The dashboard polls this every few seconds to reload after another process (or its own job)
wrote; a stat of the database file and its write-ahead log is far cheaper than a query.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


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
