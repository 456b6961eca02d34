"""Atomic, private file writes: temp file, owner and mode, fsync, rename, fsync of the folder.

Used for keys, credentials, manifests and secret files, so a reader never sees half a file and no
other user can read one even for an instant. :func:`write_at` works inside a folder the caller
opened once (a descriptor), so nothing is looked up by path twice; a failed write leaves no
temp file behind.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class Access:
    """Who may read a written file: its mode, and its owner and group ids (-1 keeps the
    writer's own, as ``fchown`` does)."""

    mode: int = 0o600
    uid: int = -1
    gid: int = -1


PRIVATE = Access()


def write_at(
    folder_fd: int,
    name: str,
    data: bytes,
    *,
    access: Access = PRIVATE,
    durable: bool = True,
) -> None:
    """Replace ``name`` inside the open folder ``folder_fd`` with ``data``, atomically.

    The temp file is created ``O_EXCL|O_NOFOLLOW`` under a fresh random name, given its owner,
    group and mode on the descriptor before a byte is written, fsynced, then renamed over
    ``name`` (a rename never follows a link planted there). Whatever fails, the temp file is
    removed. ``durable=False`` skips the fsyncs: still atomic, but a crash may keep the
    previous content (right for caches that can be rebuilt, wrong for credentials).
    """
    _publish(folder_fd, _write_temp(folder_fd, name, data, access, durable=durable), name,
             durable=durable)  # fmt: skip


def write_at_after(
    folder_fd: int,
    name: str,
    data: bytes,
    before: Callable[[], None],
    *,
    access: Access = PRIVATE,
) -> None:
    """:func:`write_at`, with ``before`` (writes that must be durable first) run meanwhile.

    The temp file is written and fsynced on a worker thread while ``before`` runs here (the
    two fsyncs overlap); ``name`` is replaced only after ``before`` returned. Should ``before``
    raise, the temp file is removed and ``name`` is left as it was.
    """
    from concurrent.futures import ThreadPoolExecutor  # start-up: status never waits on one

    with ThreadPoolExecutor(max_workers=1) as pool:
        staged = pool.submit(_write_temp, folder_fd, name, data, access, durable=True)
        try:
            before()
        except BaseException:
            with contextlib.suppress(Exception):
                os.unlink(staged.result(), dir_fd=folder_fd)
            raise
        tmp = staged.result()
    _publish(folder_fd, tmp, name)


def write_many_at(folder_fd: int, files: dict[str, bytes], *, access: Access = PRIVATE) -> None:
    """:func:`write_at` for several files of one folder, as durable, with fewer waits.

    Every temp file is written and fsynced (in parallel threads, so the filesystem commits
    them together rather than one journal commit each) before any is renamed; then each is
    renamed over its name and the folder is fsynced once. A crash leaves each name with its old
    or its new content, never half of one; a failure removes every temp file not yet renamed.
    """
    if len(files) < 2:
        for name, data in files.items():
            write_at(folder_fd, name, data, access=access)
        return
    temps: dict[str, str] = {}
    try:
        for name, data in files.items():
            temps[name] = _write_temp(folder_fd, name, data, access, durable=False)
        from concurrent.futures import ThreadPoolExecutor  # start-up: see above

        with ThreadPoolExecutor(max_workers=min(SYNC_THREADS, len(temps))) as pool:
            list(pool.map(lambda tmp: _fsync_at(folder_fd, tmp), temps.values()))
        for name in list(temps):
            os.replace(temps[name], name, src_dir_fd=folder_fd, dst_dir_fd=folder_fd)
            del temps[name]
        os.fsync(folder_fd)
    except BaseException:
        for tmp in temps.values():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=folder_fd)
        raise


def write_unnamed(folder_fd: int, data: bytes, *, access: Access = PRIVATE) -> int:
    """A file holding ``data`` on the open folder's filesystem that has no name yet
    (``O_TMPFILE``): given its owner, group and mode before a byte is written, and fsynced.

    Returns its descriptor. Being in no folder, nobody can open it; closing the descriptor
    without :func:`link_at` frees it, and so does a crash. OSError (EOPNOTSUPP, EISDIR) on a
    filesystem without unnamed files.
    """
    fd = os.open(".", os.O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC, 0o600, dir_fd=folder_fd)
    try:
        _fill(fd, data, access)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        raise
    return fd


def link_at(folder_fd: int, fd: int, name: str, *, named: Callable[[], None] | None = None) -> None:
    """Give the unnamed file ``fd`` (:func:`write_unnamed`, same filesystem) the name ``name``
    inside the open folder, replacing what is there, atomically and durably.

    Its content, owner and mode are already on disk, so what is left is the name: linked
    under a fresh temp name (a link cannot replace a name), renamed over ``name`` (never
    following a link planted there), the folder fsynced. A failure removes the temp name.
    ``named`` is called once the name is there for readers, before the folder's fsync (which
    makes it survive a crash, and still comes before this returns).
    """
    _check_name(name)
    while True:
        tmp = _temp_name(name)
        try:
            os.link(f"/proc/self/fd/{fd}", tmp, dst_dir_fd=folder_fd, follow_symlinks=True)
            break
        except FileExistsError:
            continue
    _publish(folder_fd, tmp, name, named=named)


SYNC_THREADS = 16


def _publish(
    folder_fd: int,
    tmp: str,
    name: str,
    *,
    durable: bool = True,
    named: Callable[[], None] | None = None,
) -> None:
    """Rename the temp file ``tmp`` over ``name`` (never following a link planted there) and
    fsync the folder; whatever fails, the temp name is removed. ``named``: called right after
    the rename (see :func:`link_at`)."""
    try:
        os.replace(tmp, name, src_dir_fd=folder_fd, dst_dir_fd=folder_fd)
        if named is not None:
            named()
        if durable:
            os.fsync(folder_fd)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=folder_fd)
        raise


def _check_name(name: str) -> None:
    if "/" in name or name in ("", ".", ".."):
        raise ValueError(f"{name!r} is not a file name")


def _temp_name(name: str) -> str:
    """A temp name beside ``name`` unlikely to be taken (callers retry on EEXIST)."""
    return f".{name}.{os.getpid()}.{threading.get_ident()}.{secrets.token_hex(4)}.tmp"


def _fill(fd: int, data: bytes, access: Access) -> None:
    """Give a new file its owner, group and mode, then ``data`` (nothing readable before)."""
    os.fchmod(fd, 0o600)
    if access.uid != -1 or access.gid != -1:
        os.fchown(fd, access.uid, access.gid)
    os.fchmod(fd, access.mode)  # after fchown, which may clear mode bits
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _fsync_at(folder_fd: int, name: str) -> None:
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder_fd)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_temp(folder_fd: int, name: str, data: bytes, access: Access, *, durable: bool) -> str:
    """A fresh temp file beside ``name`` holding ``data`` with its access; its name."""
    _check_name(name)
    while True:  # a fresh name each try: never write into a file someone else created
        tmp = _temp_name(name)
        try:
            fd = os.open(tmp, _CREATE, 0o600, dir_fd=folder_fd)
            break
        except FileExistsError:
            continue
    try:
        try:
            _fill(fd, data, access)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=folder_fd)
        raise
    return tmp


def write_private(path: Path, data: bytes, *, mode: int = 0o600, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically, created with ``mode`` from the start.

    For paths the caller trusts (its own state folder): the folder is created when missing and
    opened once; the write itself is :func:`write_at`.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        write_at(folder, path.name, data, access=Access(mode=mode), durable=durable)
    finally:
        os.close(folder)


def sync_folder(folder: Path) -> None:
    """fsync a directory so a rename or unlink inside it survives a crash."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_at(folder_fd: int, name: str) -> bool:
    """Unlink ``name`` inside the open folder (a link is removed, never followed) and sync the
    folder; True when something was removed."""
    try:
        os.unlink(name, dir_fd=folder_fd)
    except FileNotFoundError:
        return False
    os.fsync(folder_fd)
    return True


def remove(path: Path) -> bool:
    """Remove a file if present and sync its folder; True when something was removed."""
    try:
        Path(path).unlink()
    except FileNotFoundError:
        return False
    sync_folder(Path(path).parent)
    return True


MAX_PRIVATE = 64 * 1024
"""Keys and conninfo files are a few hundred bytes."""


def read_private(path: Path) -> bytes:
    """Read a file that must not be readable by group or others (keys, credentials, conninfo).

    Opened without following a link and without blocking; the checks are made on the open
    descriptor, so what is checked is what is read: a regular file, private, and small.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, f"{path} is not a regular file")
        if st.st_mode & 0o077:
            raise PermissionError(
                f"{path} is readable by others (mode {st.st_mode & 0o777:o}); chmod 600 {path}"
            )
        data = os.read(fd, MAX_PRIVATE + 1)
        if len(data) > MAX_PRIVATE:
            raise OSError(errno.EFBIG, f"{path} is larger than {MAX_PRIVATE} bytes")
        return data
    finally:
        os.close(fd)
