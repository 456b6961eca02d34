"""The pair's screen says how many sessions on an old credential remain while they drain, and
until when; nothing when none drains."""

from __future__ import annotations

from meshtui.controller.reports import Draining, PairDetail
from meshtui.model import PairStatus, State
from meshtui.tui.screens.pair import holders_text

PAIR = "cache:app1/gitea->db1/redis"


def _detail(draining: Draining | None) -> tuple[PairStatus, PairDetail]:
    st = PairStatus(
        PAIR, "cache", "app1/gitea", "db1/redis", "gitea_app1_x", 6, 6, 6, False,
        State.WORKING, "", None, None, "/etc/gitea/redis.password", "2026-12-06T05:00:00+00:00",
    )  # fmt: skip
    detail = PairDetail(st, {}, [], [], [], [], [], [], draining=draining)
    return st, detail


def test_the_pair_screen_counts_the_sessions_left_to_drain() -> None:
    until = "2026-12-06T05:15:00.000000+00:00"
    counted = "2026-12-06T05:01:00.000000+00:00"
    st, detail = _detail(Draining(PAIR, 2, until, counted))
    text = holders_text(st, detail).plain
    assert f"draining: 2 sessions on the old credential (counted {counted})" in text, text
    assert f"ended at {until} at the latest" in text, text
    st, detail = _detail(None)
    assert "draining" not in holders_text(st, detail).plain
