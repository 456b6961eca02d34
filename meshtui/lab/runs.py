"""A run's mark: what a test run made carries its owner's name, so whatever outlives it is found.

A run (the test suite's controlling process) names itself in ``MESHTUI_RUN`` as its pid and
start time (``<pid>.<ticks>``, so a reused pid is another run). Every process started below it
inherits the variable — :mod:`meshtui.runas` keeps it even in a server's own environment — and
a network built under it carries it as its bridge's alias (:func:`meshtui.lab.netns.create`).
:func:`sweep` removes the processes and networks of the runs it is asked about: a run's own
when it is interrupted, and those of runs whose owner is gone (``kill -9``) at the next run's
start or by ``meshtui lab sweep``. A run's temporary folders (a server's data, a lab's state)
carry the mark too, in a file of their own (:func:`mark_folder`), and go with the rest: an
interrupted run's fixtures never get to remove them. Nothing without the mark is touched: an
operator's servers, a lab brought up outside a run, another live run.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from meshtui.lab import netns
from meshtui.lab.wait import poll
from meshtui.runas import RUN_ENV

_PROC = Path("/proc")
_GONE_S = 10.0  # how long killed processes may take to be gone


@dataclass(frozen=True)
class Run:
    """One run: its owner's pid and the owner's start time in clock ticks since boot."""

    pid: int
    started: int

    @property
    def mark(self) -> str:
        """The run as ``MESHTUI_RUN`` and a bridge's alias spell it."""
        return f"{self.pid}.{self.started}"

    @classmethod
    def parse(cls, text: str) -> Run | None:
        """The run ``text`` names, or None when it names none."""
        pid, dot, started = text.strip().partition(".")
        if not (dot and pid.isdigit() and started.isdigit()):
            return None
        return cls(int(pid), int(started))

    def alive(self) -> bool:
        """Whether the run's owner still runs (the same process, not a reused pid)."""
        return _started(self.pid) == self.started


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name, or None when it is gone."""
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return text.rpartition(")")[2].split()


def _started(pid: int) -> int | None:
    fields = _stat(pid)
    return int(fields[19]) if fields and fields[0] != "Z" else None


def _gone(pid: int) -> bool:
    """Whether ``pid`` has ended (a zombie has: it holds nothing but its exit status)."""
    fields = _stat(pid)
    return fields is None or fields[0] in ("Z", "X")


def _all_gone(pids: list[int]) -> bool:
    return all(_gone(p) for p in pids)


def begin() -> Run:
    """Make this process a run's owner: the children it starts from now on carry its mark."""
    started = _started(os.getpid())
    run = Run(os.getpid(), started if started is not None else 0)
    os.environ[RUN_ENV] = run.mark
    return run


def current() -> Run | None:
    """The run this process belongs to, if any."""
    return Run.parse(os.environ.get(RUN_ENV, ""))


def _run_of(pid: int) -> Run | None:
    """The run process ``pid`` was started under, read from its environment (None: unmarked,
    gone, or not ours to read)."""
    try:
        environ = (_PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return None
    prefix = RUN_ENV.encode() + b"="
    for entry in environ.split(b"\0"):
        if entry.startswith(prefix):
            return Run.parse(entry[len(prefix) :].decode("ascii", "replace"))
    return None


def _ancestors() -> set[int]:
    """This process and every process above it: never signalled by a sweep."""
    seen: set[int] = set()
    pid = os.getpid()
    while pid > 0 and pid not in seen:
        seen.add(pid)
        fields = _stat(pid)
        pid = int(fields[1]) if fields else 0
    return seen


def marked_processes(chosen: Callable[[Run], bool]) -> dict[int, Run]:
    """Every live process whose run is ``chosen``, but this one and its ancestors."""
    spared = _ancestors()
    found: dict[int, Run] = {}
    for entry in _PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) in spared:
            continue
        run = _run_of(int(entry.name))
        if run is not None and chosen(run) and not _gone(int(entry.name)):
            found[int(entry.name)] = run
    return found


def marked_networks(chosen: Callable[[Run], bool]) -> dict[str, Run]:
    """Every network whose bridge carries the mark of a ``chosen`` run."""
    found: dict[str, Run] = {}
    if os.geteuid() != 0:
        return found
    for name, mark in netns.marks().items():
        run = Run.parse(mark)
        if run is not None and chosen(run):
            found[name] = run
    return found


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    try:  # our own child (an xdist worker, an agent) is reaped here, not left a zombie
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


FOLDER_MARK = ".meshtui-run"
"""In a run's temporary folder: the mark of the run that made it (:func:`mark_folder`)."""
FOLDER_PREFIX = "meshtui-"
"""What the name of every temporary folder a run marks begins with, in the system's temp folder."""


def mark_folder(folder: Path) -> None:
    """Mark ``folder`` (a temporary folder in the system's temp folder, named
    :data:`FOLDER_PREFIX`…) as this process's run's, so a sweep of that run removes it; nothing
    outside a run."""
    run = current()
    if run is not None:
        (folder / FOLDER_MARK).write_text(run.mark)


def marked_folders(chosen: Callable[[Run], bool]) -> dict[Path, Run]:
    """Every temporary folder a ``chosen`` run marked: a real folder (never a link) in the
    system's temp folder, this user's, its mark a regular file."""
    found: dict[Path, Run] = {}
    me = os.geteuid()
    for folder in Path(tempfile.gettempdir()).glob(f"{FOLDER_PREFIX}*"):
        try:
            st = folder.lstat()
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != me:
                continue
            fd = os.open(folder / FOLDER_MARK, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                continue
            run = Run.parse(os.read(fd, 64).decode("ascii", "replace").strip())
        except OSError:
            continue
        finally:
            os.close(fd)
        if run is not None and chosen(run):
            found[folder] = run
    return found


def sweep(chosen: Callable[[Run], bool]) -> list[str]:
    """Kill every process, remove every network and every temporary folder of the ``chosen``
    runs; what was done.

    Processes are stopped first, all of them, then killed, round after round until none is
    left: a worker in the middle of starting a server cannot start another once stopped. The
    folders go last, once nothing runs in them.
    """
    done: list[str] = []
    for _ in range(20):
        procs = marked_processes(chosen)
        if not procs:
            break
        for pid in procs:
            _signal(pid, signal.SIGSTOP)
        for pid in procs:
            _signal(pid, signal.SIGKILL)
        poll(partial(_all_gone, list(procs)), _GONE_S)
        for pid, run in sorted(procs.items()):
            done.append(f"killed pid {pid} of run {run.mark}")
    for name, run in sorted(marked_networks(chosen).items()):
        netns.destroy(name)
        done.append(f"removed namespaces {name}-* of run {run.mark}")
    for folder, run in sorted(marked_folders(chosen).items()):
        shutil.rmtree(folder, ignore_errors=True)
        done.append(f"removed {folder} of run {run.mark}")
    return done


def stale(run: Run) -> bool:
    """Whether ``run``'s owner is gone (what the next run and ``meshtui lab sweep`` remove)."""
    return not run.alive()
