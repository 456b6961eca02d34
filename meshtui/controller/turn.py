"""A turn this process holds in the leader lease (:mod:`meshtui.inventory.lease`), kept renewed
by a thread of its own, and given up by this process at the renew deadline (watched by another,
so it is noticed on time even while a renewal waits on a cut link).

The deadline is counted on this machine's boot clock (:func:`since_boot`: monotonic, and
counting a suspend, which the monotonic clock does not) from the moment the last successful
renewal was *sent*: the server set the lease's end ``length_s`` after it received that
statement, so stopping ``deadline_s`` (< ``length_s``) after sending it stops before anyone
else can take the turn, whatever the two machines' wall clocks say. A renewal that fails is
retried every ``retry_s``; a renewal the server refuses (the turn was taken) ends it at once.

The processes of one controller on one machine also keep, in its state folder, the highest
epoch one of them took (:data:`TAKEN_FILE`): a node tells holdings apart by their controller's
name only, so a process given an epoch another process of its controller took (the lease's
database lost that holding in a switch) raises its own past it before it sends anything.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from meshtui.controller import config
from meshtui.controller.config import LeaseConfig
from meshtui.errors import InventoryError, LeaseLostError, RotationBusyError
from meshtui.inventory import Transaction, lease
from meshtui.inventory.lease import Claimant, LeaseRow, Leases
from meshtui.protocol.fence import EPOCH_MAX

__all__ = [
    "TAKEN_FILE",
    "Claimant",
    "LeaseRow",
    "Raise",
    "Turn",
    "claimant",
    "note_taken",
    "since_boot",
    "watch_turn",
]

TAKEN_FILE = "deliver.epoch"
"""In a controller's state folder: the highest ``deliver`` epoch a process of it took."""
OWN = "this controller"
"""Where a raise found the epoch when a process of this controller took it (not a node)."""


@dataclass(frozen=True)
class Raise:
    """An earlier raise of this inventory's epoch: when (the raiser's clock), and on which
    timeline of the server (None: not known)."""

    at: float
    timeline: int | None


def since_boot() -> float:
    """Seconds on the clock the renew deadline is counted on: ``CLOCK_BOOTTIME`` where there is
    one (Linux), which goes on counting while the machine is suspended, so a holder woken from
    a suspend longer than its deadline knows it lost the turn; the monotonic clock elsewhere
    (it stops then)."""
    boottime = getattr(time, "CLOCK_BOOTTIME", None)
    if boottime is None:
        return time.monotonic()
    return time.clock_gettime(boottime)


def note_taken(path: Path, epoch: int) -> int:
    """Record in ``path`` (0600, under ``flock``, fsynced) that a process of this controller
    took ``epoch``; return the highest one taken before. OSError when it cannot."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            before = int(os.pread(fd, 32, 0).split()[0])
        except (ValueError, IndexError):
            before = 0  # a new (or unreadable) file
        if epoch > before:
            os.pwrite(fd, f"{epoch:020d}\n".encode(), 0)
            os.fsync(fd)
        return before
    finally:
        os.close(fd)  # releases the flock


def claimant(controller: str) -> Claimant:
    """This process of controller ``controller`` on this machine."""
    return Claimant(controller, socket.gethostname(), os.getpid())


def watch_turn(state_dir: Path) -> Turn | None:
    """The ``watch`` turn of the controller in ``state_dir`` when its inventory is on
    PostgreSQL (not yet taken); None on SQLite, where a watch is alone and leads."""
    postgres = config.inventory_postgres(state_dir)
    if postgres is None:
        return None
    settings = config.load(state_dir)
    leases = Leases.from_file(postgres)
    return Turn(leases, lease.WATCH, claimant(settings.name), "watch", settings.lease)


class Turn:
    """One turn (``deliver`` or ``watch``) for one process: :meth:`try_take` it, then it is
    renewed until :meth:`release` or until it is lost; :meth:`check` says which."""

    def __init__(
        self,
        leases: Leases,
        name: str,
        me: Claimant,
        action: str,
        numbers: LeaseConfig,
        *,
        clock: Callable[[], float] | None = None,
        on_lost: Callable[[str], None] | None = None,
        taken: Path | None = None,
    ) -> None:
        self.leases, self.name, self.me, self.action = leases, name, me, action
        self.taken = taken
        """The file of the epochs this controller's processes took (:func:`note_taken`)."""
        self.numbers = numbers
        self.clock = since_boot if clock is None else clock
        self.on_lost = on_lost
        self.row: LeaseRow | None = None  # this process's holding, while it holds
        self.other: LeaseRow | None = None  # who held the turn when taking it failed
        self.renewed_at = 0.0  # when the last successful acquire or renewal was sent
        self.lost_why: str | None = None
        self.raised: list[tuple[str, int, int]] = []
        """Each raise of this holding's epoch: the node that held the epoch, its epoch, ours."""
        self.raised_at: float | None = None
        """When (this machine's wall clock) this holding first raised its epoch."""
        self.last_raise: Callable[[], Raise | None] = lambda: None
        """When a holding of this inventory last raised its epoch, and on which timeline of
        the server (its audit says; None: none did), asked by :meth:`why_not_past` only when
        a node refuses (a read of the audit)."""
        self._earlier: list[float] = []  # when an earlier raise counts, once asked
        self._writing = threading.Lock()  # a renewal and a raise never cross
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def epoch(self) -> int:
        """The holding's epoch (0 when this process does not hold the turn)."""
        return self.row.epoch if self.row is not None else 0

    def try_take(self) -> bool:
        """Take the turn when it is free or ran out; False (and :attr:`other` says who holds it)
        otherwise. InventoryError when the server cannot be asked."""
        sent = self.clock()
        got = self.leases.acquire(self.name, self.me, self.action, self.numbers.length_s)
        if got is None:
            self.other = self.leases.read(self.name)
            return False
        self.row, self.other, self.renewed_at, self.lost_why = got, None, sent, None
        self._stop.clear()
        if self.taken is not None:
            try:
                self._past_own(self.taken, got.epoch)
            except BaseException:
                self.release()
                raise
        self._thread = threading.Thread(
            target=self._renewing, name=f"meshtui lease {self.name}", daemon=True
        )
        self._thread.start()
        threading.Thread(
            target=self._watching, name=f"meshtui lease {self.name} deadline", daemon=True
        ).start()
        return True

    def take(self, action: str) -> None:
        """Take the turn to ``action``, or RotationBusyError naming who holds it."""
        if self.try_take():
            return
        who = self.other.who() if self.other is not None else "another controller"
        raise RotationBusyError(
            f"cannot {action}: a push, rotation or drill is already running ({who}); "
            "wait for it to finish"
        )

    def holds(self) -> bool:
        """True while this process holds the turn and its renew deadline has not passed."""
        if self.row is None or self.lost_why is not None:
            return False
        if self.clock() - self.renewed_at >= self.numbers.deadline_s:
            self._lose(f"not renewed within its {self.numbers.deadline_s:g} s deadline")
            return False
        return True

    def check(self) -> None:
        """LeaseLostError unless this process still holds the turn (called before each send)."""
        if not self.holds():
            raise LeaseLostError(
                controller=self.me.controller,
                epoch=self.epoch,
                turn=self.name,
                after=self.lost_why or "it was not taken",
            )

    def fence(self, tx: Transaction) -> None:
        """Inside a delivering write's transaction ``tx``: the holding still holds by the
        server's clock, and the row stays locked until it commits."""
        self.check()
        tx.check_lease(self.name, self.me, self.epoch)

    def why_not_past(self, node: str, highest: int, at: float | None) -> str | None:
        """Why ``node``'s epoch ``highest`` is not raised past, or None when it may be.

        Beyond :data:`EPOCH_MAX` no lease gave it. A switch loses holdings taken before it,
        so before the first raise past them. A node
        that accepted ``highest`` (at ``at``, its clock) after the newest raise of this
        inventory saw a holding that began after it and that this database does not know: a
        lease on another database. Raising past it would let the two leases deliver by turns."""
        if self.row is not None and self.row.epoch > highest:
            return None  # nothing to raise past
        if highest >= EPOCH_MAX:
            return (
                f"not raised past: {node} says it accepted epoch {highest}, beyond any epoch a "
                f"lease gives ({EPOCH_MAX} at most): its record of accepted requests "
                "(accepted.log) was changed on that node; check the node"
            )
        if at is None:
            return None
        if not self._earlier:
            self._earlier.append(self._earlier_raise())
        last = max(self._earlier[0], self.raised_at or 0.0)
        if not last or at <= last:
            return None

        def when(t: float) -> str:
            return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds")

        return (
            f"not raised past: {node} accepted epoch {highest} at {when(at)}, after this "
            f"inventory last raised its epoch ({when(last)}), so a controller holds a lease "
            "this database does not know: are two controllers on two databases? Check each "
            "controller.toml's [inventory] conninfo; meshtui audit --verify names the nodes "
            "whose audit head this inventory does not hold. (A second switch that lost "
            "holdings reads the same: the next commands catch up.)"
        )

    def _earlier_raise(self) -> float:
        """When an earlier holding raised its epoch on the server's timeline of now (0: none
        did). A raise on an earlier timeline was before a promotion since, which may have lost
        holdings again: those nodes' epochs are raised past once more."""
        earlier = self.last_raise()
        if earlier is None:
            return 0.0
        if earlier.timeline is not None:
            try:
                now = self.leases.timeline()
            except InventoryError:
                now = None
            if now is not None and now != earlier.timeline:
                return 0.0
        return earlier.at

    def raise_past(self, node: str, highest: int) -> bool:
        """``node`` holds epoch ``highest`` at or past this holding's: raise ours to one above
        it while the lease is still ours (True), or lose the turn (False). The database's row
        is the lease's truth, but a node that accepted an epoch the database lost (a switch to
        a standby that had not received it) knows one more."""
        with self._writing:
            if self.row is None or self.lost_why is not None:
                return False
            if self.row.epoch > highest:
                return True  # raised already, for another node
            try:
                got = self.leases.raise_epoch(self.name, self.me, self.row.epoch, highest + 1)
            except InventoryError:
                return False  # the renewal settles whether the turn is still ours
            if got is None:
                self._lose("the server says it is no longer this process's")
                return False
            self.raised.append((node, highest, got.epoch))
            if self.raised_at is None:
                self.raised_at = time.time()
            self.row = got
            if self.taken is not None:  # unrecorded, a later repeat of it is only seen by nodes
                with contextlib.suppress(OSError):
                    note_taken(self.taken, got.epoch)
            return True

    def _past_own(self, taken: Path, epoch: int) -> None:
        """Raise the holding's epoch past the highest a process of this controller took (kept
        in ``taken``) when ``epoch`` is not above it; InventoryError (nothing sent yet) when
        that cannot be done."""
        try:
            before = note_taken(taken, epoch)
        except OSError as exc:
            raise InventoryError(
                f"{taken}: cannot record the epoch taken ({exc.strerror}); nothing was sent"
            ) from None
        if before >= epoch and not self.raise_past(OWN, before):
            raise InventoryError(
                f"epoch {epoch} of the {self.name} turn was taken before by a process of "
                f"controller {self.me.controller} ({taken}) and could not be raised past "
                "it; nothing was sent: run the command again"
            )

    def release(self) -> None:
        """Stop renewing and end the holding now, so the next taker need not wait it out."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(self.numbers.length_s)
        row, self.row = self.row, None
        if row is not None:  # lost by its deadline here, it may still be the server's: end it
            try:
                self.leases.release(self.name, self.me, row.epoch)
            except InventoryError:
                pass  # it runs out by itself

    def _lose(self, why: str) -> None:
        if self.lost_why is not None:
            return
        self.lost_why = why
        self._stop.set()
        if self.on_lost is not None:
            self.on_lost(why)

    def _watching(self) -> None:
        """Notice the deadline when it passes, even while a renewal waits on a cut link, so
        whoever listens (:attr:`on_lost`) hears it then and not when the renewal gives up."""
        tick = max(0.05, min(0.5, self.numbers.deadline_s / 10))
        while not self._stop.wait(tick):
            if not self.holds():
                return

    def _renewing(self) -> None:
        wait = self.numbers.renew_s
        while not self._stop.wait(wait):
            if not self.holds():
                return
            with self._writing:
                sent = self.clock()
                try:
                    got = self.leases.renew(self.name, self.me, self.epoch, self.numbers.length_s)
                except InventoryError:
                    wait = self.numbers.retry_s  # retried until the deadline passes
                    continue
                if got is None:
                    self._lose("the server says it is no longer this process's")
                    return
                self.row, self.renewed_at, wait = got, sent, self.numbers.renew_s
