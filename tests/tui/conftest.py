"""Fixtures for the dashboard's pilot tests: a built state folder (copied per test), an app on
it with a fixed clock and no user keymap, and fake controller actions."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.tui.builder import Built, build
from tests.tui.helpers import FakeActions, RecordingApp, install_fake


@pytest.fixture(autouse=True)
def no_user_config(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keep the developer's own keymap and NO_COLOR out of every test."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("xdg")))
    monkeypatch.delenv("NO_COLOR", raising=False)


@pytest.fixture(scope="session")
def built_template(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """One built state per session (keys are slow to make); tests copy it."""
    return build(tmp_path_factory.mktemp("tpl"))


@pytest.fixture
def built(built_template: Built, tmp_path: Path) -> Built:
    """A private copy of the template: 8 pairs on db1/db2 and app1/app2, mixed states."""
    root = tmp_path / "mesh"
    shutil.copytree(built_template.state.parent, root)
    return Built(
        state=root / "st", declaration=root / "mesh.toml", pairs=list(built_template.pairs)
    )


@pytest.fixture
def make_app(built: Built) -> Callable[..., RecordingApp]:
    """``make_app(read_only=False, screen=None, **kw)`` on the ``built`` state."""

    def make(**kwargs: Any) -> RecordingApp:
        return RecordingApp(built.state, **kwargs)

    return make


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeActions:
    """The controller's actions answered by :class:`FakeActions`."""
    return install_fake(monkeypatch)
