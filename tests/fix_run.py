"""The test run cleans up after itself: an interrupted run leaves no server, agent or network.

The run's controlling process (not an xdist worker) first removes what a run killed outright
(``kill -9``) left behind, then marks itself as a run (:mod:`meshtui.lab.runs`): every process
the suite starts, in whatever session, carries the mark, and so does every network it builds.
On SIGTERM or SIGINT it kills every process and removes every network of its own run before it
ends by that signal, and every temporary folder its fixtures marked as the run's
(:func:`meshtui.lab.runs.mark_folder`: a server's data, a lab's state), which they do not get to
remove themselves.
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType

import pytest

from meshtui.lab import runs


def _say(lines: list[str], why: str) -> None:
    if lines:
        sys.stderr.write(f"meshtui test run: {why}:\n" + "".join(f"  {s}\n" for s in lines))
        sys.stderr.flush()


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):  # an xdist worker belongs to its controller's run
        return
    _say(runs.sweep(runs.stale), "removed what an earlier, killed run left")
    mine = runs.begin()

    def interrupted(signum: int, _frame: FrameType | None) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):  # a second signal must not cut this short
            signal.signal(sig, signal.SIG_IGN)
        try:
            _say(runs.sweep(lambda run: run == mine), f"interrupted by signal {signum}")
        finally:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGINT, interrupted)
