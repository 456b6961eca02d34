"""CA files: read as root reads a credential file, and the client TLS context trusting one.

A CA file decides where a credential may be sent, and the agent reads it as root for whatever
a request names, so it is read like a credential file (:mod:`meshtui.folders`): every folder
from ``/`` opened without following a link and owned by root (or the caller) with no one else
able to write it; the file opened ``O_NOFOLLOW|O_NONBLOCK``, a regular file of root's (or the
caller's) that nobody else may write, at most :data:`MAX_CA` bytes. A link, a FIFO, a device or
another user's file is a :class:`~meshtui.errors.CAFileError` naming it, at once: nothing ever
waits on a CA file. The TLS context is built from the bytes read (``cadata``), never from the
path, so what is trusted is exactly what was checked; one context per content is kept.
"""

from __future__ import annotations

import hashlib
import os
import ssl
import stat
import threading
from pathlib import Path

from meshtui.errors import CAFileError, HostFileError
from meshtui.folders import kind, open_folder, user_name

MAX_CA = 1024 * 1024
"""A CA bundle is a few hundred KiB (Debian's whole ca-certificates.crt is about 220 KiB)."""

_CONTEXTS: dict[bytes, ssl.SSLContext] = {}
_LOCK = threading.Lock()


def read(ca: str) -> bytes:
    """The bytes of the CA file ``ca``; CAFileError naming it and what to do otherwise."""
    path = Path(ca)
    if not path.is_absolute():
        raise CAFileError(f"CA file {ca} is not an absolute path")
    try:
        folder = open_folder(path.parent, work_in=False)
    except HostFileError as exc:
        raise CAFileError(f"CA file {ca}: {exc}") from None
    if folder is None:
        raise CAFileError(f"CA file {ca} does not exist (its folder is missing)")
    me = os.geteuid()
    with folder:
        try:
            seen = os.stat(path.name, dir_fd=folder.fd, follow_symlinks=False)
        except FileNotFoundError:
            raise CAFileError(f"CA file {ca} does not exist") from None
        if not stat.S_ISREG(seen.st_mode):
            raise CAFileError(
                f"CA file {ca} is {kind(seen.st_mode)}, not a regular file (write the CA "
                "certificate there as a file owned by root)"
            )
        if seen.st_size > MAX_CA:
            raise CAFileError(f"CA file {ca} is larger than {MAX_CA} bytes")
        try:
            got = folder.read_with_stat(path.name, limit=MAX_CA)
        except HostFileError as exc:
            raise CAFileError(f"CA file {ca}: {exc}") from None
    if got is None:
        raise CAFileError(f"CA file {ca} is empty or gone")
    data, st = got
    if st.st_uid not in (0, me):
        raise CAFileError(
            f"CA file {ca} is owned by {user_name(st.st_uid)}, who could choose what is "
            f"trusted (chown root {ca})"
        )
    if st.st_mode & 0o022:
        raise CAFileError(
            f"CA file {ca} can be written by others (mode {stat.S_IMODE(st.st_mode):04o}; "
            f"chmod go-w {ca})"
        )
    return data


def context(ca: str) -> ssl.SSLContext:
    """A client TLS context trusting the certificates in the CA file ``ca`` alone (never the
    system's store), checking host names, TLS 1.2 or later. CAFileError (an OSError) when the
    file may not be used, ssl.SSLError when it holds no certificate. One context per content:
    loading a CA costs more than a login, and a context serves many connections at once."""
    data = read(ca)
    key = hashlib.blake2b(data, digest_size=16).digest()
    with _LOCK:
        found = _CONTEXTS.get(key)
    if found is None:
        try:
            text = data.decode("ascii")
        except UnicodeDecodeError:
            raise ssl.SSLError(f"CA file {ca} is not PEM text") from None
        found = ssl.create_default_context(cadata=text)  # cadata: no default roots
        found.minimum_version = ssl.TLSVersion.TLSv1_2
        with _LOCK:
            if len(_CONTEXTS) > 64:
                _CONTEXTS.clear()
            _CONTEXTS[key] = found
    return found
