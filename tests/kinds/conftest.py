"""The contract suite's fixtures: one real server per registered kind, found as
``tests/kinds/<kind>/serve.py``'s ``serve`` (see tests/kinds/contract.py), and a fresh provider folder
for each test."""

from __future__ import annotations

import importlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from meshtui.kinds import registry

from .contract import Provider, Server


def fixture_module(name: str) -> object:
    """``tests.kinds.<name>.serve``: the kind's fixture object's module (a kind without one
    fails)."""
    return importlib.import_module(f"tests.kinds.{name}.serve")


@pytest.fixture(scope="session", params=registry.NAMES)
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    """A real server of each registered kind, for the whole session."""
    serve = fixture_module(request.param).serve
    # under a folder every server's own user may pass through (pytest's base is 0700 root's;
    # a lab server runs as its own system user when the suite runs as root)
    base = Path(tempfile.mkdtemp(prefix=f"meshtui-kind-{request.param}-"))
    base.chmod(0o711)
    try:
        with serve(base) as running:
            yield running
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def provider(server: Server, tmp_path: Path) -> Iterator[Provider]:
    """A provider folder for ``server``'s kind, on a server emptied of what earlier tests made."""
    server.reset()
    folder = tmp_path / "provider"
    folder.mkdir()
    yield Provider(folder=folder, server=server)
    server.reset()
