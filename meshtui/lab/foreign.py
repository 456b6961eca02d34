"""Root's only way into a folder another user controls (the PostgreSQL data directory).

The server's OS user can put anything at any name in its own folder: a symlink to a root-only
file, a FIFO, a forged file. So root opens the folder once (``O_DIRECTORY|O_NOFOLLOW``) and
works relative to that descriptor: files are opened with ``O_NOFOLLOW|O_NONBLOCK`` and must be
regular, reads are capped, writes go to a fresh random name created with ``O_EXCL`` and are
chmod-ed and chown-ed on the descriptor before an in-folder rename, and removal walks
descriptors and never follows a link. Nothing here resolves a name twice.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from types import TracebackType

from meshtui.atomic import Access, write_at
from meshtui.errors import LabError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
MAX_DEPTH = 64  # a PostgreSQL data directory is 4 levels deep; deeper is someone's trap


def kind_of(mode: int) -> str:
    """A file type in words, for error messages."""
    kinds = [
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ]
    return next((word for test, word in kinds if test(mode)), "a regular file")


def open_dir(path: Path, *, owner: int | None = None, dir_fd: int | None = None) -> int:
    """Open the folder ``path`` itself (never a link there); check its owner when given."""
    try:
        fd = os.open(path, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        raise _named(path, exc, dir_fd=dir_fd, want="a folder") from None
    st = os.fstat(fd)
    if owner is not None and st.st_uid != owner:
        os.close(fd)
        raise LabError(f"{path} belongs to uid {st.st_uid}, not to uid {owner}; refusing to use it")
    return fd


def _named(path: Path, exc: OSError, *, dir_fd: int | None, want: str) -> LabError:
    """A LabError saying what is at ``path`` instead of ``want``."""
    try:
        found = kind_of(os.lstat(path, dir_fd=dir_fd).st_mode)
    except OSError:
        found = ""
    if found and found != want:
        return LabError(
            f"{path} is {found}, not {want}; meshtui never follows or opens that in a folder "
            "another user controls (remove it and run again)"
        )
    return LabError(f"cannot open {path}: {exc.strerror or exc}")


class ForeignDir:
    """A folder another user may write in, held open; every name is taken relative to it."""

    def __init__(self, path: Path, *, owner: int | None = None) -> None:
        self.path = path
        self.fd = open_dir(path, owner=owner)

    def __enter__(self) -> ForeignDir:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Let go of the folder."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    @property
    def owner(self) -> int:
        """The folder's owner, from the open descriptor."""
        return os.fstat(self.fd).st_uid

    def mode_of(self, name: str) -> int | None:
        """``lstat`` of ``name`` (a link is reported, not followed); None when absent."""
        try:
            return os.lstat(name, dir_fd=self.fd).st_mode
        except FileNotFoundError:
            return None

    def names(self) -> list[str]:
        """What the folder holds."""
        return os.listdir(self.fd)

    def _open_regular(self, name: str) -> int:
        try:
            fd = os.open(name, _READ_FLAGS, dir_fd=self.fd)
        except OSError as exc:
            raise _named(self.path / name, exc, dir_fd=self.fd, want="a regular file") from None
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            raise LabError(
                f"{self.path / name} is {kind_of(mode)}, not a regular file; meshtui never reads "
                "that in a folder another user controls (remove it and run again)"
            )
        return fd

    def read(self, name: str, limit: int) -> bytes:
        """The whole of the regular file ``name``, refused when over ``limit`` bytes."""
        fd = self._open_regular(name)
        try:
            data = _read_up_to(fd, limit + 1)
        finally:
            os.close(fd)
        if len(data) > limit:
            raise LabError(f"{self.path / name} is over {limit} bytes; refusing to read it")
        return data

    def tail(self, name: str, size: int) -> bytes:
        """The last ``size`` bytes (at most) of the regular file ``name``."""
        fd = self._open_regular(name)
        try:
            end = os.fstat(fd).st_size
            os.lseek(fd, max(0, end - size), os.SEEK_SET)
            return _read_up_to(fd, size)
        finally:
            os.close(fd)

    def write(self, name: str, data: bytes, *, uid: int | None, gid: int | None) -> None:
        """Replace ``name`` with ``data``: a fresh 0600 file, handed to ``uid``:``gid`` on its
        descriptor, renamed into place inside the folder (a link at ``name`` is replaced, never
        followed)."""
        access = Access(0o600, -1 if uid is None else uid, -1 if gid is None else gid)
        try:
            write_at(self.fd, name, data, access=access)
        except OSError as exc:
            raise LabError(f"cannot write {self.path / name}: {exc.strerror or exc}") from None


def _read_up_to(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    left = limit
    while left > 0:
        chunk = os.read(fd, min(left, 65536))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def remove_tree(path: Path) -> None:
    """Delete the folder ``path`` and everything in it, following no link on the way.

    ``path``'s parent must be a folder only root (or the caller) controls; below it, other
    users may have planted links, FIFOs or deep nests: links are removed, not followed, and a
    nest deeper than :data:`MAX_DEPTH` is refused.
    """
    parent = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        mode = os.lstat(path.name, dir_fd=parent).st_mode
    except FileNotFoundError:
        os.close(parent)
        return
    try:
        if stat.S_ISDIR(mode):
            fd = open_dir(Path(path.name), dir_fd=parent)
            try:
                _empty(fd, path, 0)
            finally:
                os.close(fd)
            os.rmdir(path.name, dir_fd=parent)
        else:
            os.unlink(path.name, dir_fd=parent)
    except OSError as exc:
        raise LabError(f"could not remove {path}: {exc}") from None
    finally:
        os.close(parent)


def _empty(fd: int, where: Path, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise LabError(f"{where} is nested over {MAX_DEPTH} folders deep; remove it by hand")
    for name in os.listdir(fd):
        try:
            mode = os.lstat(name, dir_fd=fd).st_mode
        except FileNotFoundError:
            continue
        if not stat.S_ISDIR(mode):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=fd)
            continue
        try:
            child = open_dir(Path(name), dir_fd=fd)
        except LabError:
            # swapped for something else since the lstat: remove that name, whatever it is now
            with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                os.unlink(name, dir_fd=fd)
            continue
        try:
            _empty(child, where / name, depth + 1)
        finally:
            os.close(child)
        with contextlib.suppress(FileNotFoundError):
            os.rmdir(name, dir_fd=fd)
