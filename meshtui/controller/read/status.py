"""Every pair's state, derived from the inventory: who holds which generation, the last probe.

States follow docs/ARCHITECTURE.md "States of a pair". The reason is always filled in, because an operator
looking at a stale pair needs to know which end is behind and why.
"""

from __future__ import annotations

import gc
import re
import threading
import weakref
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from meshtui.contracts.adapter import alternate_login
from meshtui.controller.plan.alternation import alternate
from meshtui.controller.read import status_image
from meshtui.controller.reports import NOT_AS_DECLARED, Draining, Rotating
from meshtui.inventory import Inventory
from meshtui.inventory.rows import (  # StatusRow's columns by name
    CLIENT_ADDR,
    CONSUMER,
    CONSUMER_ERROR,
    CONSUMER_GENERATION,
    CREATED_AT,
    FILE,
    GENERATION,
    ID,
    LATENCY_MS,
    LOGIN,
    LOOPBACK,
    PROBE_GENERATION,
    PROBE_WITHDRAWN,
    PROBED_AT,
    PROVIDER,
    PROVIDER_ATTEMPTED_AT,
    PROVIDER_ERROR,
    PROVIDER_GENERATION,
    PROVISION,
    REASON,
    ROTATED_AT,
    USED_PASSWORD,
    VERDICT,
    WITHDRAWN_AT,
    RotationRow,
    StatusMark,
    StatusRow,
)
from meshtui.kinds import registry
from meshtui.model import OVERLAP_OPEN, OVERLAP_STATES, End, PairStatus, State, Verdict

PROBE_REFUSED = "probe refused: "
PROBE_UNDECIDED = "probe could not decide: "
"""How a pair stale by its last probe alone says so (every end holds its generation): a probe
decides it again, a delivery cannot."""
DRIFT = "changed outside meshtui at "
"""How push records a provider end whose server no longer holds what meshtui delivered."""
REPAIRED = "re-applied after it was "
"""The prefix of a provider end's note once push re-applied it (not an error)."""
LOCKED_OUT = "LOCKED OUT"
"""A pair whose provider holds the current generation while its consumer holds an older one:
the provider refuses what the consumer has (after ``rotate --revoke-old``, docs/rotation.md)."""


def _note(error: str | None) -> str:
    """A provider end's repaired-drift note, for the reason of a pair that is fine now."""
    return str(error) if error and str(error).startswith(REPAIRED) else ""


def _end_reason(end: End, generation: int | None, error: str | None, want: int) -> str | None:
    """Why an end is behind, or None when it holds ``want``."""
    if generation is None:
        if error:
            return f"{end} never received it: {error}"
        return f"{end} end never delivered (run meshtui push)"
    if generation == 0:
        return f"{end} holds nothing: {error or 'credential gone'}"
    if generation != want:
        tail = f": {error}" if error else ""
        return f"{end} holds generation {generation}, expected {want}{tail}"
    if error and str(error).startswith(REPAIRED):
        return None  # drift found and re-applied: a note, not a failure
    if error and str(error).startswith((DRIFT, NOT_AS_DECLARED)):
        return f"{end}: {error}"
    if error:  # holds the right generation, but the last attempt failed (or its reload)
        return f"{end}: last delivery failed: {error}"
    return None


def pair_state(row: StatusRow) -> tuple[State, str, bool]:
    """(state, reason, alarm) for one pair; a provider's repaired drift is added to the reason."""
    v_err = row[PROVIDER_ERROR]
    note = _note(v_err) if v_err and not row[WITHDRAWN_AT] else ""
    probed = row[VERDICT] is not None
    if (
        note
        and probed
        and not row[PROBE_WITHDRAWN]
        and str(row[PROBED_AT] or "") < str(row[PROVIDER_ATTEMPTED_AT] or "")
    ):
        probed = False  # that probe saw the server before the re-apply
    state, reason, alarm = _pair_state(row, probed)
    if not note:
        return state, reason, alarm
    if state is State.UNKNOWN and not probed:
        reason = "not probed since the provider was re-applied"
    return state, f"{reason}; provider {note}", alarm


def _pair_state(row: StatusRow, probed: bool) -> tuple[State, str, bool]:
    want, withdrawn_at = row[GENERATION], row[WITHDRAWN_AT]
    c_gen, c_err, v_gen, v_err = (
        row[CONSUMER_GENERATION],
        row[CONSUMER_ERROR],
        row[PROVIDER_GENERATION],
        row[PROVIDER_ERROR],
    )
    verdict, why, pr_gen, pr_withdrawn = (
        row[VERDICT],
        row[REASON],
        row[PROBE_GENERATION],
        row[PROBE_WITHDRAWN],
    )
    loopback, client_addr, used_password = row[LOOPBACK], row[CLIENT_ADDR], row[USED_PASSWORD]
    if withdrawn_at:
        if probed and pr_withdrawn:
            if verdict == Verdict.REFUSED:
                return State.REVOKED, f"withdrawn; login refused ({_refusal_code(why)})", False
            if verdict == Verdict.ACCEPTED:
                return State.STALE, "ALARM: withdrawn but its login still works", True
            if verdict == Verdict.NO_PASSWORD:
                return (
                    State.STALE,
                    "ALARM: withdrawn but its login gets in without a password",
                    True,
                )
            return State.STALE, f"withdrawn; revocation not verified ({why})", False
        return State.STALE, "withdrawn; revocation not verified", False
    behind = [
        r
        for r in (
            _end_reason(End.PROVIDER, v_gen, v_err, want),
            _end_reason(End.CONSUMER, c_gen, c_err, want),
        )
        if r
    ]
    if behind:
        if v_gen == want and c_gen is not None and c_gen < want:
            behind.insert(0, f"{LOCKED_OUT}: the provider refuses what the consumer holds")
        return State.STALE, "; ".join(behind), False
    if not probed or pr_withdrawn:
        return State.UNKNOWN, NEVER_PROBED, False
    if pr_gen != want:
        if verdict == "unknown" and not pr_gen:  # the probe never ran
            return State.UNKNOWN, f"cannot probe: {why}", False
        return State.UNKNOWN, f"{NOT_PROBED_SINCE}{want}", False
    loop = " over loopback" if loopback else ""
    if verdict == Verdict.ACCEPTED and used_password != 0:
        return State.WORKING, f"logged in from {client_addr or 'consumer'}{loop}", False
    if verdict in (Verdict.ACCEPTED, Verdict.NO_PASSWORD):
        return State.STALE, "ALARM: the server did not demand a password", True
    if verdict == Verdict.REFUSED:
        return State.STALE, f"{PROBE_REFUSED}{why}", False
    return State.STALE, f"{PROBE_UNDECIDED}{why}", False


NEVER_PROBED = "never probed"
_CODE = re.compile(r"\(([A-Za-z0-9]{4,})\)")  # 28P01, WRONGPASS, InvalidAccessKeyId


def _refusal_code(why: str | None) -> str:
    """The server's code for a refusal, as the kind's probe put it in its reason ("password
    authentication failed (28P01)", "AUTH refused (WRONGPASS)", "signed request refused
    (InvalidAccessKeyId) over TLS"); "refused" when it named none."""
    found = _CODE.search(why or "")
    return found.group(1) if found else "refused"


NOT_PROBED_SINCE = "not probed since generation "
"""A pair just rotated, waiting for its first probe: routine, not a change to alert about."""


def _plain(row: StatusRow) -> tuple[State, str] | None:
    """The state and reason of a plain pair, or None to take the full path.

    The common cases, decided in a few tests: both ends hold the current generation without
    an error and the pair is not withdrawn, and either nothing has probed it yet (as push leaves
    it) or its newest probe logged in with the password. :func:`pair_state` gives the same
    answer for these rows; this only skips its steps, since status reads every pair.
    """
    want = row[GENERATION]
    if not (
        want
        and row[CONSUMER_GENERATION] == want
        and row[PROVIDER_GENERATION] == want
        and row[WITHDRAWN_AT] is None
        and row[CONSUMER_ERROR] is None
        and row[PROVIDER_ERROR] is None
    ):
        return None
    verdict = row[VERDICT]
    if verdict is None or row[PROBE_WITHDRAWN]:
        return State.UNKNOWN, NEVER_PROBED
    if verdict == Verdict.ACCEPTED and row[PROBE_GENERATION] == want and row[USED_PASSWORD] != 0:
        return State.WORKING, (
            f"logged in from {row[CLIENT_ADDR] or 'consumer'}"
            f"{' over loopback' if row[LOOPBACK] else ''}"
        )
    return None


def _working(row: StatusRow) -> str | None:
    """The reason of a pair that is plainly working, or None (the working half of :func:`_plain`)."""
    plain = _plain(row)
    return plain[1] if plain is not None and plain[0] is State.WORKING else None


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Hold Python's cycle collector off while status builds its reports: none of them is part
    of a cycle, yet every 700 of them would start a collection, and now and then one that walks
    the controller's whole heap. Turned back on after, unless it was off already."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


@dataclass
class _Kept:
    """What a keeping reader made at its last read of every pair: the statuses (sorted by id),
    the mark the rows were read at, and the open rotations and provider kinds they were made
    with; ``places``: each pair's place in ``out``, made at the first read that needs it."""

    mark: StatusMark
    rotating: dict[str, int]
    kinds: dict[tuple[str, str], str]
    out: list[PairStatus]
    places: dict[str, int] | None = None


_kept: weakref.WeakKeyDictionary[Inventory, _Kept] = weakref.WeakKeyDictionary()
_kept_lock = threading.Lock()


def statuses(
    inv: Inventory,
    ids: Iterable[str] | None = None,
    *,
    limit: int | None = None,
    keep: bool = False,
    image: Path | None = None,
) -> list[PairStatus]:
    """The status row of every pair (or the named ones, or the first ``limit``), sorted by pair
    id: one query.

    ``keep``: a reader that reads every pair again and again (``watch``) keeps what it made
    with ``inv`` and, next time, reads and makes only the pairs written since (by any process)
    and those whose open rotation began or ended. The objects in the list are shared with that
    next read: read-only, as :class:`~meshtui.model.PairStatus` says. ``image``: a one-shot
    reader (the CLI, a fresh process) does the same from the status image in that folder
    (:mod:`~meshtui.controller.read.status_image`), as a keeping reader does at its first read; either
    leaves a fresh image there when it read every pair or made many. Neither: every pair read
    and made, nothing kept.
    """
    with _collector_paused():
        if ids is not None or limit is not None:
            return _statuses(inv.status_rows(ids, limit), _rotating(inv), inv.provider_kinds(), inv)
        if keep:
            return _kept_statuses(inv, image)
        if image is not None:
            return _through_image(inv, None, image).out
        return _statuses(inv.status_rows(), _rotating(inv), inv.provider_kinds(), inv)


def _rotating(inv: Inventory) -> dict[str, int]:
    """Each pair in an open (interrupted or running) rotation -> that rotation's number."""
    return _rotating_of(inv.open_rotations())


def _rotating_of(rotations: Iterable[RotationRow]) -> dict[str, int]:
    """Each pair in one of ``rotations`` -> that rotation's number."""
    return {i["pair"]: r["id"] for r in rotations for i in r["items"]}


def overlaps(inv: Inventory) -> dict[str, str]:
    """Each pair of an open overlap whose provider may accept both credentials -> what status,
    doctor and watch say of it: since when, and what closes it."""
    return {
        i["pair"]: (
            f"{OVERLAP_OPEN}: both credentials accepted since {r['started_at']} (rotation "
            f"{r['id']}, {r['state']}); the next push or watch removes the old one"
        )
        for r in inv.open_rotations()
        if r["state"] in OVERLAP_STATES
        for i in r["items"]
    }


def draining(inv: Inventory, ids: Iterable[str] | None = None) -> dict[str, Draining]:
    """Each pair (of ``ids``, or every one) whose sessions on an old credential are left to
    drain: how many remain at the last count, and when they are ended at the latest."""
    wanted = None if ids is None else set(ids)
    return {
        pid: Draining(pid, d["sessions"], d["until"], d["counted_at"])
        for pid, d in inv.drains().items()
        if wanted is None or pid in wanted
    }


def rotations(inv: Inventory, rows: Iterable[PairStatus]) -> dict[str, Rotating]:
    """How each pair of ``rows`` that overlaps is rotated as declared, and for one that
    alternates between two logins the login its consumer's file names now (the alternate of
    the generation the consumer holds)."""
    wanted = {r.pair: r for r in rows if not r.withdrawn}
    out: dict[str, Rotating] = {}
    for pid, mode in inv.overlapping().items():
        r = wanted.get(pid)
        if r is None:
            continue
        holds = None
        if r.kind and registry.can_alternate(registry.kind_of(r.kind)) and r.consumer_generation:
            holds = alternate_login(r.login, alternate(r.consumer_generation))
        out[pid] = Rotating(pid, mode.rotation, mode.grace, holds)
    return out


REWRITE_AFTER = 64
"""A reader given the image's folder that made more statuses than this writes the image again
(as after a read of every pair), so the next one-shot reader makes fewer; for fewer changed
pairs writing every pair's status is not worth it."""


@dataclass(frozen=True)
class _Read:
    """A read brought up to date: every status (sorted by id), what to keep of it (None: read
    inside a write, nothing to keep), whether every pair was read, and how many were made."""

    out: list[PairStatus]
    kept: _Kept | None
    whole: bool
    made: int


def _kept_statuses(inv: Inventory, image: Path | None) -> list[PairStatus]:
    """Every pair's status, made anew only for the pairs that changed since the kept read (the
    first read starts from the image in ``image``, when one holds)."""
    with _kept_lock:
        kept = _kept.pop(inv, None)  # a reader in another thread meanwhile reads every pair
    read = _through_image(inv, kept, image)
    if read.kept is not None:
        with _kept_lock:
            _kept[inv] = read.kept
    return list(read.out)


def _through_image(inv: Inventory, kept: _Kept | None, image: Path | None) -> _Read:
    """:func:`_brought_up` from ``kept``, or with nothing kept from the status image in the
    folder ``image`` (when it holds); the image written again when that read every pair or
    made more than :data:`REWRITE_AFTER` statuses."""
    if kept is None and image is not None:
        found = status_image.read(image, inv.identity())
        if found is not None:
            kept = _Kept(found.mark, found.rotating, found.kinds, found.rows)
    read = _brought_up(inv, kept)
    if image is not None and read.kept is not None and (read.whole or read.made > REWRITE_AFTER):
        done = read.kept
        status_image.write(
            image,
            inv.identity(),
            status_image.StatusImage(done.mark, done.rotating, done.kinds, done.out),
        )
    return read


def _brought_up(inv: Inventory, kept: _Kept | None) -> _Read:
    """Every pair's status: ``kept`` (what a reader made before) with only the pairs changed
    since its mark read and made again, or every pair read and made when there is nothing kept
    or it no longer holds (see :func:`~meshtui.inventory.status_read.changes`)."""
    since = None if kept is None else kept.mark
    found = inv.status_kept(since, {} if kept is None else kept.rotating)  # PostgreSQL: one trip
    rotating, kinds = _rotating_of(found.rotations), found.kinds
    if kept is not None and kept.kinds != kinds:
        kept = since = None  # a provider's kind changed: every status again
    read = found.changes if since is not None else None
    if read is None:
        read = inv.status_changes(since, () if kept is None else _moved(kept.rotating, rotating))
    fresh = _statuses(read.rows, rotating, kinds, inv)
    places = None
    if read.whole or kept is None:
        out = fresh
    else:
        places = kept.places
        if places is None:
            places = {st.pair: i for i, st in enumerate(kept.out)}
        out = list(kept.out)
        for st in fresh:
            place = places.get(st.pair)
            if place is None:  # a pair not kept under the same stamp: never; read every pair
                return _brought_up(inv, None)
            out[place] = st
    keeps = None if read.mark is None else _Kept(read.mark, rotating, kinds, out, places)
    return _Read(out, keeps, read.whole or kept is None, len(fresh))


def _moved(before: Mapping[str, int], now: Mapping[str, int]) -> set[str]:
    """The pairs whose open rotation began, ended or changed between two reads."""
    return {pid for pid in before.keys() | now.keys() if before.get(pid) != now.get(pid)}


def _statuses(
    rows: Iterable[StatusRow],
    rotating: Mapping[str, int],
    kinds: Mapping[tuple[str, str], str],
    inv: Inventory | None = None,
) -> list[PairStatus]:
    """A status per row, in the rows' order."""
    names: dict[tuple[str, str], str] = {}  # (provider, provision) -> kind name, once each
    open_overlaps = overlaps(inv) if rotating and inv is not None else {}
    default = registry.kind_of(None).name  # every pair's, when no provider names a kind
    out: list[PairStatus] = []
    append = out.append
    for row in rows:
        pid = row[ID]
        plain = _plain(row)
        if plain is not None:
            (state, reason), alarm = plain, False
        else:
            state, reason, alarm = pair_state(row)
        if rotating and pid in rotating:
            state = State.STALE
            reason = open_overlaps.get(pid) or (
                f"rotation {rotating[pid]} was interrupted; the next push or rotate "
                "finishes or rolls it back"
            )
        provider, provision = row[PROVIDER], row[PROVISION]
        if not kinds:
            kind = default
        elif (known := names.get((provider, provision))) is not None:
            kind = known
        else:
            kind = names[(provider, provision)] = registry.kind_of(
                kinds.get((provider, provision))
            ).name
        append(
            PairStatus(  # positional, in the field order: the fast way to build 10,000
                pid,
                provision,
                row[CONSUMER],
                provider,
                row[LOGIN],
                row[GENERATION],
                row[CONSUMER_GENERATION],
                row[PROVIDER_GENERATION],
                bool(row[WITHDRAWN_AT]),
                state,
                reason,
                row[PROBED_AT],
                row[ROTATED_AT],
                row[FILE],
                row[CREATED_AT],
                alarm,
                row[LATENCY_MS],
                kind,
            )
        )
    return out
