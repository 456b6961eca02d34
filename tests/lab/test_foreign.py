"""Removing a folder another user filled: no link followed, no FIFO opened, no endless nest."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from meshtui.errors import LabError
from meshtui.kinds.postgres.lab import SERVER_USER, _ensure_system_user
from meshtui.lab.foreign import MAX_DEPTH, ForeignDir, remove_tree

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs a second real user"),
]


@pytest.fixture
def scratch() -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="meshtui-fgn-"))
    base.chmod(0o711)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def other_user_runs(shell: str, cwd: Path) -> None:
    pw = _ensure_system_user(SERVER_USER)
    subprocess.run(
        ["sh", "-c", shell], cwd=cwd, user=pw.pw_uid, group=pw.pw_gid, extra_groups=[], check=True
    )


def hostile_folder(scratch: Path) -> Path:
    folder = scratch / "theirs"
    folder.mkdir(mode=0o700)
    pw = _ensure_system_user(SERVER_USER)
    os.chown(folder, pw.pw_uid, pw.pw_gid)
    return folder


def test_remove_tree_follows_nothing(scratch: Path) -> None:
    keep = scratch / "keep"
    keep.mkdir(mode=0o700)
    (keep / "file").write_text("mine\n")
    folder = hostile_folder(scratch)
    other_user_runs(
        f"mkdir -p a/b/c && ln -s {keep} a/b/dir-link && ln -s {keep}/file a/file-link && "
        "mkfifo a/b/c/fifo && ln -s /dev/zero zero",
        folder,
    )
    remove_tree(folder)
    assert not os.path.lexists(folder)
    assert (keep / "file").read_text() == "mine\n"
    assert stat.S_IMODE(os.stat(keep).st_mode) == 0o700


def test_remove_tree_refuses_an_endless_nest(scratch: Path) -> None:
    folder = hostile_folder(scratch)
    other_user_runs(f"for i in $(seq {MAX_DEPTH + 5}); do mkdir d && cd d; done", folder)
    with pytest.raises(LabError, match="nested over"):
        remove_tree(folder)


def test_reads_refuse_links_fifos_and_oversize(scratch: Path) -> None:
    folder = hostile_folder(scratch)
    other_user_runs(
        "ln -s /etc/shadow link && mkfifo fifo && head -c 5000 /dev/zero > big && echo ok > fine",
        folder,
    )
    with ForeignDir(folder) as theirs:
        with pytest.raises(LabError, match="symbolic link"):
            theirs.read("link", 4096)
        with pytest.raises(LabError, match="FIFO, not a regular file"):
            theirs.read("fifo", 4096)
        with pytest.raises(LabError, match="over 4096 bytes"):
            theirs.read("big", 4096)
        assert theirs.read("fine", 4096) == b"ok\n"
        assert theirs.tail("big", 10) == b"\0" * 10
