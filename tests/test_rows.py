"""Every typed row (meshtui/inventory/rows.py) against its table's columns, on a real inventory
at the newest schema: a column added, renamed or dropped without its row is caught here, and so
is a row key no column holds."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any, get_args, get_type_hints

import pytest

from meshtui.errors import InventoryError
from meshtui.inventory import Inventory, rows
from meshtui.inventory.status_read import STATUS_SQL
from tests.fix_pg import Engine

ROWS: list[tuple[Any, str, frozenset[str]]] = [
    # (typed row, its table, the table's columns the row leaves out on purpose)
    (rows.NodeRow, "nodes", frozenset()),
    (rows.ModuleRow, "modules", frozenset()),
    (rows.ModuleRecord, "modules", frozenset()),
    (rows.PairRow, "pairs", frozenset()),
    (rows.PairRecord, "pairs", frozenset()),
    (rows.GenerationRow, "generations", frozenset()),
    (rows.DeliveryRow, "deliveries", frozenset()),
    (rows.ProbeRow, "probes", frozenset()),
    (rows.ProbeRecord, "probes", frozenset({"id"})),  # the store numbers it
    (rows.DrillRow, "drills", frozenset()),
    (rows.DrillRecord, "drills", frozenset({"id"})),
    (rows.RotationRow, "rotations", frozenset()),
    (rows.PolicyRecord, "policies", frozenset()),
    (rows.ClaimRecord, "claims", frozenset()),
    (rows.AuditRecord, "audit", frozenset()),
    (rows.EventRow, "audit", frozenset()),
    (rows.HeadRow, "audit_head", frozenset({"id"})),  # the one row's fixed key
]


@pytest.fixture(scope="module")
def columns(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    path = tmp_path_factory.mktemp("rows") / "inventory.db"
    Inventory.open(path).close()  # created at the newest schema
    with sqlite3.connect(path) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {t: [r[1] for r in conn.execute(f'PRAGMA table_info("{t}")')] for t in tables}


@pytest.mark.parametrize(
    ("row", "table", "left_out"), ROWS, ids=lambda v: getattr(v, "__name__", None)
)
def test_each_typed_row_has_its_tables_columns(
    row: Any, table: str, left_out: frozenset[str], columns: dict[str, list[str]]
) -> None:
    keys = set(get_type_hints(row))
    assert keys == set(columns[table]) - left_out, (
        f"{row.__name__} and table {table} disagree: "
        f"keys without a column {sorted(keys - set(columns[table]))}, "
        f"columns without a key {sorted(set(columns[table]) - left_out - keys)}"
    )


def test_the_rotation_update_names_only_rotation_columns(columns: dict[str, list[str]]) -> None:
    assert set(get_type_hints(rows.RotationUpdate)) <= set(columns["rotations"])


def test_the_status_row_is_read_by_the_status_querys_column_names(
    tmp_path: Path, engine: Engine
) -> None:
    """status reads its row by name (``row[rows.GENERATION]``): the names are the query's
    columns, in the query's order, and each name's number is its place, on every engine."""
    with engine.open(tmp_path / "inventory.db") as inv:
        names = [d[0] for d in inv._conn.execute(STATUS_SQL).description]
    assert names == list(rows.STATUS_COLUMNS)
    assert len(get_args(rows.StatusRow)) == len(names)
    for number, name in enumerate(names):
        assert getattr(rows, name.upper()) == number, name


def test_module_specs_decode_on_demand_as_modules_reads_them(
    tmp_path: Path, engine: Engine
) -> None:
    """The planner's modules, decoded when asked for and few kept: every module reads as
    ``modules()`` reads it, after the kept ones were dropped too; a missing id is missing."""
    with engine.open(tmp_path / "inventory.db") as inv:
        with inv.transaction("test") as tx:
            tx.put_modules([rows.ModuleRecord(id=f"n{i}/m", node=f"n{i}", name="m",
                            spec=f'{{"provides": [], "admin": "/etc/a{i}"}}', declared=1)
                            for i in range(7)])  # fmt: skip
        lazy, eager = inv.module_specs(), inv.modules()
        lazy.KEEP = 3  # type: ignore[misc]
        assert list(lazy) == list(eager) and len(lazy) == 7
        for _ in range(2):
            assert {k: lazy[k] for k in lazy} == eager
        assert "n0/m" in lazy and "n9/m" not in lazy and lazy.get("n9/m") is None


def test_a_stored_spec_is_read_as_its_shape_or_named_as_not(tmp_path: Path, engine: Engine) -> None:
    """A spec stored before pin, secrets and kinds existed reads with their defaults; a spec
    not of the shape declare writes (a provision with no port) is an InventoryError naming
    the module, from every read of it, not a KeyError somewhere in the controller."""
    old = (
        '{"admin": null, "grants": {"database": "/g"}, "provides": [{"name": "database", '
        '"port": 5432}], "provisioner": [], "receives": {"database": "/m"}, "requires": []}'
    )
    with engine.open(tmp_path / "inventory.db") as inv:
        with inv.transaction("test") as tx:
            tx.put_modules([rows.ModuleRecord(id="db1/postgres", node="db1", name="postgres",
                                              spec=old, declared=1)])  # fmt: skip
        spec = inv.modules()["db1/postgres"]["spec"]
        assert spec == inv.module_specs()["db1/postgres"]["spec"]
        (offer,) = spec.provides
        assert (offer.name, offer.port, offer.kind, offer.ca, offer.tls) == (
            "database", 5432, None, None, True,
        )  # fmt: skip
        assert (spec.pin, spec.secrets, spec.receives) == (False, [], {"database": "/m"})
        with inv.transaction("test") as tx:
            tx.put_modules([rows.ModuleRecord(id="db1/postgres", node="db1", name="postgres",
                            spec='{"provides": [{"name": "database"}]}', declared=1)])  # fmt: skip
        for read in (inv.modules, lambda: inv.module_specs()["db1/postgres"]):
            with pytest.raises(InventoryError, match="module db1/postgres: its stored spec"):
                read()
