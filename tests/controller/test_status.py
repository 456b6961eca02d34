"""A pair's state from what the inventory holds, per docs/ARCHITECTURE.md "States of a pair"."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from meshtui.controller.read.status import statuses
from meshtui.inventory import Inventory, now
from meshtui.model import PairStatus, State
from tests.fix_mesh import Mesh, modules

GITEA = "database:app1/gitea->db1/postgres"
WIKI = "database:app1/wiki->db1/postgres"


@dataclass
class World:
    mesh: Mesh
    inv: Inventory

    def deliver(
        self, pair: str, end: str, generation: int | None, error: str | None = None
    ) -> None:
        with self.inv.transaction("test") as tx:
            tx.put_deliveries(
                [
                    {
                        "pair": pair,
                        "end": end,
                        "generation": generation,
                        "digest": None if generation is None else f"blake2b:{generation:064x}",
                        "since": now(),
                        "attempted_at": now(),
                        "error": error,
                    }
                ]
            )

    def both(self, pair: str, generation: int) -> None:
        self.deliver(pair, "consumer", generation)
        self.deliver(pair, "provider", generation)

    def probe(
        self,
        pair: str,
        verdict: str,
        generation: int | None = 1,
        *,
        reason: str = "",
        used_password: int | None = 1,
        loopback: int = 0,
        withdrawn: int = 0,
        client_addr: str | None = "10.213.0.3",
    ) -> None:
        with self.inv.transaction("test") as tx:
            tx.add_probes(
                [
                    {
                        "pair": pair,
                        "at": now(),
                        "generation": generation,
                        "verdict": verdict,
                        "reason": reason or verdict,
                        "latency_ms": 4.5,
                        "used_password": used_password,
                        "loopback": loopback,
                        "client_addr": client_addr,
                        "control": None,
                        "withdrawn": withdrawn,
                    }
                ]
            )

    def declare(self, consumers: list[str]) -> None:
        res = self.mesh.cli("declare", self.mesh.write(self.mesh.spec(modules(consumers))))
        assert res.code == 0, res.err

    def status(self, pair: str = GITEA) -> PairStatus:
        (row,) = statuses(self.inv, [pair])
        return row


@pytest.fixture
def world(mesh: Mesh) -> Iterator[World]:
    w = World(mesh, Inventory.open(mesh.inventory))
    w.declare(["app1/gitea", "app1/wiki"])
    try:
        yield w
    finally:
        w.inv.close()


def check(row: PairStatus, state: State, reason: str, *, alarm: bool = False) -> None:
    assert (row.state, row.alarm) == (state, alarm), row
    assert reason in row.reason, row.reason


# ---------------------------------------------------------------------------- live pairs


def test_never_delivered_is_stale_and_names_both_ends(world: World) -> None:
    row = world.status()
    check(row, State.STALE, "provider end never delivered (run meshtui push)")
    assert "consumer end never delivered" in row.reason
    assert row.consumer_generation is None and row.provider_generation is None


def test_delivered_but_never_probed_is_unknown(world: World) -> None:
    world.both(GITEA, 1)
    row = world.status()
    check(row, State.UNKNOWN, "never probed")
    assert (row.consumer_generation, row.provider_generation) == (1, 1)
    assert row.probed_at is None


def test_working_needs_both_ends_and_an_accepted_probe_with_a_password(world: World) -> None:
    world.both(GITEA, 1)
    world.probe(GITEA, "accepted")
    row = world.status()
    check(row, State.WORKING, "logged in from 10.213.0.3")
    assert "loopback" not in row.reason
    assert row.probed_at is not None and row.latency_ms == 4.5
    assert world.status(WIKI).state is State.STALE  # its neighbour is untouched


def test_a_loopback_probe_says_so(world: World) -> None:
    world.both(GITEA, 1)
    world.probe(GITEA, "accepted", loopback=1, client_addr="127.0.0.1")
    check(world.status(), State.WORKING, "over loopback")


@pytest.mark.parametrize(
    ("setup", "reason"),
    [
        (
            lambda w: w.deliver(GITEA, "provider", 1),
            "consumer end never delivered",
        ),
        (
            lambda w: w.deliver(GITEA, "consumer", 1),
            "provider end never delivered",
        ),
        (
            lambda w: (
                w.deliver(GITEA, "provider", 1),
                w.deliver(GITEA, "consumer", None, "unreachable: connect refused"),
            ),
            "consumer never received it: unreachable: connect refused",
        ),
        (
            lambda w: (
                w.both(GITEA, 1),
                w.probe(GITEA, "refused", reason="password authentication failed"),
            ),
            "probe refused: password authentication failed",
        ),
        (
            lambda w: (w.both(GITEA, 1), w.probe(GITEA, "unknown", reason="app1 unreachable")),
            "probe could not decide: app1 unreachable",
        ),
    ],
    ids=["consumer-missing", "provider-missing", "delivery-error", "probe-refused", "unreachable"],
)
def test_stale_always_says_why(world: World, setup: Any, reason: str) -> None:
    setup(world)
    row = world.status()
    check(row, State.STALE, reason)
    assert not row.withdrawn


def test_an_end_behind_after_a_new_generation_is_stale(world: World, mesh: Mesh) -> None:
    world.both(GITEA, 1)
    world.probe(GITEA, "accepted")
    check(world.status(), State.WORKING, "logged in")
    world.declare(["app1/wiki"])  # withdrawn ...
    world.declare(["app1/gitea", "app1/wiki"])  # ... and back: generation 2
    world.deliver(GITEA, "consumer", 2)
    row = world.status()
    assert row.generation == 2 and row.rotated_at is not None
    check(row, State.STALE, "provider holds generation 1, expected 2")
    world.deliver(GITEA, "provider", 2, None)
    check(world.status(), State.UNKNOWN, "not probed since generation 2")
    world.deliver(GITEA, "provider", 1, "agent timed out")
    check(world.status(), State.STALE, "provider holds generation 1, expected 2: agent timed out")


def test_probed_only_at_an_older_generation_is_not_working(world: World) -> None:
    world.both(GITEA, 1)
    world.probe(GITEA, "accepted")
    world.declare(["app1/wiki"])
    world.declare(["app1/gitea", "app1/wiki"])
    world.both(GITEA, 2)
    row = world.status()
    assert row.state is not State.WORKING
    assert "generation 2" in row.reason


def test_no_password_demanded_is_an_alarm(world: World) -> None:
    world.both(GITEA, 1)
    world.probe(GITEA, "no password demanded", used_password=0)
    check(world.status(), State.STALE, "ALARM: the server did not demand a password", alarm=True)


def test_an_accepted_probe_that_used_no_password_is_an_alarm_not_working(world: World) -> None:
    world.both(GITEA, 1)
    world.probe(GITEA, "accepted", used_password=0)
    check(world.status(), State.STALE, "did not demand a password", alarm=True)


# ---------------------------------------------------------------------------- withdrawn pairs


def test_withdrawn_and_not_probed_is_stale_revocation_not_verified(world: World) -> None:
    world.both(GITEA, 1)
    world.probe(GITEA, "accepted")  # a live probe from before the withdrawal proves nothing
    world.declare(["app1/wiki"])
    row = world.status()
    assert row.withdrawn
    check(row, State.STALE, "withdrawn; revocation not verified")


def test_withdrawn_and_refused_is_revoked(world: World) -> None:
    world.declare(["app1/wiki"])
    world.probe(GITEA, "refused", withdrawn=1, reason="password authentication failed (28P01)")
    check(world.status(), State.REVOKED, "withdrawn; login refused (28P01)")


def test_withdrawn_and_undecided_is_not_revoked(world: World) -> None:
    world.declare(["app1/wiki"])
    world.probe(GITEA, "unknown", withdrawn=1, reason="app1 unreachable")
    check(world.status(), State.STALE, "withdrawn; revocation not verified (app1 unreachable)")


def test_withdrawn_but_still_working_is_an_alarm(world: World) -> None:
    world.declare(["app1/wiki"])
    world.probe(GITEA, "accepted", withdrawn=1)
    check(world.status(), State.STALE, "ALARM: withdrawn but its login still works", alarm=True)


def test_withdrawn_and_let_in_without_a_password_is_an_alarm(world: World) -> None:
    world.declare(["app1/wiki"])
    world.probe(GITEA, "no password demanded", withdrawn=1, used_password=0)
    row = world.status()
    assert row.alarm and row.state is State.STALE and "ALARM" in row.reason


def test_declared_again_after_revocation_starts_over(world: World) -> None:
    world.declare(["app1/wiki"])
    world.probe(GITEA, "refused", withdrawn=1)
    world.declare(["app1/gitea", "app1/wiki"])
    world.both(GITEA, 2)
    row = world.status()
    assert not row.withdrawn
    check(row, State.UNKNOWN, "never probed")


# ---------------------------------------------------------------------------- through the CLI


def test_status_json_carries_state_reason_and_alarm_and_exits_1_on_alarm(world: World) -> None:
    world.both(GITEA, 1)
    world.probe(GITEA, "accepted")
    res = world.mesh.cli("status", "--json")
    assert res.code == 0
    rows = {r["pair"]: r for r in res.json()}
    assert rows[GITEA]["state"] == "working" and rows[GITEA]["alarm"] is False
    assert rows[GITEA]["consumer_generation"] == rows[GITEA]["provider_generation"] == 1
    assert rows[GITEA]["probed_at"] is not None
    assert rows[WIKI]["state"] == "stale"
    world.declare(["app1/wiki"])
    world.probe(GITEA, "accepted", withdrawn=1)
    res = world.mesh.cli("status", "--json")
    assert res.code == 1
    rows = {r["pair"]: r for r in res.json()}
    assert rows[GITEA]["alarm"] is True and rows[GITEA]["withdrawn"] is True
    text = world.mesh.cli("status")
    assert text.code == 1 and "ALARM" in text.out


# ---------------------------------------------------------------------------- fast path


def _status_row(values: dict[str, object]) -> tuple[object, ...]:
    """A status row from its columns by name (``rows.STATUS_COLUMNS``), in the query's order."""
    from meshtui.inventory.rows import STATUS_COLUMNS

    assert set(values) == set(STATUS_COLUMNS), set(values) ^ set(STATUS_COLUMNS)
    return tuple(values[name] for name in STATUS_COLUMNS)


_HELD: dict[str, object] = {
    "id": GITEA, "provision": "database", "consumer": "app1/gitea", "provider": "db1/postgres",
    "login": "gitea_app1_x", "file": "/srv/f", "created_at": "2026-01-01", "generation": 2,
    "rotated_at": None, "withdrawn_at": None, "consumer_generation": 2, "consumer_error": None,
    "provider_generation": 2, "provider_error": None,
}  # fmt: skip
_PROBED: dict[str, object] = {
    "verdict": "accepted", "reason": "logged in", "probed_at": "2026-01-02",
    "probe_generation": 2, "loopback": 0, "client_addr": "10.0.0.3", "probe_withdrawn": 0,
    "latency_ms": 4.5, "used_password": 1, "provider_attempted_at": "2026-01-02",
}  # fmt: skip


def test_the_plain_working_shortcut_agrees_with_the_full_rules() -> None:
    """status decides the common case (both ends current, a probe that logged in with the
    password) in one test: over every mix of the fields that test reads, it must give the
    full rules' answer, and leave every other row to them."""
    import itertools

    from meshtui.controller.read.status import _working, pair_state

    choices: dict[str, list[object]] = {
        "generation": [2, 0],  # generation wanted
        "withdrawn_at": [None, "2026-01-03"],
        "consumer_generation": [2, 1, None],  # consumer end's generation
        "consumer_error": [None, "boom"],
        "provider_generation": [2, 0, None],
        "provider_error": [None, "re-applied after it was changed", "changed outside meshtui at x"],
        "verdict": ["accepted", "refused", None, "no password demanded"],
        "probe_generation": [2, 1, None],
        "loopback": [0, 1],
        "client_addr": ["10.0.0.3", None],
        "probe_withdrawn": [0, 1],  # probe of a withdrawn pair
        "used_password": [1, 0, None],
    }
    fast = 0
    for values in itertools.product(*choices.values()):
        row = _status_row(_HELD | _PROBED | dict(zip(choices, values, strict=True)))
        reason = _working(row)  # type: ignore[arg-type]
        if reason is not None:
            fast += 1
            assert pair_state(row) == (State.WORKING, reason, False), row  # type: ignore[arg-type]
    assert fast > 0


def test_the_plain_shortcut_agrees_with_the_full_rules_never_probed_included() -> None:
    """status also decides a pair push left fine but nothing probed yet in a few tests: over
    every mix of the fields those tests read (no probe at all among them), its answer must be
    the full rules' answer."""
    import itertools

    from meshtui.controller.read.status import _plain, pair_state

    choices: dict[str, list[object]] = {
        "generation": [2, 0],  # generation wanted
        "withdrawn_at": [None, "2026-01-03"],
        "consumer_generation": [2, 1, 0, None],  # consumer end's generation
        "consumer_error": [None, "boom"],
        "provider_generation": [2, 0, None],
        "provider_error": [None, "re-applied after it was changed", "changed outside meshtui at x"],
        "verdict": ["accepted", "refused", None, "unknown", "no password demanded"],
        "probe_generation": [2, 1, None],
        "loopback": [0, 1],
        "probe_withdrawn": [0, 1],  # probe of a withdrawn pair
        "used_password": [1, 0, None],
    }
    seen: set[State] = set()
    for values in itertools.product(*choices.values()):
        chosen = dict(zip(choices, values, strict=True))
        if chosen["verdict"] is None:  # never probed: every probe column is empty
            probe = dict.fromkeys(_PROBED, None) | {"provider_attempted_at": "2026-01-02"}
        else:
            probe = _PROBED | {k: v for k, v in chosen.items() if k in _PROBED}
        row = _status_row(_HELD | probe | {k: v for k, v in chosen.items()
                                                     if k not in _PROBED})  # fmt: skip
        plain = _plain(row)  # type: ignore[arg-type]
        if plain is not None:
            seen.add(plain[0])
            assert pair_state(row) == (*plain, False), row  # type: ignore[arg-type]
    assert seen == {State.WORKING, State.UNKNOWN}
