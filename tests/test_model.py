"""The words as dataclasses: pair ids and the status object."""

from __future__ import annotations

import pytest

from meshtui.model import NAME_RE, Pair, PairStatus, State, pair_id, split_pair_id


def test_pair_id_reads_as_design_says_and_splits_back() -> None:
    pid = pair_id("database", "app1/gitea", "db1/postgres")
    assert pid == "database:app1/gitea->db1/postgres"
    assert split_pair_id(pid) == ("database", "app1/gitea", "db1/postgres")


@pytest.mark.parametrize("bad", ["", "database", "database:app1/gitea", "x:a->b", ":a/b->c/d"])
def test_split_pair_id_refuses_what_is_not_a_pair(bad: str) -> None:
    with pytest.raises(ValueError, match="not a pair id"):
        split_pair_id(bad)


def test_pair_ends() -> None:
    p = Pair("database", "app1/gitea", "db1/postgres", "gitea_app1_000000", "/f", 5432)
    assert (p.id, p.consumer_node, p.provider_node) == (
        "database:app1/gitea->db1/postgres",
        "app1",
        "db1",
    )


@pytest.mark.parametrize("name", ["db1", "a", "my-app", "my_app", "9lives", "x" * 32])
def test_plain_names_are_allowed(name: str) -> None:
    assert NAME_RE.match(name)


@pytest.mark.parametrize("name", ["", "Db1", "-x", "_x", "x" * 33, "bad[b]name", "a/b", "a.b", "é"])
def test_other_names_are_not(name: str) -> None:
    assert not NAME_RE.match(name)


def test_status_json_has_every_field_design_lists() -> None:
    row = PairStatus(
        pair="database:app1/gitea->db1/postgres",
        provision="database",
        consumer="app1/gitea",
        provider="db1/postgres",
        login="gitea_app1_000000",
        generation=2,
        consumer_generation=2,
        provider_generation=1,
        withdrawn=False,
        state=State.STALE,
        reason="provider holds generation 1, expected 2",
        probed_at=None,
        rotated_at="2026-01-01T00:00:00+00:00",
        consumer_file="/etc/gitea/db.password",
        created_at="2025-01-01T00:00:00+00:00",
    )
    out = row.to_json()
    assert out["state"] == "stale" and isinstance(out["state"], str)
    assert out["holders"] == {
        "consumer": {"node": "app1", "module": "app1/gitea", "file": "/etc/gitea/db.password"},
        "provider": {"node": "db1", "module": "db1/postgres", "login": "gitea_app1_000000"},
    }
    for key in (
        "pair",
        "provision",
        "consumer",
        "provider",
        "login",
        "generation",
        "consumer_generation",
        "provider_generation",
        "withdrawn",
        "state",
        "reason",
        "probed_at",
        "rotated_at",
    ):
        assert key in out
