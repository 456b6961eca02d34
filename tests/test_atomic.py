"""Atomic private writes: whole files, 0600 from the start, no temp files left behind."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from meshtui.atomic import read_private, remove, write_private


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_write_private_creates_folders_and_a_0600_file(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "secret"
    write_private(path, b"one")
    assert path.read_bytes() == b"one" and mode(path) == 0o600
    write_private(path, b"two")
    assert path.read_bytes() == b"two" and mode(path) == 0o600
    assert sorted(p.name for p in path.parent.iterdir()) == ["secret"]


def test_write_private_tightens_an_existing_loose_file(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    path.write_bytes(b"old")
    path.chmod(0o644)
    write_private(path, b"new")
    assert mode(path) == 0o600 and path.read_bytes() == b"new"


def test_write_private_with_another_mode(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        write_private(tmp_path / "pub", b"x", mode=0o644)
    finally:
        os.umask(old)
    assert mode(tmp_path / "pub") == 0o644


def test_write_private_never_follows_a_planted_symlink(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_bytes(b"keep")
    path = tmp_path / "secret"
    # plant links at every name a writer of this process could have used before: temp names
    # are now unpredictable and opened O_EXCL|O_NOFOLLOW, so no planted file is ever written
    (tmp_path / f".secret.{os.getpid()}.{threading.get_ident()}.tmp").symlink_to(target)
    write_private(path, b"x")
    assert target.read_bytes() == b"keep"
    assert path.read_bytes() == b"x" and not path.is_symlink()
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == [
        f".secret.{os.getpid()}.{threading.get_ident()}.tmp"
    ]


def test_read_private_refuses_group_or_world_readable(tmp_path: Path) -> None:
    path = tmp_path / "key"
    write_private(path, b"k")
    assert read_private(path) == b"k"
    for loose in (0o640, 0o604, 0o660):
        path.chmod(loose)
        with pytest.raises(PermissionError, match=f"chmod 600 {path}"):
            read_private(path)


def test_remove(tmp_path: Path) -> None:
    path = tmp_path / "x"
    write_private(path, b"x")
    assert remove(path) is True
    assert remove(path) is False
    assert not path.exists()


def test_two_threads_writing_one_file_both_succeed_and_one_wins(tmp_path: Path) -> None:
    path = tmp_path / "manifest"
    blobs = [bytes([65 + i]) * (1 << 20) for i in range(4)]
    for _ in range(5):
        errors: list[BaseException] = []
        barrier = threading.Barrier(len(blobs))

        def write(
            data: bytes, barrier: threading.Barrier = barrier, errors: list[BaseException] = errors
        ) -> None:
            barrier.wait()
            try:
                write_private(path, data)
            except BaseException as exc:  # collected for the assert below
                errors.append(exc)

        threads = [threading.Thread(target=write, args=(b,)) for b in blobs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert path.read_bytes() in blobs
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest"]
