"""Never a screen where text was asked for: the real CLI, run with its output in a pipe (no
terminal), prints text or refuses with one line and exit 2, within a timeout; it never draws
the dashboard into the pipe."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from meshtui.errors import InputError
from meshtui.terminal import TEXT_INSTEAD, require_terminal
from tests.fix_mesh import Mesh, modules

TIMEOUT_S = 60


def piped(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``meshtui --state STATE ARGS`` with stdin, stdout and stderr not a terminal."""
    return subprocess.run(
        [sys.executable, "-m", "meshtui.cli", "--state", str(state), *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


@pytest.fixture
def declared(mesh: Mesh) -> Mesh:
    res = mesh.cli("declare", mesh.write(mesh.spec(modules(["app1/gitea", "app2/wiki"]))))
    assert res.code == 0, res.err
    return mesh


def test_audit_in_a_pipe_prints_the_log_as_text(declared: Mesh) -> None:
    done = piped(declared.state, "audit")
    assert done.returncode == 0, done.stderr
    assert " declare " in done.stdout and "\x1b" not in done.stdout
    assert done.stdout == piped(declared.state, "audit", "--list").stdout


@pytest.mark.parametrize("args", [(), ("--read-only",)], ids=["dashboard", "read-only"])
def test_the_dashboard_in_a_pipe_refuses_in_one_line(declared: Mesh, args: tuple[str, ...]) -> None:
    done = piped(declared.state, *args)
    assert done.returncode == 2
    assert done.stdout == "" and "\x1b" not in done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert "the dashboard needs a terminal" in done.stderr
    assert "meshtui status" in done.stderr and "audit --list" in done.stderr


def test_the_demo_in_a_pipe_refuses_before_building_anything(tmp_path: Path) -> None:
    state = tmp_path / "state"
    done = piped(state, "demo")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "needs a terminal" in done.stderr, done.stderr
    assert "meshtui lab up" in done.stderr
    assert not state.exists(), "the demo built a lab it could not show"


def test_the_dashboard_itself_refuses_without_a_terminal(declared: Mesh) -> None:
    from meshtui.tui.app import run_dashboard

    with pytest.raises(InputError, match="the dashboard needs a terminal"):
        run_dashboard(declared.state, read_only=True)  # pytest's stdin is not a terminal
    with pytest.raises(InputError) as info:
        require_terminal("the view")
    assert TEXT_INSTEAD in str(info.value)
