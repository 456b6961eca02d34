"""Writing an audit export to a file: 0600 like the inventory, whole or not at all, and never
over a file that is already there (a link included)."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
from pathlib import Path

from meshtui.atomic import sync_folder, write_private


def write_export(path: Path, body: str) -> None:
    """Create ``path`` holding ``body``, mode 0600 whatever the umask (:func:`write_new`)."""
    write_new(path, body.encode(), "an audit export")


def write_new(path: Path, data: bytes, what: str) -> None:
    """Create ``path`` holding ``data``, mode 0600 whatever the umask; ``what`` names the file
    in the refusal when something is already there.

    The bytes go to a private temp file first, which is then hard-linked to ``path``: the link
    appears complete or not at all, and fails when anything exists at ``path`` (the error names
    it), so the file never replaces someone's file nor is written through a planted symlink.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.part")
    write_private(tmp, data)
    try:
        os.link(tmp, path, follow_symlinks=False)
    except FileExistsError:
        raise FileExistsError(
            errno.EEXIST, f"exists already; {what} never replaces a file", str(path)
        ) from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    sync_folder(path.parent)
