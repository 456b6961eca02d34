"""Network-namespace fixtures: a private network of namespaces for tests that need one.

``netns`` is a session-scoped :class:`~meshtui.lab.netns.Network` with the nodes ``db1``,
``app1`` and ``app2`` under a prefix unique to this test run, destroyed at the end. It is
skipped, with the reason, when not root or when namespaces cannot be made here.

Tests marked ``root`` are skipped with a clear reason when the run is not root.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from meshtui.lab import netns as lab_netns

NODES = ["db1", "app1", "app2"]


def _why_no_netns() -> str | None:
    if os.geteuid() != 0:
        return "needs root: network namespaces (ip netns) are root-only"
    if not lab_netns.available():
        return "network namespaces are not usable here (no ip, or ip netns add is refused)"
    return None


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("root") is not None and os.geteuid() != 0:
        pytest.skip("needs root (marked root: network namespaces, a dedicated PostgreSQL user)")


def netns_prefix(tag: str = "t") -> str:
    """A network name unique to this process: ``mt`` + tag + pid (at most 12 characters)."""
    return f"mt{tag}{os.getpid()}"[:12]


@pytest.fixture(scope="session")
def netns() -> Iterator[lab_netns.Network]:
    """Three namespaces (db1, app1, app2) on a bridge, no default route; removed at the end."""
    why = _why_no_netns()
    if why:
        pytest.skip(why)
    name = netns_prefix()
    lab_netns.destroy(name)  # a crashed run with the same pid may have left some behind
    try:
        yield lab_netns.create(name, NODES)
    finally:
        lab_netns.destroy(name)
