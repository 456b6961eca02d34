"""Paths the controller names on this node, and the one folder a declaration may never reach.

Every path in a request is absolute and free of ``..`` before it is used; and nothing the
controller sends may land in the agent's own state folder (its key, the pinned controller key,
the replay guard).
"""

from __future__ import annotations

import os
from pathlib import Path


def node_path(text: str, what: str) -> Path:
    """A path the controller names on this node: absolute and without '..', or ValueError."""
    if not text.startswith("/") or ".." in text.split("/") or "\x00" in text:
        raise ValueError(f"{what} {text!r} must be an absolute path without '..'")
    return Path(text)


class StateFolder:
    """The agent's state folder, as an absolute path and its (device, inode)."""

    def __init__(self, state_dir: Path) -> None:
        self.path = Path(os.path.abspath(state_dir))
        st = os.stat(self.path)
        self.ident = (st.st_dev, st.st_ino)

    def refuse_inside(self, folder: Path, what: str) -> None:
        """ValueError when ``folder`` is this state folder or below it.

        The walk to any folder refuses links, so its path is its real path and a comparison of
        paths is enough; the folder's device and inode also catch a bind mount of the state.
        """
        path = self.path
        if folder == path or path in folder.parents:
            raise ValueError(
                f"{what} {folder} is inside this agent's state folder {path}; "
                "choose a path outside it"
            )
        try:
            st = os.stat(folder, follow_symlinks=False)
        except OSError:
            return
        if (st.st_dev, st.st_ino) == self.ident:
            raise ValueError(f"{what} {folder} is this agent's state folder {path}; choose another")
