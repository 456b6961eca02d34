"""Atomic, private file writes: temp file, fsync, rename, fsync of the folder, mode 0600.

Used for keys, credentials, manifests and secret files, so a reader never sees half a file and no
other user can read one even for an instant.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
from pathlib import Path


def write_private(path: Path, data: bytes, *, mode: int = 0o600, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically, created with ``mode`` from the start.

    ``durable=False`` skips the fsyncs: still atomic, but a crash may keep the previous content
    (right for caches that can be rebuilt, wrong for credentials).
    """
    path = Path(path)
    folder = path.parent
    folder.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    while True:  # a fresh name each try: never write into a file someone else created
        tmp = (
            folder
            / f".{path.name}.{os.getpid()}.{threading.get_ident()}.{secrets.token_hex(4)}.tmp"
        )
        try:
            fd = os.open(tmp, flags, mode)
            break
        except FileExistsError:
            continue
    try:
        os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        if durable:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    os.close(fd)
    os.replace(tmp, path)
    if durable:
        sync_folder(folder)


def sync_folder(folder: Path) -> None:
    """fsync a directory so a rename or unlink inside it survives a crash."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove(path: Path) -> bool:
    """Remove a file if present and sync its folder; True when something was removed."""
    try:
        Path(path).unlink()
    except FileNotFoundError:
        return False
    sync_folder(Path(path).parent)
    return True


def read_private(path: Path) -> bytes:
    """Read a file that must not be readable by group or others (keys, credentials, conninfo)."""
    st = os.stat(path)
    if st.st_mode & 0o077:
        raise PermissionError(
            f"{path} is readable by others (mode {st.st_mode & 0o777:o}); chmod 600 {path}"
        )
    return Path(path).read_bytes()
