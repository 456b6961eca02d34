"""Running a command the node's policy allows, as the user (and group) the policy names.

The child is started through :mod:`meshtui.runas`, the one way meshtui runs something as
another user: without a shell, in a new session with no controlling terminal (so it cannot push
keystrokes into the terminal of whoever started the agent), from ``/``, stdin from
``/dev/null``, no supplementary groups. Its environment is its own (``PATH``, ``HOME``,
``USER``, ``LOGNAME``, ``LANG``: nothing of the agent's). Root is dropped before the command
starts, unless the policy names root.
"""

from __future__ import annotations

import grp
import os
import subprocess
from collections.abc import Sequence

from meshtui import runas
from meshtui.host.policy.node_policy import Command
from meshtui.runas import OsUser, RunAsError

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def user_of(command: Command) -> OsUser:
    """The user and group ``command`` runs as; RunAsError naming the one this node lacks."""
    who = OsUser.named(command.user)
    if command.group is None:
        return who
    try:
        gid = grp.getgrnam(command.group).gr_gid
    except KeyError:
        raise RunAsError(f"there is no OS group {command.group!r} on this machine") from None
    return OsUser(who.name, who.uid, gid)


def run(
    command: Command,
    extra: Sequence[str] = (),
    *,
    argv: Sequence[str] | None = None,
    timeout: float,
) -> subprocess.CompletedProcess[bytes]:
    """Run ``argv`` (default: the command's own argv; a provisioner's has ``{admin}`` filled
    in) with ``extra`` appended, as the command's user, output captured. OSError,
    subprocess.TimeoutExpired, or RunAsError for a user or group this node no longer has."""
    who = user_of(command)
    home = os.path.expanduser(f"~{who.name}")
    env = {
        "PATH": os.environ.get("PATH") or DEFAULT_PATH,
        "HOME": home if home.startswith("/") else "/",
        "USER": who.name,
        "LOGNAME": who.name,
        "LANG": "C.UTF-8",
    }
    same = (who.uid, who.gid) == (os.geteuid(), os.getegid())
    return runas.run(
        [*(argv if argv is not None else command.argv), *extra],
        None if same else who,
        capture_output=True,
        timeout=timeout,
        check=False,
        env=env,
    )
