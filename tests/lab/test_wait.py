"""The lab's one way to wait: it stops as soon as the condition holds, gives up on time or when
told there is no point, and its error names what it waited for."""

from __future__ import annotations

import time

import pytest

from meshtui.errors import LabError
from meshtui.lab.wait import poll, wait_until


def test_poll_returns_once_ready() -> None:
    calls = iter([False, False, True])
    started = time.monotonic()
    assert poll(lambda: next(calls), 5, every=0.01) is True
    assert time.monotonic() - started < 1


def test_poll_gives_up_on_time() -> None:
    started = time.monotonic()
    assert poll(lambda: False, 0.1, every=0.01) is False
    assert 0.1 <= time.monotonic() - started < 1


def test_poll_stops_when_waiting_is_pointless() -> None:
    seen: list[str] = []
    assert poll(lambda: seen.append("ready") or False, 5, unless=lambda: bool(seen)) is False
    assert seen == ["ready"]


def test_wait_until_names_what_it_waited_for() -> None:
    with pytest.raises(LabError, match="waiting for the agent of app1 to answer"):
        wait_until(lambda: False, 0.05, "the agent of app1 to answer", every=0.01)
