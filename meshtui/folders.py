"""Folders opened once, never through a link, checked: how root reads and writes under ``/``.

The agent (and the provisioner it runs) work as root where a declaration says. Every folder on
the way is opened from ``/`` one step at a time with ``O_NOFOLLOW|O_DIRECTORY`` and must be
owned by root or the caller and not writable by anyone else (a sticky folder such as ``/tmp``
may be passed through, never worked in); everything after that is done relative to the folder's
descriptor. Files are read with ``O_NOFOLLOW|O_NONBLOCK``, must be regular and small, so a link,
a FIFO or a device is an error that names the file instead of a hang or a read of something
else. Core: shared by the host agent (meshtui/host/credential_files.py) and the provisioner
(meshtui/contracts/provider_files.py).
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import stat
from collections.abc import Callable
from pathlib import Path

from meshtui.atomic import (
    Access,
    remove_at,
    write_at,
    write_at_after,
    write_many_at,
)
from meshtui.errors import HostFileError, UntrustedPathError

MAX_SECRET = 4096
"""A credential is 44 bytes; anything over this is not one."""

MAX_MANIFEST = 64 * 1024 * 1024
"""A manifest of 10,000 consumers is a few MiB."""

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_KINDS = (
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISDIR, "a folder"),
)


def kind(mode: int) -> str:
    """What a file is, in words ("a FIFO"); "a regular file" for one."""
    for test, words in _KINDS:
        if test(mode):
            return words
    return "a regular file" if stat.S_ISREG(mode) else "not a regular file"


def user_name(uid: int) -> str:
    """A user's name, or its number when the node has no such user."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


class Folder:
    """An open folder the agent checked; close it (or use ``with``) when done."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self.fd = fd

    def __enter__(self) -> Folder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the descriptor (once)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def child(self, name: str) -> Path:
        """The path of an entry, for messages."""
        return self.path / name

    def read(self, name: str, *, limit: int = MAX_SECRET) -> bytes | None:
        """A regular file's bytes (None when it is missing or empty); HostFileError naming the
        file when it is a link, a FIFO, a device, a folder or over ``limit`` bytes. Never blocks."""
        got = self.read_with_stat(name, limit=limit)
        return got[0] if got is not None else None

    def read_with_stat(
        self, name: str, *, limit: int = MAX_SECRET
    ) -> tuple[bytes, os.stat_result] | None:
        """:meth:`read`, with the file's stat (owner, group, mode) from its open descriptor."""
        path = f"{self.path}/{name}"
        try:
            seen = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        require_regular(path, seen.st_mode)  # a device or FIFO is not even opened
        try:
            fd = os.open(name, _READ, dir_fd=self.fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise HostFileError(f"{path} cannot be read ({exc.strerror})") from None
        try:
            st = os.fstat(fd)
            require_regular(path, st.st_mode)
            if st.st_size > limit:
                raise HostFileError(too_large(path, limit))
            chunks, size = [], 0
            while size <= limit:
                chunk = os.read(fd, limit + 1 - size)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
        except OSError as exc:
            raise HostFileError(f"{path} cannot be read ({exc.strerror})") from None
        finally:
            os.close(fd)
        if size > limit:
            raise HostFileError(too_large(path, limit))
        data = b"".join(chunks)
        return (data, st) if data else None

    def write(self, name: str, data: bytes, access: Access) -> None:
        """Replace ``name`` atomically with ``data``, owner, group and mode set before it shows."""
        write_at(self.fd, name, data, access=access)

    def write_after(
        self, name: str, data: bytes, access: Access, before: Callable[[], None]
    ) -> None:
        """:meth:`write`, replacing ``name`` only after ``before`` returned, whose durable
        writes overlap this file's (:func:`write_at_after`)."""
        write_at_after(self.fd, name, data, before, access=access)

    def write_many(self, files: dict[str, bytes], access: Access) -> None:
        """:meth:`write` for several files, fsynced together (:func:`write_many_at`)."""
        write_many_at(self.fd, files, access=access)

    def remove(self, name: str) -> bool:
        """Unlink ``name`` (a link itself, never what it points to); True when it was there."""
        return remove_at(self.fd, name)

    def names(self) -> list[str]:
        """The entries of this folder."""
        return os.listdir(self.fd)

    def is_folder(self, name: str) -> bool:
        """True when ``name`` is a folder (a link to one is not)."""
        try:
            return stat.S_ISDIR(os.stat(name, dir_fd=self.fd, follow_symlinks=False).st_mode)
        except FileNotFoundError:
            return False


def read_file(
    path: Path, *, limit: int = MAX_SECRET, ancestors: Ancestors | None = None
) -> bytes | None:
    """A credential file's bytes, through checked folders (None when it or its folder is
    missing); HostFileError naming the file or folder when the agent must not read it."""
    folder = open_folder(path.parent, ancestors=ancestors)
    if folder is None:
        return None
    with folder:
        return folder.read(path.name, limit=limit)


def require_regular(path: str, mode: int) -> None:
    """HostFileError naming ``path`` unless ``mode`` is a regular file's."""
    if not stat.S_ISREG(mode):
        raise HostFileError(
            f"{path} is {kind(mode)}, not a regular file (remove it; the next push writes the "
            "credential again)"
        )


def too_large(path: str, limit: int) -> str:
    """Why a file over ``limit`` bytes is refused, naming it."""
    return f"{path} is larger than {limit} bytes, so it is not a credential meshtui wrote"


class Ancestors:
    """Folders already checked on the way during one request, kept open (a bounded number)
    so that files in sibling folders share the walk from ``/``. Close it when done."""

    LIMIT = 64

    def __init__(self) -> None:
        self.fds: dict[str, int] = {}

    def __enter__(self) -> Ancestors:
        return self

    def __exit__(self, *exc: object) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()

    def start(self, parts: list[str]) -> tuple[int, int]:
        """A descriptor of the longest checked proper ancestor and how many parts it covers."""
        for i in range(len(parts) - 1, -1, -1):
            fd = self.fds.get("/" + "/".join(parts[:i]))
            if fd is not None:
                return os.dup(fd), i
        return -1, 0

    def keep(self, here: str, fd: int) -> None:
        """Remember a checked pass-through folder."""
        if here not in self.fds and len(self.fds) < self.LIMIT:
            self.fds[here] = os.dup(fd)


def open_folder(
    path: Path,
    *,
    create: int | None = None,
    own: bool = False,
    work_in: bool = True,
    ancestors: Ancestors | None = None,
) -> Folder | None:
    """Open ``path`` from ``/`` one folder at a time, never through a link, checking each.

    Each folder must be owned by root or the agent's user and writable by nobody else; a
    sticky folder (``/tmp``) may be passed through but not worked in (``work_in``). With
    ``create`` the missing folders are made with that mode; without it a missing folder gives
    None. ``own`` requires the last folder to be the agent's user's own (a grants folder).
    ``ancestors`` lets one request's reads share the folders already checked on the way.
    HostFileError names the folder and what to do.
    """
    if not path.is_absolute():
        raise HostFileError(f"{path} is not an absolute path")
    parts = [p for p in str(path).split("/") if p not in ("", ".")]  # no pathlib: it is the cost
    if ".." in parts:
        raise HostFileError(f"{path} climbs with '..'")
    fd, done = ancestors.start(parts) if ancestors is not None else (-1, 0)
    if fd < 0:
        fd = os.open("/", _DIR)
        check_folder("/", os.fstat(fd), last=not parts, own=own and not parts, work_in=work_in)
    here = "/" + "/".join(parts[:done])
    try:
        for i in range(done, len(parts)):
            part = parts[i]
            if ancestors is not None:
                ancestors.keep(here, fd)
            here = here.rstrip("/") + "/" + part
            last = i == len(parts) - 1
            made = False
            try:
                nfd = os.open(part, _DIR, dir_fd=fd)
            except FileNotFoundError:
                if create is None:
                    os.close(fd)
                    return None
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o700, dir_fd=fd)
                    made = True
                nfd = _open_step(fd, part, here)
            except OSError:
                nfd = _open_step(fd, part, here)
            os.close(fd)
            fd = nfd
            st = os.fstat(fd)
            if made and create is not None:
                os.fchmod(fd, create)
                st = os.fstat(fd)
            check_folder(here, st, last=last, own=own and last, work_in=work_in)
    except BaseException:
        os.close(fd)
        raise
    return Folder(path, fd)


def _open_step(fd: int, part: str, here: str) -> int:
    """Open one folder below ``fd``, or say why it is not one the agent goes through."""
    try:
        return os.open(part, _DIR, dir_fd=fd)
    except OSError as exc:
        try:
            st = os.stat(part, dir_fd=fd, follow_symlinks=False)
        except OSError:
            raise HostFileError(f"{here} cannot be opened ({exc.strerror})") from None
        if stat.S_ISLNK(st.st_mode):
            raise HostFileError(
                f"{here} is a symbolic link; the agent goes only through real folders "
                "(replace the link with a folder owned by root)"
            ) from None
        raise HostFileError(f"{here} is {kind(st.st_mode)}, not a folder") from None


def check_folder(here: str, st: os.stat_result, *, last: bool, own: bool, work_in: bool) -> None:
    """HostFileError unless the folder ``here`` (its ``st``) is one root may work through: owned
    by root or the caller (by the caller when ``own``), writable by nobody else (a sticky one
    passed through, unless it is the ``last`` step and ``work_in``)."""
    me = os.geteuid()
    if own and st.st_uid != me:
        raise HostFileError(
            f"{here} is owned by {user_name(st.st_uid)}, not by {user_name(me)} (the agent's "
            f"user); the agent keeps secrets only in a folder of its own (remove it, or chown "
            f"{user_name(me)} {here})"
        )
    if st.st_uid not in (0, me):
        trusted = "root" if me == 0 else f"root or {user_name(me)}"
        raise HostFileError(
            f"{here} is owned by {user_name(st.st_uid)}; the agent works only through folders "
            f"owned by {trusted}, since their owner could swap what it writes "
            "(chown it, or choose another path)"
        )
    loose = st.st_mode & 0o022
    sticky = bool(st.st_mode & stat.S_ISVTX)
    if loose and (last and work_in or not sticky):
        who = "other users" if st.st_mode & 0o002 else f"group {group_name(st.st_gid)}"
        raise HostFileError(
            f"{here} can be written by {who} (mode {stat.S_IMODE(st.st_mode):04o}), so they "
            f"could swap what the agent writes there (chmod go-w {here}, or choose another path)"
        )


def group_name(gid: int) -> str:
    """A group's name, or its number when the node has no such group."""
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


_MAX_LINKS = 40  # as the kernel's ELOOP


def trusted_path(path: Path, *, create: int | None = None, own: bool = False) -> None:
    """UntrustedPathError naming the step unless no other user can change where ``path`` leads.

    Walked from ``/`` with ``lstat``, each link followed by hand: every link and every folder on
    the way must be owned by root or the caller, and an entry of a world-writable folder is
    taken only when the folder is sticky (so only its owner, root or the caller, can replace
    it). A state folder, and every folder root makes for the lab or the demo, is checked here
    before anything is written. With ``create`` the missing folders are made (mode ``create``)
    and checked again once made; without it a missing step ends the walk (nothing to follow).
    ``own`` also requires the last folder to be the caller's and writable by nobody else.
    """
    me = os.geteuid()
    pending = [p for p in str(path.absolute()).split("/") if p not in ("", ".")]
    here, above, links = "/", os.lstat("/"), 0
    while pending:
        part = pending.pop(0)
        if part == "..":
            here = os.path.dirname(here)
            above = os.lstat(here)
            continue
        step = os.path.join(here, part)
        try:
            st = os.lstat(step)
        except FileNotFoundError:
            if create is None:
                return
            with contextlib.suppress(FileExistsError):
                os.mkdir(step, 0o700)
            st = os.lstat(step)
            if stat.S_ISDIR(st.st_mode) and st.st_uid == me:
                os.chmod(step, create)
                st = os.lstat(step)
        _trusted_step(step, st, above, me, last=not pending)
        if stat.S_ISLNK(st.st_mode):
            links += 1
            if links > _MAX_LINKS:
                raise UntrustedPathError(f"{path}: more than {_MAX_LINKS} links on the way")
            target = os.readlink(step)
            pending = [p for p in target.split("/") if p not in ("", ".")] + pending
            if target.startswith("/"):
                here, above = "/", os.lstat("/")
            continue
        if not stat.S_ISDIR(st.st_mode):
            raise UntrustedPathError(
                f"{step} is {kind(st.st_mode)}, not a folder; nothing was done"
            )
        here, above = step, st
    if own and (above.st_uid != me or above.st_mode & 0o022):
        who = user_name(above.st_uid)
        raise UntrustedPathError(
            f"{path} is owned by {who} with mode {stat.S_IMODE(above.st_mode):04o}: a state "
            f"folder must be {user_name(me)}'s and writable by nobody else (remove it, or "
            "choose another folder); nothing was done"
        )


def _trusted_step(
    step: str, st: os.stat_result, above: os.stat_result, me: int, *, last: bool
) -> None:
    """UntrustedPathError unless entry ``step`` (its ``st``) of a folder (its ``above``) is one
    no other user can replace or redirect. The ``last`` folder's owner is the caller's to judge
    (``own``, or the controller's own message naming the owner to run as)."""
    fix = "choose a folder only root or you can write, such as /var/lib/meshtui"
    linked = stat.S_ISLNK(st.st_mode)
    if st.st_uid not in (0, me) and (linked or not last):
        what = "a symbolic link" if linked else kind(st.st_mode)
        raise UntrustedPathError(
            f"{step} is {what} owned by {user_name(st.st_uid)}, who could send what meshtui "
            f"writes there anywhere (remove it, or {fix}); nothing was done"
        )
    if above.st_mode & 0o002 and not above.st_mode & stat.S_ISVTX:
        parent = os.path.dirname(step)
        raise UntrustedPathError(
            f"{parent} can be written by anyone and has no sticky bit, so anyone could replace "
            f"{step} (chmod +t {parent}, or {fix}); nothing was done"
        )
