"""A real unprivileged system user, and a folder under /tmp it may reach, for the attacks."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.passwd import account


@dataclass(frozen=True)
class Attacker:
    """A system user made for one test (``useradd``), and how to run a command as that user."""

    name: str
    uid: int
    gid: int

    def run(self, *argv: str | Path) -> None:
        """Run ``argv`` as this user (runuser), failing the test if it fails."""
        done = subprocess.run(
            ["runuser", "-u", self.name, "--", *map(str, argv)], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr


@pytest.fixture
def attacker() -> Iterator[Attacker]:
    name = f"mtatk{os.getpid() % 100000}"
    account("useradd", "-M", "-N", name)
    try:
        import pwd

        entry = pwd.getpwnam(name)
        yield Attacker(name, entry.pw_uid, entry.pw_gid)
    finally:
        account("userdel", name, check=False)


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A root-owned folder under /tmp that any user may pass through (0711)."""
    base = Path(tempfile.mkdtemp(prefix="meshtui-atk-"))
    base.chmod(0o711)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)
