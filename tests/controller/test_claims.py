"""Whose an end is (meshtui/controller/plan/claims.py): the pair's id decides, never the answer."""

from __future__ import annotations

from typing import Any

import pytest

from meshtui.controller.plan.claims import (
    Claim,
    asked_only,
    end_node,
    own_holdings,
    own_inspections,
)
from meshtui.model import End

APP1 = "database:app1/gitea->db1/postgres"
APP2 = "database:app2/wiki->db2/postgres"


@pytest.mark.parametrize(
    ("pair", "end", "node"),
    [
        (APP1, "consumer", "app1"),
        (APP1, "provider", "db1"),
        (APP1, "neither", None),
        ("not a pair", "consumer", None),
        ("database:app1->db1/postgres", "consumer", None),
    ],
)
def test_the_pair_id_names_each_ends_node(pair: str, end: str, node: str | None) -> None:
    assert end_node(pair, end) == node


def holding(pair: str, end: End) -> Any:
    return {"pair": pair, "end": end, "generation": 1, "digest": "blake2b:" + "00" * 32}


def test_a_node_keeps_only_its_own_holdings() -> None:
    mine = [holding(APP1, End.CONSUMER), holding(APP2, End.PROVIDER)]
    held = [*mine, holding(APP2, End.CONSUMER), holding(APP1, End.PROVIDER)]
    kept, claims = own_holdings("app1", held)
    assert kept == mine[:1]
    assert claims == [
        Claim("app1", APP2, "provider"),
        Claim("app1", APP2, "consumer"),
        Claim("app1", APP1, "provider"),
    ]
    assert "app1 claims the provider end of " + APP2 in claims[0].describe()


def test_a_node_inspects_only_its_own_servers() -> None:
    own: Any = {"provider": "db1/postgres", "provision": "database", "ok": True, "logins": []}
    other: Any = {**own, "provider": "db2/postgres"}
    kept, claims = own_inspections("db1", [own, other])
    assert kept == [own]
    assert claims == [Claim("db1", "database of db2/postgres", "provider")]


def test_a_result_for_a_pair_not_asked_about_is_a_claim() -> None:
    items: list[Any] = [{"pair": APP1, "digest": None}, {"pair": APP2, "digest": None}]
    kept, claims = asked_only("app1", [APP1], items, End.CONSUMER)
    assert kept == {APP1: items[0]}
    assert claims == [Claim("app1", APP2, "consumer")]
