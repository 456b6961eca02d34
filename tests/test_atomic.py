"""Atomic private writes: whole files, 0600 from the start, no temp files left behind."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from meshtui.atomic import Access, read_private, remove, write_at, write_private


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


def test_a_failed_rename_leaves_no_plaintext_temp_file(tmp_path: Path) -> None:
    """A folder at the credential path makes os.replace fail; no 0600 temp file holding the
    plaintext stays behind, however often it is tried."""
    (tmp_path / "db.password").mkdir()
    for _ in range(2):
        with pytest.raises(OSError):
            write_private(tmp_path / "db.password", b"plaintext")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["db.password"]


@pytest.mark.parametrize("failing", ["write", "fsync", "fchown"])
def test_every_failure_removes_the_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    import meshtui.atomic as atomic

    def broken(*args: object, **kwargs: object) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(atomic.os, failing, broken)
    folder = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(OSError, match="Input/output"):
            write_at(folder, "db.password", b"plaintext", access=Access(mode=0o640, uid=0, gid=0))
    finally:
        os.close(folder)
    assert list(tmp_path.iterdir()) == []


def test_a_failed_folder_fsync_after_the_rename_leaves_only_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import meshtui.atomic as atomic

    real = os.fsync
    folder = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)

    def fsync(fd: int) -> None:
        if fd == folder:
            raise OSError(5, "Input/output error")
        real(fd)

    monkeypatch.setattr(atomic.os, "fsync", fsync)
    try:
        with pytest.raises(OSError):
            write_at(folder, "db.password", b"x")
    finally:
        os.close(folder)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["db.password"]


def test_write_at_sets_owner_group_and_mode_before_the_file_appears(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rename is the moment the file appears; owner, group and mode are on it by then,
    so a watcher never sees the credential with the writer's owner or a looser mode."""
    seen: list[tuple[int, int, int]] = []
    real = os.replace

    def replace(src: str, dst: str, **kwargs: int) -> None:
        st = os.stat(src, dir_fd=kwargs["src_dir_fd"])
        seen.append((stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid))
        real(src, dst, **kwargs)

    import meshtui.atomic as atomic

    monkeypatch.setattr(atomic.os, "replace", replace)
    folder = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        write_at(folder, "db.password", b"x", access=Access(mode=0o640, uid=65534, gid=65534))
    finally:
        os.close(folder)
    st = (tmp_path / "db.password").stat()
    assert seen == [(0o640, 65534, 65534)]
    assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o640, 65534, 65534)
    assert (tmp_path / "db.password").read_bytes() == b"x"


def test_write_at_refuses_names_with_a_slash(tmp_path: Path) -> None:
    folder = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for bad in ("../x", "a/b", "", ".."):
            with pytest.raises(ValueError):
                write_at(folder, bad, b"x")
    finally:
        os.close(folder)


def test_read_private_never_follows_a_link_nor_waits_on_a_fifo(tmp_path: Path) -> None:
    key = tmp_path / "node.key"
    write_private(key, b"k")
    link = tmp_path / "link.key"
    link.symlink_to(key)
    with pytest.raises(OSError):
        read_private(link)
    fifo = tmp_path / "fifo.key"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(OSError, match="not a regular file"):
        read_private(fifo)  # returns at once: opened O_NONBLOCK, refused on fstat


def test_write_many_at_replaces_each_file_and_leaves_no_temp(tmp_path):
    import os

    from meshtui.atomic import Access, write_many_at

    (tmp_path / "a").write_bytes(b"old")
    (tmp_path / "in-the-way").mkdir()
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        write_many_at(fd, {"a": b"new a", "b": b"new b"}, access=Access(mode=0o640))
        assert (tmp_path / "a").read_bytes() == b"new a"
        assert (tmp_path / "b").read_bytes() == b"new b"
        assert {oct((tmp_path / n).stat().st_mode & 0o777) for n in "ab"} == {"0o640"}
        try:
            write_many_at(fd, {"c": b"c", "in-the-way": b"x"})
        except OSError:
            pass
        else:
            raise AssertionError("a folder in the way must fail the write")
    finally:
        os.close(fd)
    assert sorted(p.name for p in tmp_path.iterdir()) in (
        ["a", "b", "c", "in-the-way"],
        ["a", "b", "in-the-way"],
    )  # each name old or new; no temp file left
