"""The inventory: the one owner of the SQLite file and of every statement run against it.

``store`` (the :class:`Inventory` and its :class:`Transaction`), ``schema`` (migrations and the
version they reach), ``audit`` (the hash chain, its signed head, and the statements that append
to it and walk it), ``rows`` (typed rows). No raw database or raw query leaves the package.
Only this package imports ``sqlite3`` or ``sqlite_utils``.
"""

from __future__ import annotations

from meshtui.inventory.audit import GENESIS, ChainCheck, event_hash, operator
from meshtui.inventory.schema import MIGRATIONS, SCHEMA_VERSION
from meshtui.inventory.store import Inventory, Transaction, now
from meshtui.protocol.wire import head_message

__all__ = [
    "GENESIS",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "ChainCheck",
    "Inventory",
    "Transaction",
    "event_hash",
    "head_message",
    "now",
    "operator",
]
