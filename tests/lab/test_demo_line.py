"""``meshtui demo``'s start line names every server the default mesh runs (each kind's), and
which are left out because they are not installed."""

from __future__ import annotations

from pathlib import Path

import pytest

from meshtui import cli
from meshtui.cli import lab as cli_lab
from meshtui.kinds import registry
from meshtui.lab import mesh as lab_mesh


class _Stop(Exception):
    """Raised in place of building the lab: the line before it is what is checked."""


def test_every_kind_has_a_server_in_the_default_mesh() -> None:
    assert set(lab_mesh.default_servers()) == {k.title for k in registry.KINDS.values()}


def test_the_start_line_names_every_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli_lab, "require_terminal", lambda *args: None)  # pytest has none

    def stop(*args: object, **kwargs: object) -> None:
        raise _Stop

    monkeypatch.setattr(lab_mesh, "up", stop)
    with pytest.raises(_Stop):
        cli.main(["--state", str(tmp_path / "state"), "demo"])
    line = capsys.readouterr().err.splitlines()[0]
    assert line.startswith("meshtui demo: building the lab (")
    started, _, left_out = line.partition(", namespaces, agents)")
    for title, installed in lab_mesh.default_servers().items():
        assert (title in started) == installed and (title in left_out) != installed, line
