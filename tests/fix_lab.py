"""A running lab for a test module: built, declared and pushed, torn down and purged after.

Not a plugin: modules that need a lab call :func:`running_lab` from their own module-scoped
fixture, with the prefix of their temp folder and what ``lab up`` should build.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from meshtui.controller.core import Controller
from meshtui.lab import mesh as lab_mesh
from meshtui.lab import netns, runs


def skip_without_netns() -> None:
    """Skip, saying why, unless this run is root and namespaces work here."""
    if os.geteuid() != 0 or not netns.available():
        pytest.skip("needs root and network namespaces")


@contextmanager
def running_lab(
    prefix: str, *, supply: bool = True, **up: Any
) -> Iterator[tuple[Path, lab_mesh.Lab]]:
    """A lab in a fresh folder (``lab up`` with ``up``), declared and pushed; removed after.
    ``supply``: every own secret an operator supplies is supplied (a random value), so the
    lab is all working (``probe`` exits 0); False leaves them waiting for ``secret put``."""
    skip_without_netns()
    state = Path(tempfile.mkdtemp(prefix=prefix))
    state.chmod(0o711)  # the PostgreSQL user must be able to enter it
    runs.mark_folder(state)  # an interrupted run's sweep removes it
    try:
        built = lab_mesh.up(state, **up)
        with Controller.open(state) as ctl:
            ctl.declare(built.declaration)
            assert ctl.push().ok
            for s in ctl.secrets() if supply else []:
                if s.origin == "supplied" and not s.version:
                    ctl.secret_put(s.module, s.name, secrets.token_hex(16).encode(), "lab")
        yield state, built
    finally:
        lab_mesh.down(state, purge=True)
        shutil.rmtree(state, ignore_errors=True)


def cli(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``meshtui --state STATE ARGS…`` in a fresh process, its output as text."""
    return subprocess.run(
        [sys.executable, "-m", "meshtui.cli", "--state", str(state), *args],
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
    )
