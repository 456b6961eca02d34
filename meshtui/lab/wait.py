"""Waiting in the lab: poll a condition until it holds, for at most a given time.

Starting and stopping servers, agents and namespaces all wait the same way; the error when
a wait runs out names what it waited for.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from meshtui.errors import LabError


def poll(
    ready: Callable[[], bool],
    timeout: float,
    *,
    every: float = 0.05,
    unless: Callable[[], bool] | None = None,
) -> bool:
    """Call ``ready`` until it returns True (then True), for at most ``timeout`` seconds.

    False when time runs out, or at once when ``unless`` (asked first each round) says there
    is no point waiting any more (the process that should get ready has exited, say).
    """
    deadline = time.monotonic() + timeout
    while True:
        if unless is not None and unless():
            return False
        if ready():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(every)


def wait_until(
    ready: Callable[[], bool], timeout: float, what: str, *, every: float = 0.05
) -> None:
    """:func:`poll`, raising a LabError that names ``what`` when time runs out."""
    if not poll(ready, timeout, every=every):
        raise LabError(f"gave up after {timeout:g} s waiting for {what}")


def ended(pid: int) -> bool:
    """Whether process ``pid`` has ended, reaping it when it is our child (no zombie lingers):
    the condition every lab server's stop waits for."""
    try:
        done, _status = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return True
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # it runs, as a user we may not signal
        return False
    return False
