"""Running a command the node's policy allows, as the user (and group) the policy names.

The child runs without a shell, in a new session with no controlling terminal (so it cannot
push keystrokes into the terminal of whoever started the agent), from ``/``, with stdin closed
and an environment of its own (``PATH``, ``HOME``, ``USER``, ``LOGNAME``, ``LANG``: nothing of
the agent's). Root is dropped before the command starts, unless the policy names root.
"""

from __future__ import annotations

import grp
import os
import pwd
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from meshtui.host.policy import Command

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class Who:
    """A user resolved on this node: uid, gid, supplementary groups and home."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: str


def resolve(command: Command) -> Who:
    """The user and group ``command`` runs as; KeyError naming the one that is missing."""
    try:
        pw = pwd.getpwnam(command.user)
    except KeyError:
        raise KeyError(f"user {command.user!r} is not a user on this node") from None
    gid = pw.pw_gid
    if command.group is not None:
        try:
            gid = grp.getgrnam(command.group).gr_gid
        except KeyError:
            raise KeyError(f"group {command.group!r} is not a group on this node") from None
    groups = tuple(g for g in os.getgrouplist(pw.pw_name, gid) if g != gid)
    return Who(pw.pw_name, pw.pw_uid, gid, groups, pw.pw_dir or "/")


def run(
    command: Command,
    extra: Sequence[str] = (),
    *,
    argv: Sequence[str] | None = None,
    timeout: float,
) -> subprocess.CompletedProcess[bytes]:
    """Run ``argv`` (default: the command's own argv; a provisioner's has ``{admin}`` filled
    in) with ``extra`` appended, as the command's user, output captured. OSError,
    subprocess.TimeoutExpired, or KeyError for a user or group this node no longer has."""
    who = resolve(command)
    env = {
        "PATH": os.environ.get("PATH") or DEFAULT_PATH,
        "HOME": who.home,
        "USER": who.name,
        "LOGNAME": who.name,
        "LANG": "C.UTF-8",
    }
    drop = (who.uid, who.gid) != (os.geteuid(), os.getegid())
    return subprocess.run(
        [*(argv if argv is not None else command.argv), *extra],
        capture_output=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
        cwd="/",
        env=env,
        start_new_session=True,
        user=who.uid if drop else None,
        group=who.gid if drop else None,
        extra_groups=list(who.groups) if drop else None,
    )
