"""What this agent has accepted, kept on disk so a restart forgets nothing an attacker could use.

One record beside the node's keys, ``accepted.log``, holds both halves of the replay guard:

- each controller's sequence numbers accepted lately (two controllers' sequences are
  independent: each has its own floor and numbers). A number is accepted once, and only if it
  is above its controller's floor (the newest number accepted from it minus
  :data:`WINDOW_US`). The window lets concurrent requests (two processes of one controller,
  parallel threads) arrive slightly out of order; it is measured on the controller's own
  sequence, never against this agent's start time, so a restart locks nobody out.
- the highest epoch a delivering request was accepted under: a delivering request of a lower
  epoch is refused (:class:`~meshtui.errors.FencedError`), before a restart as after it.
- per pair end, the generation of the newest delivery this node accepted. A delivery of an
  older generation is refused unless its signed item says it rolls back from exactly that
  generation.

Each request adds one line (its sequence number, for a delivery the generations it is accepted
with, and the controller's audit head when it is longer than the one kept) and one
``fdatasync``, *before* the request is acted on: one durable write per
request, where three files (requests, generations, audit head) each replaced and fsynced twice
cost up to six. A rotation's consumer delivery, signed ahead, is recorded in its ``prepare``'s
line (its number and generations), so when it arrives there is nothing left to write. The first line is a whole
snapshot; the file is rewritten as one snapshot line (atomically) at start and every
:data:`COMPACT_EVERY` lines. A torn last line (a crash inside the append, before its fdatasync
returned, so before anything was acted on) is dropped; any other unreadable line stops the agent.
An append that fails (a full disk, an I/O error) is cut off again before the error is raised,
so a fragment never ends up in the middle of the record.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypedDict

import msgspec

from meshtui.atomic import write_private
from meshtui.errors import EnvelopeError, FencedError, WireError
from meshtui.protocol.messages import ConsumerItem, DeliverRequest, Holding, ManifestEntry
from meshtui.protocol.wire import MAX_SKEW_S

LEDGER = "accepted.log"
OLD_REQUESTS = "requests.json"  # before one record held both (read once, on upgrade)
OLD_GENERATIONS = "generations.json"
WINDOW_US = int(2 * MAX_SKEW_S * 1_000_000)
"""How far (in the controller's sequence, microseconds of its clock) a request may trail the
newest accepted one: the whole span the clock limit allows on both sides."""
RECENT_LIMIT = 10_000
"""At most this many numbers are kept; past it the floor rises (a refusal, never a replay)."""
COMPACT_EVERY = 1_000
"""Lines appended before the record is rewritten as one snapshot."""
ENDS = ("consumer", "provider")

ADVICE = (
    "delete it once the agent has been stopped for over a minute (every request captured "
    "before is then refused by the clock limit; the generations start again from what "
    "holdings.json says this node holds)"
)

Change = tuple[str, str, int]
"""(end, pair, generation) a delivery is accepted with."""


class Numbers(TypedDict):
    """One controller's numbers in a snapshot: its floor and the numbers accepted above it."""

    floor: int
    recent: list[int]


class Line(TypedDict, total=False):
    """One line of the record: a snapshot (``floor``, ``recent``: the numbers of requests that
    named no controller; ``by``: each named controller's; both ends' generations, the kept
    ``head``, the highest ``epoch``, ``epoch_by``, the controller whose request reached it, and
    ``epoch_at``, when: this node's clock)
    or a request (``s``, of controller ``c``, with a delivery's ``g``, a longer ``h`` and a higher epoch ``e``; a prepare's ``r``, the number of
    the delivery signed ahead, used from then on, with that delivery's ``g``; ``x``: the head a
    restored chain's head replaced, kept in the snapshot's ``history``)."""

    floor: int
    recent: list[int]
    by: dict[str, Numbers]
    epoch: int
    epoch_by: str
    epoch_at: float
    t: float
    c: str
    e: int
    consumer: dict[str, int]
    provider: dict[str, int]
    head: dict[str, object]
    s: int
    g: list[tuple[str, str, int]]
    h: dict[str, object]
    r: list[int]
    x: dict[str, object]
    history: list[dict[str, object]]


_LINE = msgspec.json.Decoder(Line)
"""A line of the record; also reads the two files of the version before (the same keys)."""


class Record(Protocol):
    """Make one request's acceptance durable (with the generations a delivery is accepted with,
    and the numbers of requests signed ahead whose acceptance this line already holds)."""

    def __call__(self, changes: Sequence[Change], ahead: Sequence[int] = ()) -> None: ...


@dataclass(frozen=True)
class Refusal:
    """Why one delivery item (a consumer credential or a whole provider manifest) was refused."""

    key: str
    reason: str


def _read(path: Path) -> list[Line] | None:
    """The record's lines, None when it does not exist; WireError (naming the line and the
    field) when it cannot be read."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise WireError(f"{path} cannot be read ({exc}); the agent will not run: {ADVICE}") from exc
    lines = raw.split(b"\n")
    torn = lines.pop()  # after the last newline: empty, or a line whose append never finished
    del torn
    out: list[Line] = []
    for n, line in enumerate(lines, 1):
        try:
            out.append(_LINE.decode(line))
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise WireError(
                f"{path} line {n} cannot be read ({exc}); the agent will not run without "
                f"knowing what it accepted: {ADVICE}"
            ) from exc
    return out


def _old(path: Path) -> Line:
    """A record of the version before (two files), {} when absent."""
    try:
        return _LINE.decode(path.read_bytes())
    except FileNotFoundError:
        return {}
    except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise WireError(f"{path} cannot be read ({exc}): {ADVICE}") from exc


class _Numbers:
    """One controller's sequence numbers: the floor, those accepted above it, and those a
    prepare recorded ahead (not yet taken; taken, and already on disk)."""

    def __init__(self) -> None:
        self.floor = 0
        self.recent: set[int] = set()
        self.ahead: set[int] = set()  # recorded ahead, not yet taken
        self.written: set[int] = set()  # taken, and recorded ahead

    def prune(self) -> None:
        if self.recent:
            self.floor = max(self.floor, max(self.recent) - WINDOW_US)
        self.recent = {s for s in self.recent if s > self.floor}
        if len(self.recent) > RECENT_LIMIT:
            kept = sorted(self.recent)[-RECENT_LIMIT:]
            self.floor, self.recent = kept[0] - 1, set(kept)
        if self.ahead or self.written:
            self.ahead = {s for s in self.ahead if s > self.floor}
            self.written = {s for s in self.written if s > self.floor}

    def snapshot(self) -> Numbers:
        return {"floor": self.floor, "recent": sorted(self.recent)}


UNNAMED = ""
"""Where the numbers of requests that named no controller (the version before) are kept."""


def _restores(new: Mapping[str, object], kept: Mapping[str, object] | None) -> bool:
    """True when ``new`` heads a restored chain ``kept`` does not (a proof it did not carry)."""
    proof = new.get("restore")
    if proof is None or kept is None:
        return False
    return proof != kept.get("restore")


class Accepted:
    """Sequence numbers and generations this agent accepted, one durable line per request.

    :meth:`take` admits a sequence number in memory (a second request with it is refused at
    once); :meth:`record` makes it durable, with a delivery's generations, before the request is
    acted on. A number taken but never recorded (a misshapen request) stays refused until a
    restart, and was never acted on.
    """

    def __init__(self, state_dir: Path, node: str, held: Iterable[Holding] = ()) -> None:
        self._path = state_dir / LEDGER
        self._node = node
        self._lock = threading.Lock()
        self._numbers: dict[str, _Numbers] = {}
        self._gens: dict[str, dict[str, int]] = {end: {} for end in ENDS}
        self.epoch = 0
        """The highest epoch a delivering request was accepted under."""
        self.epoch_by: str | None = None
        self.epoch_at: float | None = None
        """When (this node's wall clock) a request first reached :attr:`epoch` (None: before
        nodes kept it). A refusal says it: a holder raises past an epoch a switch lost, never
        past one a node accepted after that holder's database last raised its own (another
        database's lease)."""
        self._at_unwritten = False  # epoch_at not yet in a line of the record
        """The controller whose request first reached :attr:`epoch`: the epoch is its holding's,
        and the same number from another controller is refused (two holdings never share one)."""
        self.head: dict[str, object] | None = None
        """The newest audit head recorded with a request (:mod:`meshtui.host.state.anchor`)."""
        self.history: list[dict[str, object]] = []
        """Heads kept before a restore (or a re-key) replaced them, oldest first."""
        lines = _read(self._path)
        try:
            if lines is None:  # first run of this version: the old files, or the holdings
                self._upgrade(state_dir, held)
            else:
                for line in lines:
                    self._replay(line)
            for numbers in self._numbers.values():
                numbers.prune()
        except ValueError as exc:
            raise WireError(f"{self._path}: {exc}: {ADVICE}") from exc
        self._lines = 0
        self._fd = -1
        if lines is not None:  # rewritten as one snapshot (a torn last line goes); a new
            self._compact()  # record is made by the first request

    def _upgrade(self, state_dir: Path, held: Iterable[Holding]) -> None:
        old = _old(state_dir / OLD_REQUESTS)
        self._replay({"floor": old.get("floor", 0), "recent": old.get("recent", [])})
        gens = _old(state_dir / OLD_GENERATIONS)
        if not gens:
            by_end: dict[str, dict[str, int]] = {end: {} for end in ENDS}
            for h in held:
                by_end[h["end"]][h["pair"]] = h["generation"]
            gens = {"consumer": by_end["consumer"], "provider": by_end["provider"]}
        self._replay({"consumer": gens.get("consumer", {}), "provider": gens.get("provider", {})})

    def _of(self, controller: str | None) -> _Numbers:
        """The numbers of ``controller`` (made empty the first time it is named)."""
        key = UNNAMED if controller is None else controller
        numbers = self._numbers.get(key)
        if numbers is None:
            numbers = self._numbers[key] = _Numbers()
        return numbers

    def _replay(self, line: Line) -> None:
        """Fold one line (a snapshot or a request) into memory."""
        if "floor" in line or "recent" in line:
            unnamed = self._of(None)
            unnamed.floor = max(unnamed.floor, line.get("floor", 0))
            unnamed.recent.update(line.get("recent", []))
        for name, kept in line.get("by", {}).items():
            numbers = self._of(name)
            numbers.floor = max(numbers.floor, kept["floor"])
            numbers.recent.update(kept["recent"])
        numbers = self._of(line.get("c"))
        if "s" in line:
            numbers.recent.add(line["s"])
        numbers.recent.update(line.get("r", []))  # after a restart, used like any other
        for epoch, by, at in (
            (line.get("epoch", 0), line.get("epoch_by"), line.get("epoch_at")),
            (line.get("e", 0), line.get("c"), line.get("t")),
        ):
            if epoch > self.epoch or self._unclaimed(epoch):
                self.epoch, self.epoch_by, self.epoch_at = epoch, by, at
        self._gens["consumer"].update(line.get("consumer", {}))
        self._gens["provider"].update(line.get("provider", {}))
        for end, pair, gen in line.get("g", []):
            if end not in self._gens:
                raise ValueError(f"unknown end {end!r} in a delivery's generations")
            self._gens[end][pair] = gen
        self.history.extend(line.get("history", []))
        if "x" in line:
            self.history.append(line["x"])
        head = line.get("h", line.get("head"))
        if head is not None:
            self.head = head

    def _compact(self) -> None:
        """Rewrite the record as one snapshot line (atomically, durably); append from there."""
        unnamed = self._numbers.get(UNNAMED, _Numbers())
        snapshot: Line = {
            "floor": unnamed.floor,
            "recent": sorted(unnamed.recent),
            "consumer": self._gens["consumer"],
            "provider": self._gens["provider"],
        }
        named = {k: n.snapshot() for k, n in self._numbers.items() if k != UNNAMED}
        if named:
            snapshot["by"] = named
        if self.epoch:
            snapshot["epoch"] = self.epoch
            if self.epoch_by is not None:
                snapshot["epoch_by"] = self.epoch_by
            if self.epoch_at is not None:
                snapshot["epoch_at"] = self.epoch_at
        if self.head is not None:
            snapshot["head"] = self.head
        if self.history:
            snapshot["history"] = self.history
        write_private(self._path, json.dumps(snapshot, sort_keys=True).encode() + b"\n")
        if self._fd >= 0:
            os.close(self._fd)
        self._fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
        self._lines = 1

    def _append(self, data: bytes) -> None:
        """Append one line durably, or leave the record as it was and raise OSError.

        A write can stop half way (the disk fills up): the part written is cut off again, so
        the next line never lands after a fragment (which would be unreadable at the next
        start). When even that fails, the descriptor is dropped and the next record begins
        with a fresh snapshot (a rename, which drops the fragment); until then the fragment is
        the last line, which a start forgives as a torn append.
        """
        end = os.lseek(self._fd, 0, os.SEEK_END)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view) :]
            os.fdatasync(self._fd)
        except OSError:
            try:
                os.ftruncate(self._fd, end)
            except OSError:
                os.close(self._fd)
                self._fd = -1
            raise

    def close(self) -> None:
        """Let go of the record's descriptor."""
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def _unclaimed(self, epoch: int) -> bool:
        """True when ``epoch`` is the highest but nobody is known to hold it (kept by a guard
        from before nodes kept whose it is): the first controller to show it takes it."""
        return epoch == self.epoch > 0 and self.epoch_by is None

    # ---- sequence numbers -------------------------------------------------------------------
    def take(self, seq: int, controller: str | None = None, epoch: int | None = None) -> None:
        """Admit ``seq`` of ``controller`` once, in memory, or raise EnvelopeError saying why
        not (a number recorded ahead, :meth:`record`'s ``ahead``, is admitted once though
        already used). ``epoch``: a delivering request's, refused (FencedError) below the
        highest accepted, and from now on the highest when above it (durable with
        :meth:`record`)."""
        with self._lock:
            if epoch is not None and (
                epoch < self.epoch
                or (
                    epoch == self.epoch > 0
                    and None not in (self.epoch_by, controller)
                    and controller != self.epoch_by
                )
            ):
                who = controller or "the controller"
                raise FencedError(self._node, who, epoch, self.epoch, self.epoch_by, self.epoch_at)
            numbers = self._of(controller)
            if seq in numbers.ahead:  # recorded ahead: admitted once, its line already on disk
                numbers.ahead.discard(seq)
                numbers.written.add(seq)
            else:
                if seq <= numbers.floor:
                    raise EnvelopeError(
                        "refused: request is older than the requests this agent already "
                        "accepted (replayed?)"
                    )
                if seq in numbers.recent:
                    raise EnvelopeError("refused: replayed request (sequence number already used)")
                numbers.recent.add(seq)
                numbers.prune()
            if epoch is not None and (epoch > self.epoch or self._unclaimed(epoch)):
                self.epoch, self.epoch_by, self.epoch_at = epoch, controller, time.time()
                self._at_unwritten = True

    def record(
        self,
        seq: int,
        changes: Sequence[Change] = (),
        head: Mapping[str, object] | None = None,
        ahead: Sequence[int] = (),
        controller: str | None = None,
        epoch: int = 0,
    ) -> None:
        """Make ``seq`` of ``controller`` (with a delivery's accepted generations, the audit
        head the request showed when it is to be kept, and the epoch a delivering request was
        taken under) durable: one line, one fdatasync. OSError when it cannot be written (then
        nothing of the request is done).

        ``ahead``: numbers of requests the controller signed ahead (a consumer's delivery,
        recorded with its ``prepare``), recorded as used in the same line. When one of them
        arrives (:meth:`take`) with nothing to record that is not on disk already (its
        generations recorded ahead too, no longer audit head), it is not written again.
        """
        with self._lock:
            numbers = self._of(controller)
            if seq in numbers.written:
                numbers.written.discard(seq)
                if head is None and all(self._gens[e].get(p) == g for e, p, g in changes):
                    return
            ahead = [s for s in ahead if s > numbers.floor and s not in numbers.recent]
        line: Line = {"s": seq}
        if controller is not None:
            line["c"] = controller
        if epoch:
            line["e"] = epoch
        if changes:
            line["g"] = list(changes)
        if head is not None:
            line["h"] = dict(head)
        if ahead:
            line["r"] = ahead
        with self._lock:
            if epoch and epoch == self.epoch and self._at_unwritten and self.epoch_at is not None:
                line["t"] = self.epoch_at  # the first line under the epoch says when
                self._at_unwritten = False
            replaced = self.head if head is not None and _restores(head, self.head) else None
            if replaced is not None:
                line["x"] = replaced  # the restored chain's head replaces it: kept as history
            data = json.dumps(line, separators=(",", ":")).encode() + b"\n"
            if self._fd < 0 or self._lines >= COMPACT_EVERY:
                self._compact()
            self._append(data)
            self._lines += 1
            numbers.recent.update(ahead)
            numbers.ahead.update(ahead)
            for end, pair, gen in changes:
                self._gens[end][pair] = gen
            if replaced is not None:
                self.history.append(replaced)
            if head is not None:
                self.head = dict(head)

    def high_water(self) -> int:
        """The highest request number accepted (0: none yet): a restored controller numbers
        its requests past it."""
        with self._lock:
            return max((max(n.recent, default=n.floor) for n in self._numbers.values()), default=0)

    def forget_head(self) -> dict[str, object] | None:
        """Move the kept audit head into the history and keep none (``host rekey``: the next
        controller key signs another chain); rewritten as one snapshot. Call with the agent
        stopped. Returns the head moved."""
        with self._lock:
            old = self.head
            if old is not None:
                self.history.append(old)
                self.head = None
            self._compact()
            return old

    # ---- generations ------------------------------------------------------------------------
    def get(self, end: str, pair: str) -> int | None:
        """The newest generation accepted for one end of a pair."""
        with self._lock:
            return self._gens[end].get(pair)

    def check(self, payload: DeliverRequest) -> tuple[list[Refusal], list[Change]]:
        """Every item of a delivery against the generations accepted, nothing written: the
        refused items (keyed ``consumer:<pair>`` or ``provider:<provider>:<provision>``) and
        the generations the rest is accepted with (for :meth:`record`). Call under the agent's
        delivery lock, and record before any file is written."""
        refused: list[Refusal] = []
        changes: list[Change] = []
        for item in payload.get("consumer", []):
            if item["node"] != self._node:
                continue  # the delivery itself refuses it, naming the node
            pair = item["pair"]
            why = self._older(item, "consumer", pair, item["generation"])
            if why:
                refused.append(Refusal(f"consumer:{pair}", why))
            else:
                changes.append(("consumer", pair, item["generation"]))
        for spec in payload.get("provider", []):
            if spec["provider"].split("/", 1)[0] != self._node:
                continue
            ends = [(c["pair"], c["generation"], c) for c in spec["consumers"]]
            whys = [w for pair, gen, c in ends if (w := self._older(c, "provider", pair, gen))]
            if whys:  # a manifest is all or nothing
                refused.append(Refusal(f"provider:{spec['provider']}:{spec['provision']}", whys[0]))
            else:
                changes += [("provider", pair, gen) for pair, gen, _ in ends]
        return refused, changes

    def _older(
        self, item: ConsumerItem | ManifestEntry, end: str, pair: str, gen: int
    ) -> str | None:
        held = self._gens[end].get(pair)
        if held is None or gen >= held:
            return None
        note = item.get("rollback")
        if note is not None and held in note["from"]:
            return None
        return (
            f"{pair}: refused: generation {gen} is older than generation {held} this node "
            f"({self._node}, {end} end) already accepted, and the delivery is not a rollback "
            f"from generation {held} (a replay, or a controller with an out-of-date inventory; "
            "run meshtui push from the controller that rotated it)"
        )
