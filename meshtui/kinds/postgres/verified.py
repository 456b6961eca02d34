"""What a long-lived process last verified of each pg_hba.conf it pins, so a delta skips the file.

A rotation changes no address: its pin step has nothing to write. Reading and parsing a file
whose block grows with the mesh to find that out costs O(mesh); this memory lets it cost
nothing. For each file it keeps what this process last read or wrote and had the server accept:
the text, its stat (the file's identity: device, inode, size, modification and change times)
and a digest of its bytes; and, per scope, whether this process *settled* that scope's block
(a whole run wrote or confirmed it from every login, or a delta changed it on a settled one).

It is trusted only while the file's stat is exactly the one remembered; a changed stat means
the file is read again, and a scope stays settled only if its block reads as remembered. Any
failure forgets the file. A write is still made only over exactly the remembered text
(:func:`meshtui.kinds.postgres.hba._write_unchanged`) and still checked by the server's parser.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

Identity = tuple[int, int, int, int, int]


def identity(info: os.stat_result) -> Identity:
    """The file's identity as remembered: device, inode, size, mtime and ctime (ns)."""
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def digest(text: str) -> bytes:
    """A digest of the file's text (a changed stat over the same bytes keeps the memory)."""
    return hashlib.blake2b(text.encode("utf-8"), digest_size=32).digest()


@dataclass
class Settled:
    """One scope's block as this process made it: each login's address, logins in file order."""

    at: dict[str, str]
    order: list[str]

    @classmethod
    def of(cls, pins: Mapping[str, str]) -> Settled:
        """The block :func:`~meshtui.kinds.postgres.hba.block` writes for ``pins``."""
        return cls(dict(pins), sorted(pins))


@dataclass
class Known:
    """One pg_hba.conf as this process last verified it (see the module docstring)."""

    path: str
    info: os.stat_result
    sum: bytes
    text: str
    foreign: tuple[str, ...]
    blocks: dict[str, tuple[str, ...]]
    settled: dict[str, Settled] = field(default_factory=dict)

    def still(self, info: os.stat_result) -> bool:
        """Whether ``info`` is the stat remembered (the file was not touched since)."""
        return identity(info) == identity(self.info)


_KNOWN: dict[str, Known] = {}
_PATHS: dict[str, str] = {}
_LOCK = threading.Lock()


def path_of(conninfo: str) -> str:
    """The hba_file the server behind ``conninfo`` named at this process's last pin ("")."""
    with _LOCK:
        return _PATHS.get(conninfo, "")


def known(path: str) -> Known | None:
    """What is remembered of ``path`` (call under the folder's lock), or None."""
    with _LOCK:
        return _KNOWN.get(path)


def remember(conninfo: str, entry: Known) -> None:
    """Keep ``entry`` as the verified state of its file, reached through ``conninfo``."""
    with _LOCK:
        _PATHS[conninfo] = entry.path
        _KNOWN[entry.path] = entry


def forget(path: str) -> None:
    """Drop what is remembered of ``path``: the next delta reads it (or runs whole)."""
    with _LOCK:
        _KNOWN.pop(path, None)


def forget_all() -> None:
    """Drop every memory (tests; a process that wants its next runs whole)."""
    with _LOCK:
        _KNOWN.clear()
        _PATHS.clear()
