"""Shared fixtures: each family lives in its own plugin module."""

pytest_plugins = [
    "tests.fix_run",
    "tests.fix_pg",
    "tests.fix_netns",
    "tests.fix_mesh",
    "tests.fix_agents",
]
