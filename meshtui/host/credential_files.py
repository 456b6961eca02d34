"""How the agent keeps credential files on its node: their owner, group and mode resolved,
read, written and removed through a checked folder (:mod:`meshtui.folders`), never through a
link, and written ahead under no name (``O_TMPFILE``) for a rotation.
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from meshtui.atomic import (
    Access,
    link_at,
    write_unnamed,
)
from meshtui.crypto import secret_digest
from meshtui.errors import HostFileError
from meshtui.folders import (
    MAX_SECRET,
    Ancestors,
    Folder,
    check_folder,
    group_name,
    open_folder,
    read_file,
    require_regular,
    too_large,
    user_name,
)
from meshtui.model import file_mode


@dataclass(frozen=True)
class FileAccess:
    """A credential file's declared owner, group and mode, resolved on this node."""

    owner: str | None
    group: str | None
    mode: str
    access: Access

    def matches(self, st: os.stat_result) -> bool:
        """True when a file already has this owner, group and mode."""
        return not self.unlike(st)

    def unlike(self, st: os.stat_result) -> list[str]:
        """How a file's mode, owner and group differ from these, in words (empty: none do);
        a mode that lets every user read or change it says so."""
        out: list[str] = []
        mode = stat.S_IMODE(st.st_mode)
        if mode != self.access.mode:
            other = " (every user on the node can read or change it)" if mode & 0o007 else ""
            out.append(f"mode {mode:04o}, not {self.access.mode:04o}{other}")
        uid = os.geteuid() if self.access.uid == -1 else self.access.uid
        if st.st_uid != uid:
            out.append(f"owner {user_name(st.st_uid)}, not {user_name(uid)}")
        if self.access.gid != -1 and st.st_gid != self.access.gid:
            out.append(f"group {group_name(st.st_gid)}, not {group_name(self.access.gid)}")
        return out


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


@dataclass(frozen=True)
class HeldFile:
    """What a file the agent wrote holds now: its bytes (None when missing or unusable), why
    it cannot be used, and how its mode, owner and group differ from what was written."""

    data: bytes | None
    error: str | None = None
    unlike: tuple[str, ...] = ()


def read_held(path: Path, want: FileAccess | None, ancestors: Ancestors | None = None) -> HeldFile:
    """:func:`read_credential`, with the file's own mode, owner and group (from its open
    descriptor, never through a link) compared with ``want``."""
    try:
        folder = open_folder(path.parent, ancestors=ancestors)
        if folder is None:
            return HeldFile(None)
        with folder:
            got = folder.read_with_stat(path.name)
    except HostFileError as exc:
        return HeldFile(None, str(exc))
    except OSError as exc:
        return HeldFile(None, f"{path} cannot be read ({exc.strerror})")
    if got is None:
        return HeldFile(None)
    data, st = got
    return HeldFile(data, None, tuple(want.unlike(st)) if want is not None else ())


def access_unlike(path: Path, want: FileAccess, ancestors: Ancestors | None = None) -> list[str]:
    """How a file's mode, owner and group differ from ``want`` (its stat, never through a
    link; nothing is read, so a file of any size); empty when it is missing or unreadable."""
    try:
        folder = open_folder(path.parent, ancestors=ancestors)
        if folder is None:
            return []
        with folder:
            st = os.stat(path.name, dir_fd=folder.fd, follow_symlinks=False)
    except (HostFileError, OSError):
        return []
    return want.unlike(st)


def held_access(owner: str | None, group: str | None, mode: str | None) -> FileAccess | str:
    """:func:`resolve_access` for what a file was written as; why not, in words, when its
    owner or group is no longer on this node."""
    try:
        return resolve_access(owner, group, mode)
    except HostFileError as exc:
        return str(exc)


def remove_credential(path: Path) -> bool:
    """Unlink a withdrawn credential file through its checked folder; True when it was there."""
    folder = open_folder(path.parent)
    if folder is None:
        return False
    with folder:
        return folder.remove(path.name)


def remove_written(
    path: Path, digest: str, digest_of: Callable[[bytes], str] = secret_digest
) -> bool:
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
            if got is None or digest_of(got[0]) != digest:
                return False
            return folder.remove(path.name)
    except (HostFileError, OSError):
        return False


PRIVATE_FILE = FileAccess(owner=None, group=None, mode="0600", access=Access())
"""The agent's own 0600 file (a provider's secret file): its user, mode 0600."""


def read_in(
    folder: Folder, name: str, want: FileAccess | None = None
) -> tuple[bytes | None, str | None]:
    """:func:`read_credential` for a file in a folder already open; with ``want``, a file whose
    mode, owner or group differ from it reads as missing (so it is written again)."""
    try:
        got = folder.read_with_stat(name)
    except HostFileError as exc:
        return None, str(exc)
    if got is None or (want is not None and want.unlike(got[1])):
        return None, None
    return got[0], None


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

    def name(
        self, path: Path, ours: Ours | None = None, named: Callable[[], None] | None = None
    ) -> bool:
        """Give it ``path``'s name, replacing what is there: only while ``path``'s folder is
        still the one checked when it was written, and still nobody else's to write (else
        False, nothing done). What is at ``path`` now is refused as :func:`write_credential`
        refuses it (a link, a FIFO, a folder, an oversize file, a file not ``ours``:
        HostFileError). ``named``: called once the name is there, before the folder's fsync
        (:func:`~meshtui.atomic.link_at`)."""
        st = os.fstat(self.folder.fd)
        try:
            here = os.stat(path.parent)
        except OSError:
            return False
        if (here.st_dev, here.st_ino) != (st.st_dev, st.st_ino):
            return False
        check_folder(str(path.parent), st, last=True, own=False, work_in=True)
        try:
            there = os.stat(path.name, dir_fd=self.folder.fd, follow_symlinks=False)
        except FileNotFoundError:
            there = None
        if there is not None:
            require_regular(str(path), there.st_mode)
            if there.st_size > MAX_SECRET:
                raise HostFileError(too_large(str(path), MAX_SECRET))
            if ours is not None:
                _require_ours(path, self.folder.read(path.name), ours)
        link_at(self.folder.fd, self.fd, path.name, named=named)
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


Ours = Callable[[bytes], bool]
"""Whether an existing file's bytes are a credential this agent wrote (and may replace)."""


def _require_ours(path: Path, data: bytes | None, ours: Ours) -> None:
    if data is not None and not ours(data):
        raise HostFileError(
            f"{path} exists and is not a credential this agent wrote, so it is not replaced "
            "(move it away if it is yours to lose, or choose another file)"
        )


def write_credential(
    path: Path,
    want: FileAccess,
    digest: str,
    unseal: Callable[[], bytes],
    prepared: Unnamed | None = None,
    ours: Ours | None = None,
    digest_of: Callable[[bytes], str] = secret_digest,
) -> float:
    """Write a consumer's credential unless the file already holds it with the declared owner,
    group and mode. A file the agent must not read (a FIFO, a link) is refused, not replaced;
    with ``ours``, so is an existing file that is not a credential this agent wrote.

    ``prepared``: the same credential written ahead (:func:`prepare_credential`, with ``want``);
    it is given the name (:meth:`Unnamed.name`) instead of the credential being written again
    (one that cannot be, say with no ``/proc``, is written the ordinary way).

    Returns when (``time.time()``) ``path`` began to hold it for whoever reads it: for a
    prepared one, the rename, which comes before the folder's fsync (a rotation's window ends
    there; the fsync is still done before this returns)."""
    if prepared is not None:
        named: list[float] = []
        with contextlib.suppress(OSError):
            if prepared.name(path, ours, lambda: named.append(time.time())):
                return named[0]
    folder = open_folder(path.parent, create=0o755)
    assert folder is not None
    with folder:
        current = folder.read_with_stat(path.name)
        if current is not None:
            data, st = current
            if digest_of(data) == digest and want.matches(st):
                return time.time()
            if ours is not None:
                _require_ours(path, data, ours)
        secret = unseal()
        folder.write(path.name, secret, want.access)
        del secret
    return time.time()
