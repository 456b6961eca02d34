"""How the agent touches files on its node: folders opened once, never through a link, checked.

The agent runs as root and writes where a declaration says. Every folder on the way is opened
from ``/`` one step at a time with ``O_NOFOLLOW|O_DIRECTORY`` and must be owned by root or the
agent's user and not writable by anyone else (a sticky folder such as ``/tmp`` may be passed
through, never worked in); everything after that is done relative to the folder's descriptor.
Files are read with ``O_NOFOLLOW|O_NONBLOCK``, must be regular and small, so a link, a FIFO or
a device is an error that names the file instead of a hang or a read of something else.
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from meshtui.atomic import (
    Access,
    link_at,
    remove_at,
    write_at,
    write_at_after,
    write_many_at,
    write_unnamed,
)
from meshtui.crypto import secret_digest
from meshtui.errors import HostFileError
from meshtui.model import file_mode

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
        _require_regular(path, seen.st_mode)  # a device or FIFO is not even opened
        try:
            fd = os.open(name, _READ, dir_fd=self.fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise HostFileError(f"{path} cannot be read ({exc.strerror})") from None
        try:
            st = os.fstat(fd)
            _require_regular(path, st.st_mode)
            if st.st_size > limit:
                raise HostFileError(_too_large(path, limit))
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
            raise HostFileError(_too_large(path, limit))
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


def _require_regular(path: str, mode: int) -> None:
    if not stat.S_ISREG(mode):
        raise HostFileError(
            f"{path} is {kind(mode)}, not a regular file (remove it; the next push writes the "
            "credential again)"
        )


def _too_large(path: str, limit: int) -> str:
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
        _check("/", os.fstat(fd), last=not parts, own=own and not parts, work_in=work_in)
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
            _check(here, st, last=last, own=own and last, work_in=work_in)
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


def _check(here: str, st: os.stat_result, *, last: bool, own: bool, work_in: bool) -> None:
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
        who = "other users" if st.st_mode & 0o002 else f"group {_group_name(st.st_gid)}"
        raise HostFileError(
            f"{here} can be written by {who} (mode {stat.S_IMODE(st.st_mode):04o}), so they "
            f"could swap what the agent writes there (chmod go-w {here}, or choose another path)"
        )


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


@dataclass(frozen=True)
class FileAccess:
    """A credential file's declared owner, group and mode, resolved on this node."""

    owner: str | None
    group: str | None
    mode: str
    access: Access

    def matches(self, st: os.stat_result) -> bool:
        """True when a file already has this owner, group and mode."""
        uid = os.geteuid() if self.access.uid == -1 else self.access.uid
        return (
            stat.S_IMODE(st.st_mode) == self.access.mode
            and st.st_uid == uid
            and (self.access.gid == -1 or st.st_gid == self.access.gid)
        )


def resolve_access(owner: str | None, group: str | None, mode: str | None) -> FileAccess:
    """Look the declared owner and group up on this node; HostFileError saying which is unknown."""
    text = mode or "0600"
    try:
        bits = file_mode(text)
    except ValueError as exc:
        raise HostFileError(f"mode {exc}") from None
    uid = gid = -1
    if owner:
        try:
            uid = pwd.getpwnam(owner).pw_uid
        except KeyError:
            raise HostFileError(
                f"owner {owner!r} is not a user on this node (create the user, or fix owner)"
            ) from None
    if group:
        try:
            gid = grp.getgrnam(group).gr_gid
        except KeyError:
            raise HostFileError(
                f"group {group!r} is not a group on this node (create the group, or fix group)"
            ) from None
    return FileAccess(
        owner=owner, group=group, mode=text, access=Access(mode=bits, uid=uid, gid=gid)
    )


def read_credential(
    path: Path, ancestors: Ancestors | None = None
) -> tuple[bytes | None, str | None]:
    """A held credential (None when missing) and, when it cannot be used, why: a link, a FIFO,
    a device, an oversize file or an unsafe folder. Never blocks, never follows a link."""
    try:
        return read_file(path, ancestors=ancestors), None
    except HostFileError as exc:
        return None, str(exc)
    except OSError as exc:
        return None, f"{path} cannot be read ({exc.strerror})"


def remove_credential(path: Path) -> bool:
    """Unlink a withdrawn credential file through its checked folder; True when it was there."""
    folder = open_folder(path.parent)
    if folder is None:
        return False
    with folder:
        return folder.remove(path.name)


def remove_written(path: Path, digest: str) -> bool:
    """Unlink a file the agent wrote and no longer holds (a credential or connection file left
    at a path the declaration moved away from), only while it still holds exactly what the
    agent wrote there: a file someone replaced, a link, a FIFO is left alone, never followed.
    True when it was removed; an unsafe folder or an unreadable file is left as it is."""
    try:
        folder = open_folder(path.parent)
        if folder is None:
            return False
        with folder:
            got = folder.read_with_stat(path.name)
            if got is None or secret_digest(got[0]) != digest:
                return False
            return folder.remove(path.name)
    except (HostFileError, OSError):
        return False


def read_in(folder: Folder, name: str) -> tuple[bytes | None, str | None]:
    """:func:`read_credential` for a file in a folder already open."""
    try:
        return folder.read(name), None
    except HostFileError as exc:
        return None, str(exc)


@dataclass
class Unnamed:
    """A credential written ahead into its folder's filesystem under no name (owner, group and
    mode set, fsynced): only the agent holds it, by its descriptor, until it is named or
    closed. ``folder`` is the checked folder it belongs in, kept open."""

    fd: int
    folder: Folder

    def close(self) -> None:
        """Let it go (once): the filesystem frees an unnamed file when it is closed."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.folder.close()

    def name(self, path: Path) -> bool:
        """Give it ``path``'s name, replacing what is there: only while ``path``'s folder is
        still the one checked when it was written, and still nobody else's to write (else
        False, nothing done). What is at ``path`` now is refused as :func:`write_credential`
        refuses it (a link, a FIFO, a folder, an oversize file: HostFileError)."""
        st = os.fstat(self.folder.fd)
        try:
            here = os.stat(path.parent)
        except OSError:
            return False
        if (here.st_dev, here.st_ino) != (st.st_dev, st.st_ino):
            return False
        _check(str(path.parent), st, last=True, own=False, work_in=True)
        try:
            there = os.stat(path.name, dir_fd=self.folder.fd, follow_symlinks=False)
        except FileNotFoundError:
            there = None
        if there is not None:
            _require_regular(str(path), there.st_mode)
            if there.st_size > MAX_SECRET:
                raise HostFileError(_too_large(str(path), MAX_SECRET))
        link_at(self.folder.fd, self.fd, path.name)
        return True


def prepare_credential(path: Path, want: FileAccess, unseal: Callable[[], bytes]) -> Unnamed:
    """Write a consumer's next credential ahead, unnamed, in the (checked) folder of ``path``,
    so that taking it up later (:func:`write_credential` with ``prepared``) is a rename and
    one folder fsync. OSError when the filesystem has no unnamed files."""
    folder = open_folder(path.parent, create=0o755)
    assert folder is not None
    try:
        secret = unseal()
        fd = write_unnamed(folder.fd, secret, access=want.access)
        del secret
    except BaseException:
        folder.close()
        raise
    return Unnamed(fd=fd, folder=folder)


def write_credential(
    path: Path,
    want: FileAccess,
    digest: str,
    unseal: Callable[[], bytes],
    prepared: Unnamed | None = None,
) -> None:
    """Write a consumer's credential unless the file already holds it with the declared owner,
    group and mode. A file the agent must not read (a FIFO, a link) is refused, not replaced.

    ``prepared``: the same credential written ahead (:func:`prepare_credential`, with ``want``);
    it is given the name (:meth:`Unnamed.name`) instead of the credential being written again
    (one that cannot be, say with no ``/proc``, is written the ordinary way)."""
    if prepared is not None:
        with contextlib.suppress(OSError):
            if prepared.name(path):
                return
    folder = open_folder(path.parent, create=0o755)
    assert folder is not None
    with folder:
        current = folder.read_with_stat(path.name)
        if current is not None:
            data, st = current
            if secret_digest(data) == digest and want.matches(st):
                return
        secret = unseal()
        folder.write(path.name, secret, want.access)
        del secret
