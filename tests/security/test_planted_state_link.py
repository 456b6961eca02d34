"""Root follows no link another user planted on the way to a state folder.

Attack: the README's first command ran as root with ``--state /tmp/meshtui-demo``. ``nobody``
plants ``/tmp/meshtui-demo`` first — a link to a root folder of their choice, or a folder of
their own — and root's ``lab up``, ``init`` and every other command wrote the controller's keys,
the inventory and the whole lab through it. A folder under a world-writable folder without the
sticky bit is the same: anyone may swap it. Real user (``nobody``), real links, the real CLI.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from meshtui.lab import mesh as lab_mesh

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root and the user nobody")

COMMANDS = [["init"], ["lab", "up", "--loopback"], ["status"], ["lab", "down", "--purge"]]


def as_nobody(*argv: str | Path) -> None:
    subprocess.run(
        ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *map(str, argv)],
        check=True, stdin=subprocess.DEVNULL, cwd="/",
    )  # fmt: skip


def meshtui(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "meshtui.cli", "--state", str(state), *args],
        capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL,
    )  # fmt: skip


@pytest.fixture
def base() -> Iterator[Path]:
    """A folder ``nobody`` can enter, holding a sticky world-writable ``tmp`` (like ``/tmp``)
    and a root-owned ``victim`` folder the attacker wants root's files in."""
    folder = Path(tempfile.mkdtemp(prefix="meshtui-l4-"))
    folder.chmod(0o755)
    (folder / "tmp").mkdir()
    (folder / "tmp").chmod(0o1777)
    (folder / "victim").mkdir(mode=0o755)
    try:
        yield folder
    finally:
        for state in (folder / "victim", folder / "tmp" / "mine"):
            lab_mesh.down(state, purge=True)  # what an unrefused lab up made there
        shutil.rmtree(folder, ignore_errors=True)


def refused(done: subprocess.CompletedProcess[str], named: Path) -> None:
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and str(named) in lines[0], done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_a_link_nobody_planted_in_a_sticky_folder_is_refused(
    base: Path, command: list[str]
) -> None:
    state = base / "tmp" / "meshtui-demo"
    as_nobody("ln", "-s", base / "victim", state)
    done = meshtui(state, *command)
    refused(done, state)
    assert "symbolic link" in done.stderr and "nobody" in done.stderr
    assert list((base / "victim").iterdir()) == []


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_a_folder_nobody_made_in_a_sticky_folder_is_refused(base: Path, command: list[str]) -> None:
    state = base / "tmp" / "meshtui-demo"
    as_nobody("mkdir", "-m", "0755", state)
    done = meshtui(state, *command)
    refused(done, state)
    assert "nobody" in done.stderr
    assert list(state.iterdir()) == []


def test_a_folder_under_a_world_writable_folder_without_the_sticky_bit_is_refused(
    base: Path,
) -> None:
    (base / "open").mkdir()
    (base / "open").chmod(0o777)  # anyone may rename what is in it
    state = base / "open" / "state"
    state.mkdir(mode=0o700)
    for command in (["init"], ["lab", "up", "--loopback"]):
        done = meshtui(state, *command)
        refused(done, base / "open")
        assert "sticky" in done.stderr
        assert list(state.iterdir()) == []


def test_roots_own_link_and_folder_in_a_sticky_folder_are_taken(base: Path) -> None:
    mine = base / "tmp" / "mine"
    mine.mkdir(mode=0o700)
    link = base / "tmp" / "link"
    link.symlink_to(mine)  # root's own link: nobody can replace it (sticky)
    done = meshtui(link, "init")
    assert done.returncode == 0, done.stderr
    assert (mine / "controller.key").exists()
    fresh = base / "tmp" / "made-now" / "state"
    done = meshtui(fresh, "init")
    assert done.returncode == 0, done.stderr
    assert fresh.stat().st_uid == 0 and (fresh / "controller.key").exists()
