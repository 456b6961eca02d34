"""The contract suite's fixtures: one real server per registered kind, found as
``tests/kinds/<kind>.py``'s ``serve`` (see tests/kinds/contract.py), and a fresh provider folder
for each test."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from meshtui.kinds import registry

from .contract import Provider, Server


def fixture_module(name: str) -> object:
    """``tests.kinds.<name>``: the kind's fixture object's module (a kind without one fails)."""
    return importlib.import_module(f"tests.kinds.{name}")


@pytest.fixture(scope="session", params=registry.NAMES)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """A real server of each registered kind, for the whole session."""
    serve = fixture_module(request.param).serve
    with serve(tmp_path_factory.mktemp(f"kind-{request.param}")) as running:
        yield running


@pytest.fixture
def provider(server: Server, tmp_path: Path) -> Iterator[Provider]:
    """A provider folder for ``server``'s kind, on a server emptied of what earlier tests made."""
    server.reset()
    folder = tmp_path / "provider"
    folder.mkdir()
    yield Provider(folder=folder, server=server)
    server.reset()
