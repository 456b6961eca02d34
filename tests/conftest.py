"""Shared fixtures: each family lives in its own plugin module."""

import pytest

pytest_plugins = [
    "tests.fix_run",
    "tests.fix_pg",
    "tests.fix_netns",
    "tests.fix_mesh",
    "tests.fix_agents",
]


@pytest.fixture(autouse=True)
def _operator_labels_the_lock() -> None:
    """An in-process Watch labels the delivery lock ``watch`` for its process (``lock.WHO``);
    each test starts as an operator again, so no label leaks into the next test's messages."""
    from meshtui.controller import lock

    lock.WHO = None
