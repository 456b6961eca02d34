"""When watch pushes for sessions left to drain: once their time is over (at once, then each
minute while their provider does not answer), and each minute to count them again."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from meshtui.controller.act.drain import DRAIN_COUNT_EVERY_S, due
from meshtui.inventory import Inventory
from meshtui.inventory.rows import DrainRecord

T0 = datetime(2026, 12, 6, 5, 0, tzinfo=UTC).timestamp()


def _stamp(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="microseconds")


def _drain(inv: Inventory, until: float, asked: float) -> None:
    row = DrainRecord(
        pair="cache:app1/gitea->db1/redis",
        rotation=1,
        mark="41",
        until=_stamp(until),
        sessions=2,
        counted_at=_stamp(asked),
    )
    with inv.transaction("test") as tx:
        tx.put_drains([row])


def test_a_drain_is_due_when_over_and_each_minute(tmp_path: Path) -> None:
    with Inventory.open(tmp_path / "inventory.db") as inv:
        assert not due(inv, T0)  # nothing drains
        _drain(inv, until=T0 + 600, asked=T0)
        assert not due(inv, T0 + 1)
        assert due(inv, T0 + DRAIN_COUNT_EVERY_S)  # counted again
        _drain(inv, until=T0 + 30, asked=T0)
        assert not due(inv, T0 + 29)
        assert due(inv, T0 + 30)  # over: ended at once
        _drain(inv, until=T0 + 30, asked=T0 + 31)  # asked after, its provider did not answer
        assert not due(inv, T0 + 32)
        assert due(inv, T0 + 31 + DRAIN_COUNT_EVERY_S)
        with inv.transaction("test") as tx:
            tx.forget_drains(["cache:app1/gitea->db1/redis"])
        assert not due(inv, T0 + 10_000) and inv.drains() == {}
