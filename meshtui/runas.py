"""The one way meshtui starts a program as another OS user: in a session of its own, no terminal.

A child that runs as a less-privileged user but stays in root's session keeps root's terminal as
its controlling terminal. Any other process of that user may then ``ptrace`` it (same uid) and
push a command line into root's shell with ``TIOCSTI`` — the su/sudo "tty pushback". So every
such child is started here and nowhere else: ``setsid`` before ``exec`` (a new session has no
controlling terminal, so ``open("/dev/tty")`` fails with ENXIO), standard input from
``/dev/null``, no descriptor of ours inherited, and no standard stream that is a terminal.
A test walks the package and fails when another module switches users by itself.
"""

from __future__ import annotations

import os
import pwd
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Any

from meshtui.errors import MeshtuiError
from meshtui.freeform import LibraryKwargs

RUN_ENV = "MESHTUI_RUN"
"""The test run a process was started under (``meshtui.lab.runs``): kept in every child's
environment, even one given an environment of its own, so whatever the run started is found."""

_OURS = ("user", "group", "extra_groups", "preexec_fn", "start_new_session", "process_group")
"""Popen arguments only this module sets: who the child is and which session it lives in."""


class RunAsError(MeshtuiError):
    """A child could not be started as asked (unknown user, a terminal handed to it)."""


@dataclass(frozen=True)
class OsUser:
    """A user to run a child as: its name, uid, primary gid and supplementary groups (none
    unless given)."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...] = ()

    @classmethod
    def named(cls, name: str) -> OsUser:
        """The user ``name`` from the password database; RunAsError when there is none."""
        try:
            pw = pwd.getpwnam(name)
        except KeyError:
            raise RunAsError(f"there is no OS user {name!r} on this machine") from None
        return cls(pw.pw_name, pw.pw_uid, pw.pw_gid)


def command(argv: Sequence[str], user: OsUser | None, *, netns: str | None = None) -> list[str]:
    """The command line that runs ``argv`` as ``user`` (inside network namespace ``netns``).

    Inside a namespace the switch is ``setpriv`` after ``ip netns exec`` (entering a namespace
    needs root); otherwise it is done by :func:`run`/:func:`spawn` themselves.
    """
    cmd = [str(a) for a in argv]
    if netns is None:
        return cmd
    if not netns or "/" in netns or netns.startswith("-"):
        raise RunAsError(f"{netns!r} is not a namespace name")
    prefix = ["ip", "netns", "exec", netns]
    if user is not None:
        prefix += ["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}"]
        if user.groups:
            prefix += [f"--groups={','.join(str(g) for g in user.groups)}", "--"]
        else:
            prefix += ["--clear-groups", "--"]
    return prefix + cmd


def _no_terminal(kwargs: LibraryKwargs) -> None:
    """Refuse a standard stream that is a terminal: the child could type into it."""
    for key in ("stdin", "stdout", "stderr"):
        stream: int | IO[Any] | None = kwargs.get(key)
        if stream is None or stream in (subprocess.PIPE, subprocess.DEVNULL, subprocess.STDOUT):
            continue
        fd = stream if isinstance(stream, int) else stream.fileno()
        if os.isatty(fd):
            raise RunAsError(f"a child of another user may not be given a terminal as {key}")


def _options(user: OsUser | None, netns: str | None, kwargs: LibraryKwargs) -> LibraryKwargs:
    taken = [k for k in _OURS if k in kwargs]
    if taken:
        raise RunAsError(f"{', '.join(taken)} are set by meshtui.runas, not by its callers")
    if kwargs.get("close_fds") is False or kwargs.get("pass_fds"):
        raise RunAsError("a child of another user inherits no descriptor of ours")
    options = {"stdin": subprocess.DEVNULL, "cwd": "/", **kwargs}
    if options.get("env") is not None and RUN_ENV in os.environ:
        options["env"] = {**options["env"], RUN_ENV: os.environ[RUN_ENV]}
    if options.get("stdin") is None:
        options["stdin"] = subprocess.DEVNULL
    _no_terminal(options)
    options["start_new_session"] = True
    if user is not None and netns is None:
        options.update(user=user.uid, group=user.gid, extra_groups=list(user.groups))
    return options


def run(
    argv: Sequence[str], user: OsUser | None, *, netns: str | None = None, **kwargs: Any
) -> subprocess.CompletedProcess[Any]:
    """:func:`subprocess.run` of ``argv`` as ``user`` (None: as we are) in a new session.

    Keyword arguments go to :func:`subprocess.run`, except the ones that choose the user or
    the session (RunAsError); standard input is ``/dev/null`` unless given.
    """
    return subprocess.run(command(argv, user, netns=netns), **_options(user, netns, kwargs))


def spawn(
    argv: Sequence[str], user: OsUser | None, *, netns: str | None = None, **kwargs: Any
) -> subprocess.Popen[Any]:
    """:class:`subprocess.Popen` of ``argv`` as ``user`` (None: as we are) in a new session."""
    return subprocess.Popen(command(argv, user, netns=netns), **_options(user, netns, kwargs))
