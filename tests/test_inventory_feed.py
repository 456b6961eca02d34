"""Every operator sees the same mesh: two controllers with their own state folders on one real
PostgreSQL inventory; a write by one wakes the other's change feed (``LISTEN``/``NOTIFY``) and
its kept status reader shows it well within a second, and the feed listens again by itself
after the server restarts."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from meshtui.controller.core import Controller
from meshtui.inventory import now
from meshtui.inventory.pg_feed import RETRY_MAX, ChangeFeed
from meshtui.inventory.rows import DeliveryRow
from meshtui.kinds.postgres.lab import Cluster
from tests.fix_lab import cli
from tests.fix_pg import inventory_database
from tests.test_status_read import PAIRS, pair_record

SEEN_WITHIN = 1.0
"""What the manual promises: another controller's write shown within a second."""


@pytest.fixture
def server(own_pg: Cluster) -> Cluster:
    return own_pg


@pytest.fixture
def states(server: Cluster, tmp_path: Path) -> tuple[Path, Path]:
    """Two controllers' state folders (ctl-a, ctl-b) on one inventory holding a few pairs."""
    folder = tmp_path / "pg"
    folder.mkdir(mode=0o700)
    conninfo = inventory_database(server, folder)
    out = []
    for name in ("ctl-a", "ctl-b"):
        state = tmp_path / name
        done = cli(state, "init", "--postgres", str(conninfo), "--name", name)
        assert done.returncode == 0, done.stderr
        out.append(state)
    with Controller.open(out[0]) as ctl, ctl.inventory.transaction("test") as tx:
        tx.put_pairs([pair_record(pid) for pid in PAIRS])
    return out[0], out[1]


def deliver(ctl: Controller, pid: str, generation: int) -> None:
    """``ctl`` records that the consumer end of ``pid`` holds ``generation``."""
    stamp = now()
    with ctl.inventory.transaction("push") as tx:
        tx.put_deliveries([DeliveryRow(pair=pid, end="consumer", generation=generation,
                                       digest=None, since=stamp, attempted_at=stamp,
                                       error=None)])  # fmt: skip


@pytest.fixture
def feed_b(states: tuple[Path, Path]) -> Iterator[ChangeFeed]:
    feed = Controller.change_feed(states[1])
    assert feed is not None
    with feed:
        assert feed.wait(0.05) is False  # listening now; nothing written since
        yield feed


@pytest.mark.parametrize("own_pg", ["18"], indirect=True)
def test_a_write_by_one_controller_is_shown_by_the_others_reader_within_a_second(
    states: tuple[Path, Path], feed_b: ChangeFeed
) -> None:
    a_state, b_state = states
    seen: list[float] = []
    seen_generation: list[int | None] = [None]
    woke = threading.Event()
    stop = threading.Event()
    with Controller.open(b_state, read_only=True) as b:
        b.status(keep=True)

        def follow() -> None:  # ctl-b's open dashboard: wakes on the feed, reads what changed
            while not stop.is_set():
                if feed_b.wait(0.2):
                    rows = {r.pair: r for r in b.status(keep=True)}
                    seen.append(time.monotonic())
                    seen_generation[0] = rows[PAIRS[0]].consumer_generation
                    woke.set()

        thread = threading.Thread(target=follow, daemon=True)
        thread.start()
        lags = []
        try:
            with Controller.open(a_state) as a:
                for generation in range(1, 6):
                    woke.clear()
                    deliver(a, PAIRS[0], generation)
                    committed = time.monotonic()
                    assert woke.wait(SEEN_WITHIN * 3), "ctl-b's reader never woke"
                    lags.append(seen[-1] - committed)
                    assert seen_generation[0] == generation
        finally:
            stop.set()
            thread.join(2)
    assert max(lags) < SEEN_WITHIN, lags  # in practice milliseconds: a poll would be ~1 s


@pytest.mark.parametrize("own_pg", ["18", "15"], indirect=True)
def test_the_feed_listens_again_after_the_server_restarts(
    server: Cluster, states: tuple[Path, Path], feed_b: ChangeFeed
) -> None:
    a_state, _ = states
    server.stop()
    assert feed_b.wait(0.5) is False
    assert feed_b.error is not None  # why it is not listening, for the dashboard to say
    server.start()
    began = time.monotonic()
    while not feed_b.wait(0.2):  # listening again: said as a change (commits went unseen)
        assert time.monotonic() - began < RETRY_MAX + 10, feed_b.error
    assert feed_b.reconnects == 1 and feed_b.error is None
    assert feed_b.wait(0.2) is False  # said once
    with Controller.open(a_state) as a:
        deliver(a, PAIRS[1], 1)
        committed = time.monotonic()
        assert feed_b.wait(SEEN_WITHIN * 3)
        assert time.monotonic() - committed < SEEN_WITHIN
