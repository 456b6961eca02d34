"""How the provisioner reads its files: the manifest, its secret files and the admin conninfo.

The provisioner often runs as root (the agent's built-in one, or ``meshtui provision``) while
those files may sit in a folder of the database's OS user. Every folder is therefore reached
from ``/`` without following a link and must be root's or this process's user's and writable by
nobody else (:func:`meshtui.folders.open_folder`); files are read by descriptor, never
through a link, never waiting on a FIFO, capped. A folder or file that fails is a clear error
naming it, never a read of something the folder's owner chose.
"""

from __future__ import annotations

import os
from pathlib import Path

from meshtui.errors import HostFileError, ManifestError, MeshtuiError, ProvisionError
from meshtui.folders import Folder, open_folder, user_name

MAX_ADMIN_BYTES = 65536


def _missing(folder: Folder, name: str) -> bool:
    try:
        os.stat(name, dir_fd=folder.fd, follow_symlinks=False)
    except FileNotFoundError:
        return True
    return False


def read_manifest(path: Path, limit: int) -> bytes:
    """The manifest's bytes through its checked folder; ManifestError naming it otherwise."""
    try:
        folder = open_folder(path.parent, work_in=False)
        if folder is None:
            raise ManifestError(
                f"{path}: cannot be read (No such file or directory); nothing was changed"
            )
        with folder:
            data = folder.read(path.name, limit=limit)
            if data is None and _missing(folder, path.name):
                raise ManifestError(
                    f"{path}: cannot be read (No such file or directory); nothing was changed"
                )
    except HostFileError as exc:
        raise ManifestError(f"{path}: cannot be read: {exc}; nothing was changed") from None
    except OSError as exc:
        raise ManifestError(
            f"{path}: cannot be read ({exc.strerror}); nothing was changed"
        ) from None
    return data or b""


def read_admin(
    path: Path, what: str = "admin file", error: type[MeshtuiError] = ProvisionError
) -> str:
    """The admin conninfo from a private (0600) regular file owned by root or this user, in a
    checked folder; never from argv or environment. ``error`` (ProvisionError) naming the file
    as ``what`` otherwise (the controller reads its inventory's conninfo file the same way)."""
    me = os.geteuid()
    try:
        folder = open_folder(path.parent, work_in=False)
        if folder is None:
            raise error(f"{path}: {what} cannot be read (No such file or directory)")
        with folder:
            got = folder.read_with_stat(path.name, limit=MAX_ADMIN_BYTES)
    except HostFileError as exc:
        raise error(f"{what} {path}: {exc}") from None
    except OSError as exc:
        raise error(f"{path}: {what} cannot be read ({exc.strerror})") from None
    if got is None:
        raise error(f"{path}: {what} is missing or empty (write a libpq conninfo into it)")
    data, info = got
    if info.st_uid not in (0, me):
        raise error(
            f"{path}: {what} is owned by {user_name(info.st_uid)}, who could point meshtui "
            f"anywhere (chown {user_name(me)} {path})"
        )
    if info.st_mode & 0o077:
        raise error(
            f"{path}: {what} is readable by others (mode {info.st_mode & 0o777:o}; "
            f"chmod 600 {path})"
        )
    text = data.decode("utf-8", "replace").strip()
    if not text:
        raise error(f"{path}: {what} is empty (write a libpq conninfo into it)")
    return text


class SecretFiles:
    """The secret files a manifest names, read through checked folders opened once per run."""

    def __init__(self, folder: str, limit: int) -> None:
        self.base = folder
        self.limit = limit
        self.folders: dict[str, Folder | str] = {}

    def __enter__(self) -> SecretFiles:
        return self

    def __exit__(self, *exc: object) -> None:
        for folder in self.folders.values():
            if isinstance(folder, Folder):
                folder.close()
        self.folders.clear()

    def _folder(self, sub: str) -> Folder | str:
        found = self.folders.get(sub)
        if found is None:
            path = Path(self.base + ("/" + sub if sub else ""))
            try:
                opened = open_folder(path, work_in=False)
                found = opened if opened is not None else "secret file not delivered yet"
            except HostFileError as exc:
                found = f"secret file's folder cannot be used: {exc}"
            except OSError as exc:
                found = f"secret file's folder cannot be read ({exc.strerror})"
            self.folders[sub] = found
        return found

    def read(self, name: str) -> bytes | str:
        """A secret file's bytes (``name`` relative to the manifest), or why there are none."""
        sub, _, base = name.rpartition("/")
        folder = self._folder(sub)
        if isinstance(folder, str):
            return folder
        try:
            data = folder.read(base, limit=self.limit)
        except HostFileError as exc:
            if "larger than" in str(exc):
                return "secret file does not match the manifest's digest"
            return f"secret file cannot be used: {exc}"
        except OSError as exc:
            return f"secret file cannot be read ({exc.strerror})"
        if data is None:
            return (
                "secret file not delivered yet"
                if _missing(folder, base)
                else "secret file is empty"
            )
        return data
