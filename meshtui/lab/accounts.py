"""The lab's system users: each server the lab raises as root runs as a user of its own.

:func:`ensure_system_user` creates that user once (``--system``, no home, no shell);
:func:`check_path_open` says which folder on the way to a file that user cannot enter, since
the lab never opens up a folder it did not create.
"""

from __future__ import annotations

import pwd
import stat
import subprocess
import time
from pathlib import Path

from meshtui.errors import LabError

_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}


def locked(done: subprocess.CompletedProcess[str]) -> bool:
    """Whether an account command (``useradd``, ``groupdel``...) failed only because another
    process holds /etc/passwd or /etc/group: 10, or 1 saying "lock" (shadow's tools refuse
    rather than wait), so it is worth running again."""
    return done.returncode == 10 or (done.returncode == 1 and "lock" in done.stderr)


def ensure_system_user(name: str) -> pwd.struct_passwd:
    """Create the dedicated ``--system`` nologin user once; tolerate a concurrent creation."""
    for _attempt in range(50):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            pass
        done = subprocess.run(
            [
                "useradd",
                "--system",
                "--user-group",
                "--no-create-home",
                "--home-dir",
                "/nonexistent",
                "--shell",
                "/usr/sbin/nologin",
                name,
            ],
            capture_output=True,
            text=True,
            env=_ENV,
            check=False,
        )
        # 9: exists already
        busy = locked(done)
        if done.returncode not in (0, 9) and not busy:
            raise LabError(f"useradd {name} failed: {done.stderr.strip()}")
        if busy:
            time.sleep(0.1)
    try:
        return pwd.getpwnam(name)
    except KeyError:
        raise LabError(f"could not create the system user {name}") from None


def traversable(path: Path, user: pwd.struct_passwd) -> bool:
    """Whether ``user`` (its primary group only, no supplementary groups) may search ``path``."""
    st = path.stat()
    if st.st_uid == user.pw_uid:
        return bool(st.st_mode & stat.S_IXUSR)
    if st.st_gid == user.pw_gid:
        return bool(st.st_mode & stat.S_IXGRP)
    return bool(st.st_mode & stat.S_IXOTH)


def check_path_open(target: Path, user: pwd.struct_passwd, what: str) -> None:
    """Raise a LabError naming the first ancestor of ``target`` the server user cannot enter."""
    for parent in reversed(target.parents):
        if not traversable(parent, user):
            raise LabError(
                f"{parent} is not traversable by the server's user {user.pw_name}, "
                f"so it cannot reach {what} {target} (allow o+x on {parent}, "
                "or choose a folder under one it can enter, e.g. under /tmp or /var/lib)"
            )
