"""One delivering action at a time (push, rotate, drill, recovery): per state folder on SQLite,
across every controller of one inventory on PostgreSQL.

On SQLite, an advisory ``flock`` on ``<state>/deliver.lock``: the kernel drops it when the
process dies, so a controller killed mid-rotation never leaves a lock behind, only a journal to
recover. On PostgreSQL (the controller's config names a conninfo file), the ``deliver`` turn
of the leader lease (:mod:`meshtui.controller.turn`): its epoch goes on every request and into
every write's fence, and the holder stops before its next send once its renew deadline passed.
"""

from __future__ import annotations

import fcntl
import os
import pwd
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from meshtui.controller import config
from meshtui.errors import InventoryError, RotationBusyError
from meshtui.protocol.fence import Fence

if TYPE_CHECKING:
    from meshtui.controller.reach import Reach
    from meshtui.controller.turn import Raise
    from meshtui.inventory.lease import Leases

LOCK_FILE = "deliver.lock"
WHO: str | None = None
"""Who takes the lock in this process when it is not an operator's command (the watch sets
``"watch"``), so whoever finds it busy reads ``pid 12: watch rotate``."""


def not_yours(path: Path) -> str:
    """Why this user cannot use ``path`` in the state folder, and the commands that fix it.

    A controller command run as root on the watch unit's folder leaves files only root may
    write; the unit's user then meets them."""

    def name(uid: int) -> str:
        try:
            return pwd.getpwuid(uid).pw_name
        except KeyError:
            return str(uid)

    folder = path.parent
    try:
        owner, keeper = name(path.stat().st_uid), name(folder.stat().st_uid)
    except OSError:
        owner = keeper = "another user"
    return (
        f"{path}: permission denied (it belongs to {owner}; this command runs as "
        f"{name(os.geteuid())}). Run every command on {folder} as its owner {keeper} "
        f"(sudo -u {keeper} meshtui ...), and give its files back: chown -R {keeper}: {folder}"
    )


def holder(state_dir: Path) -> str | None:
    """Who holds the lock now (``pid 12: rotate``), or None when it is free."""
    try:
        fd = os.open(state_dir / LOCK_FILE, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return os.pread(fd, 64, 0).decode(errors="replace").strip() or "another process"
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


@contextmanager
def delivering(ctl: Reach, action: str) -> Iterator[None]:
    """Hold the turn to deliver (the state folder's lock on SQLite, the ``deliver`` lease on
    PostgreSQL), or raise RotationBusyError naming the holder."""
    settings = config.load(ctl.state_dir)
    postgres = config.postgres_of(settings)
    if postgres is None:
        with _flock(ctl.state_dir, action):
            yield
        return
    from meshtui.controller.turn import TAKEN_FILE, Turn, claimant
    from meshtui.inventory.lease import DELIVER

    leases = ctl.leases(postgres)
    label = f"{WHO} {action}" if WHO else action
    turn = Turn(
        leases,
        DELIVER,
        claimant(settings.name),
        label,
        settings.lease,
        taken=ctl.state_dir / TAKEN_FILE,
    )
    turn.last_raise = lambda: _last_raise(ctl)
    try:
        turn.take(action)
        ctl.fence, ctl.turn = Fence(settings.name, turn.epoch), turn
        ctl.inventory.fence = turn.fence
        yield
    finally:
        try:
            if turn.raised and turn.holds():  # said in the audit, under the raised epoch
                ctl.inventory.record(
                    "lease-epoch-raised",
                    [],
                    {
                        "turn": DELIVER,
                        "at": turn.raised_at,
                        "timeline": _timeline(leases),
                        "raised": [
                            {"node": node, "node_epoch": held, "epoch": ours}
                            for node, held, ours in turn.raised
                        ],
                    },
                    "ok",
                )
        finally:
            ctl.fence, ctl.turn = Fence(settings.name), None
            ctl.inventory.fence = None
            turn.release()


def _last_raise(ctl: Reach) -> Raise | None:
    """When a holding of this inventory last raised its epoch, and on which timeline (its
    ``lease-epoch-raised`` event says), or None when none did."""
    from meshtui.controller.turn import Raise

    event = ctl.inventory.last_event("lease-epoch-raised")
    if event is None:
        return None
    at, timeline = event["detail"].get("at"), event["detail"].get("timeline")
    timeline = timeline if isinstance(timeline, int) else None
    if isinstance(at, int | float):
        return Raise(float(at), timeline)
    try:  # recorded without its own time: the event's, a little later than the raise
        return Raise(datetime.fromisoformat(event["at"]).timestamp(), timeline)
    except ValueError:
        return None


def _timeline(leases: Leases) -> int | None:
    """The lease server's timeline now, or None when it cannot be asked."""
    try:
        return leases.timeline()
    except InventoryError:
        return None


@contextmanager
def _flock(state_dir: Path, action: str) -> Iterator[None]:
    """Hold the state folder's delivery lock, or raise RotationBusyError naming the holder."""
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except PermissionError:
        raise InventoryError(not_yours(path)) from None
    except OSError as exc:  # ELOOP: a link there, never followed
        raise InventoryError(
            f"{path} cannot be opened ({exc.strerror}); it must be a regular file (remove it)"
        ) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "another process"
            raise RotationBusyError(
                f"cannot {action}: a push, rotation or drill is already running ({holder}); "
                "wait for it to finish"
            ) from exc
        os.ftruncate(fd, 0)
        label = f"{WHO} {action}" if WHO else action
        os.pwrite(fd, f"pid {os.getpid()}: {label}".encode(), 0)
        yield
    finally:
        os.close(fd)
