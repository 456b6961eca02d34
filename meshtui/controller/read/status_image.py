"""The status image: what a reader of every pair made, kept in a file beside the inventory, so
the next one-shot reader (``meshtui status``, a fresh process) brings it up to date instead of
reading and making every pair again.

The image holds every pair's :class:`~meshtui.model.PairStatus` (sorted by id) with the
:class:`~meshtui.inventory.rows.StatusMark` they were read at and the open rotations and
provider kinds they were made with: exactly what a keeping reader (``watch``) keeps in memory,
so :mod:`meshtui.controller.read.status` brings it up to date by the same rules (the pairs ticked
since the mark, only while epoch and stamp hold and the clock is not behind it). What a status
row holds is what ``status --json`` prints (no credential, digest or sealed blob; no state
depends on the time of the read).

The image is trusted only when every doubt is ruled out, else it is not used (the reader reads
every pair, as it would without one): a regular file (never a link followed, never a FIFO
blocked on), owned by the inventory's owner and readable by nobody else, of this format and
made by this very code (a digest of the modules that make a status), for this inventory (a
SQLite file's device and inode, a PostgreSQL database's server and oid: a restored or re-created
inventory is another; on PostgreSQL its mark names the database's history too, see
:mod:`meshtui.inventory.status_read`). It is written
atomically (:mod:`meshtui.atomic`, 0600, given the inventory's owner) only by a process that
may (the inventory's owner, or root), without fsync (a cache: a crash leaves the old image or
none, which the checks above refuse); any failure to write (a read-only folder or mount) is
silent, since the read was complete without it.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import os
import stat
import sys
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path

import msgspec

from meshtui import atomic
from meshtui.inventory.rows import Identity, StatusMark
from meshtui.model import PairStatus, State

IMAGE = "status-image.json"
"""The image's name in the state folder, beside the inventory."""

FORMAT = 1
"""The image's layout; another number is not read."""

MAX_BYTES = 1 << 30
"""Larger than any image (~0.5 KB a pair): a bigger file is not read."""

_MAKERS = (
    "meshtui.controller.read.status",
    "meshtui.controller.read.status_image",
    "meshtui.inventory.status_read",
    "meshtui.inventory.rows",
    "meshtui.model",
    "meshtui.kinds.registry",
)
"""The modules whose code decides what a status row holds: an image made by other code (an
upgrade) is not read."""


class StatusColumns(msgspec.Struct, frozen=True, forbid_unknown_fields=True, gc=False):
    """Every pair's :class:`~meshtui.model.PairStatus`, one list a field, in the field order
    (a test holds the two in step): decoded as lists, the statuses are made in one ``map``,
    ~20 % less than decoding 10,000 objects of named fields."""

    pair: list[str]
    provision: list[str]
    consumer: list[str]
    provider: list[str]
    login: list[str]
    generation: list[int]
    consumer_generation: list[int | None]
    provider_generation: list[int | None]
    withdrawn: list[bool]
    state: list[State]
    reason: list[str]
    probed_at: list[str | None]
    rotated_at: list[str | None]
    consumer_file: list[str]
    created_at: list[str]
    alarm: list[bool]
    latency_ms: list[float | None]
    kind: list[str]


FIELDS = StatusColumns.__struct_fields__


class ImageFile(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The file's layout: what the image is of (format, code, inventory file, mark) and the
    statuses with the open rotations and provider kinds they were made with."""

    format: int
    code: str
    device: int
    inode: int
    mark: StatusMark
    rotating: dict[str, int]
    kinds: list[tuple[str, str, str]]
    rows: StatusColumns


@dataclass(frozen=True)
class StatusImage:
    """An image read back and checked: every pair's status, sorted by id, made at ``mark`` with
    ``rotating`` (pair -> its open rotation) and ``kinds`` ((provider, provision) -> kind)."""

    mark: StatusMark
    rotating: dict[str, int]
    kinds: dict[tuple[str, str], str]
    rows: list[PairStatus]


_decoder = msgspec.json.Decoder(ImageFile)


@functools.cache
def code_digest() -> str:
    """A digest of the code that makes a status row (read once a process)."""
    h = hashlib.blake2b(digest_size=16, person=b"meshtui-status")
    for name in _MAKERS:
        source = sys.modules[name].__file__ if name in sys.modules else None
        if source is None:
            __import__(name)
            source = sys.modules[name].__file__
        h.update(name.encode() + b"\0" + Path(str(source)).read_bytes() + b"\0")
    return h.hexdigest()


def read(folder: Path, inv: Identity | None) -> StatusImage | None:
    """The image in ``folder`` made for the inventory ``inv`` is, or None on any doubt (no
    inventory, none there, not a regular file, another owner, readable by others, too large,
    unreadable, another format, other code, another inventory)."""
    if inv is None:
        return None
    try:
        fd = os.open(
            folder / IMAGE,
            os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC,
        )
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if (
            not stat.S_ISREG(st.st_mode)
            or st.st_uid != inv.uid
            or st.st_mode & 0o077
            or st.st_size > MAX_BYTES
        ):
            return None
        data = _read_all(fd, st.st_size)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        got = _decoder.decode(data)
    except msgspec.DecodeError:  # truncated, damaged, or of another layout
        return None
    if (got.format, got.code, got.device, got.inode) != (
        FORMAT,
        code_digest(),
        inv.device,
        inv.inode,
    ):
        return None
    columns = [getattr(got.rows, name) for name in FIELDS]
    if len({len(column) for column in columns}) != 1:
        return None  # map() would stop at the shortest
    if not _sorted(got.rows.pair):
        return None
    rows = list(map(PairStatus, *columns))
    kinds = {(provider, provision): kind for provider, provision, kind in got.kinds}
    return StatusImage(got.mark, got.rotating, kinds, rows)


def write(folder: Path, inv: Identity | None, image: StatusImage) -> bool:
    """Replace the image in ``folder`` with ``image`` (read from the inventory ``inv`` is),
    when this process may: the inventory's owner, or root (then the file is given the
    inventory's owner and group). False when it did not or could not (no error: a reader that
    cannot write is still a complete reader)."""
    if inv is None:
        return False
    try:
        me = os.geteuid()
        if me not in (0, inv.uid):
            return False
        data = msgspec.json.encode(
            ImageFile(
                FORMAT,
                code_digest(),
                inv.device,
                inv.inode,
                image.mark,
                image.rotating,
                [
                    (provider, provision, kind)
                    for (provider, provision), kind in image.kinds.items()
                ],
                StatusColumns(*(list(map(attrgetter(name), image.rows)) for name in FIELDS)),
            )
        )
        access = atomic.Access(0o600, *((inv.uid, inv.gid) if me == 0 else (-1, -1)))
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            atomic.write_at(fd, IMAGE, data, access=access, durable=False)
        finally:
            os.close(fd)
    except (OSError, ValueError):  # ValueError: a string JSON cannot carry (never from SQLite)
        return False
    return True


def _read_all(fd: int, size: int) -> bytes:
    """Every byte of the open file (``size`` as its fstat said; a file that grew meanwhile is
    read to its end, one that shrank to where it ends)."""
    chunks: list[bytes] = []
    while True:
        chunk = os.read(fd, max(size, 1 << 16))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _sorted(ids: list[str]) -> bool:
    """Whether the pair ids are sorted, each once (as every read returns them)."""
    return all(a < b for a, b in itertools.pairwise(ids))
