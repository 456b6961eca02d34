"""The contract between the harness and the software a provider runs (PostgreSQL, Redis, ...).

The harness decides who is present, absent or waiting; an adapter only makes one login true
(``create``, "created" or "updated"; "unchanged" from an adapter that looks first, see
:class:`Deciding`), takes one away (``remove``, "removed" or "drop pending"), and answers one
cheap read-only question (``inspect``) so an idle run can tell "unchanged" without writing. An
adapter generates no password, derives no name and seals nothing. Each kind's adapter lives in
its package (meshtui/kinds/<kind>/adapter.py) and is named by its ``Kind.adapter``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

from meshtui.errors import ProvisionError, UnsafeLoginError
from meshtui.model import OutcomeName
from meshtui.protocol.manifest import ALTERNATES

if TYPE_CHECKING:
    from meshtui.contracts.manifest_reader import Manifest

MAX_NAME_BYTES = 63  # PostgreSQL's NAMEDATALEN - 1; longer names would be truncated silently

Change = Literal[OutcomeName.CREATED, OutcomeName.UPDATED]
Kept = Literal[OutcomeName.UNCHANGED]
Removal = Literal[OutcomeName.REMOVED, OutcomeName.DROP_PENDING]


@dataclass(frozen=True)
class Done:
    """What an adapter did for one login, with a human note when there is more to say."""

    outcome: Change | Kept | Removal
    reason: str = ""


class Refused(ProvisionError):
    """The adapter will not do this for this login (not ours, conflicting); nothing changed."""


@dataclass(frozen=True)
class Scope:
    """Which manifest an adapter works for: logins made for another scope are not ours."""

    provider: str
    provision: str


@dataclass(frozen=True)
class Held:
    """What the software holds for one login, as far as the harness needs to know.

    ``ours``: made by this provisioner for this scope (recorded in the software itself).
    ``digest``: the secret digest of the password it provably still holds, or None when that
    cannot be proved (then the harness rewrites). ``in_place``: the values asked for are true.
    ``note``: why a login is not ours, for the report. ``verified``: False when the adapter
    cannot see what the software holds (an admin without the rights to read it); then
    ``digest`` is None and the harness sets the password every time.
    """

    login: str
    ours: bool
    digest: str | None = None
    in_place: bool = False
    node: str = ""
    module: str = ""
    note: str = ""
    verified: bool = True


@dataclass(frozen=True)
class Capabilities:
    """What an adapter does beyond the contract's four calls, declared once on its class (as a
    Vault plugin declares what it supports): the harness branches on this value, and a test
    holds each kind's declaration against the methods its adapter has.

    ``batching``: :class:`Batching` (``create_many``). ``narrowing``: :class:`Narrowing`
    (``inspect_only``). ``deciding``: :class:`Deciding` (``create`` looks first).
    ``limited``: :class:`Limited` (``limits``). ``catching_up``: :class:`CatchingUp`
    (``catch_up``).
    ``live_sessions``: :class:`LiveSessions` (``end_sessions``, ``count_sessions``): the
    software keeps sessions (connections, tokens) that outlive a credential's change.
    ``overlapping``: :class:`Overlapping` (``create_keeping``): one login can
    hold two credentials at once, so a pair may be declared ``rotation = "overlap"``.
    ``alternating``: :class:`Alternating` (``create_alternate``): a login holds one
    credential (a PostgreSQL role), so an overlap alternates between two logins of one owner;
    a pair may be declared ``rotation = "overlap"`` too.
    """

    batching: bool = False
    narrowing: bool = False
    deciding: bool = False
    limited: bool = False
    catching_up: bool = False
    live_sessions: bool = False
    overlapping: bool = False
    alternating: bool = False


@dataclass(frozen=True)
class Wanted:
    """One login to make true in a batch: its name, its password and the values asked for."""

    login: str
    password: str
    values: Mapping[str, str]


class Adapter(Protocol):
    """One session with the provider's software. Not thread-safe: one per thread."""

    @property
    def capabilities(self) -> Capabilities:
        """What this adapter does beyond the four calls below (see :class:`Capabilities`)."""
        ...

    def describe(self, exc: BaseException) -> str | None:
        """The software's own words for an error its client raised (None: not the software's
        error), so the harness never knows a kind's client library."""
        ...

    def inspect(self, wanted: Mapping[str, Mapping[str, str]]) -> Mapping[str, Held]:
        """Read-only: Held for every wanted login that exists, and for every login of ours."""
        ...

    def create(self, login: str, password: str, values: Mapping[str, str]) -> Done:
        """Create ``login`` or make it true (password, values); raises Refused if not ours."""
        ...

    def remove(self, login: str) -> Done:
        """Remove a login of ours, keeping its data; "drop pending" when it cannot finish."""
        ...

    def close(self) -> None:
        """Release the session."""
        ...


@runtime_checkable
class Batching(Protocol):
    """An adapter that can make many logins true at once (one transaction, or one pipeline)."""

    def create_many(self, batch: Sequence[Wanted]) -> dict[str, Done | Exception]:
        """Each login's Done, or the error that stopped that login alone."""
        ...


@runtime_checkable
class Narrowing(Protocol):
    """An adapter that can read only the named logins (a delta's few) instead of every one."""

    def inspect_only(
        self, wanted: Mapping[str, Mapping[str, str]], logins: frozenset[str]
    ) -> Mapping[str, Held]:
        """What :meth:`Adapter.inspect` holds for ``logins``, asking the software about those
        alone: Held for each of them that exists (and nothing for any other login)."""
        ...


@runtime_checkable
class Deciding(Protocol):
    """An adapter whose ``create`` looks at the login first, in its own first round trip, and
    decides as :meth:`Adapter.inspect` would: Refused with the inspection's note for a login
    that is not ours, "unchanged" (nothing written) for one that already holds that password,
    intact and in place. A scoped run then writes its logins without inspecting them first."""

    @property
    def create_decides(self) -> bool:
        """True when ``create`` decides as above (a wrapper says what its adapter does)."""
        ...


@runtime_checkable
class Limited(Protocol):
    """An adapter whose admin may lack rights: what it cannot do, for the report and doctor."""

    @property
    def limits(self) -> Sequence[str]: ...


@runtime_checkable
class CatchingUp(Protocol):
    """An adapter that may have to redo an earlier run's unfinished work (a failed save)."""

    def catch_up(self) -> None:
        """Mark this run to finish what an earlier one could not; called by reconcile only."""
        ...


@runtime_checkable
class LiveSessions(Protocol):
    """An adapter whose software keeps sessions opened with a credential after that credential
    is changed or removed (a PostgreSQL backend, a Redis connection, an OpenBao token).

    Which sessions are "on the old credential": where the software records which credential
    opened a session (OpenBao: each token carries its secret_id's digest), those not opened
    with ``digest``; where it does not (PostgreSQL, Redis), every session of the login, since
    the caller asks at the moment the new credential is applied, when no session can hold it
    yet. The adapter's own admin session is never counted nor ended.

    Sessions left to drain are counted and ended later, when the login's new sessions are on
    the new credential: ``before`` (a :meth:`mark_sessions` taken when the new credential was
    applied) then keeps to the sessions opened before it, where the software cannot tell the
    credentials apart (PostgreSQL: a backend's start; Redis: a connection's id)."""

    def mark_sessions(self, login: str) -> str:
        """A mark, in the server's own terms, that tells the login's sessions open now from
        any opened later ("" where ``digest`` alone tells them apart)."""
        ...

    def end_sessions(self, login: str, digest: str, before: str | None = None) -> int:
        """End the login's sessions on a credential other than ``digest``'s (with ``before``,
        those opened before that mark); how many."""
        ...

    def count_sessions(self, login: str, digest: str, before: str | None = None) -> int:
        """How many of the login's sessions are on a credential other than ``digest``'s (with
        ``before``, of those opened before that mark)."""
        ...


@runtime_checkable
class Overlapping(Protocol):
    """An adapter whose login can hold two credentials at once: the new one is added while the
    one it holds stays accepted (an overlap rotation's first step). The plain ``create`` of the
    same login later leaves the new one alone accepted (its last step)."""

    def create_keeping(self, login: str, password: str, values: Mapping[str, str]) -> Done:
        """Make ``login`` accept ``password`` as well as the one credential it holds now (its
        values made true as ``create`` would); raises Refused if not ours. Run again, it keeps
        the same two: never a third."""
        ...


def alternate_login(owner: str, alt: str) -> str:
    """The login ``alt`` (``"a"`` or ``"b"``) of the pair whose owner is ``owner``: the owner's
    name and ``_a``/``_b``; when that would pass 63 bytes, the owner's name cut and a hash of
    it whole, so two owners never share an alternate and no name is ever truncated."""
    if alt not in ALTERNATES:
        raise UnsafeLoginError(f"{alt!r} names no alternate login (a or b)")
    name = f"{owner}_{alt}"
    if len(name.encode("utf-8")) <= MAX_NAME_BYTES:
        return name
    digest = hashlib.blake2b(owner.encode("utf-8"), digest_size=4).hexdigest()
    room = MAX_NAME_BYTES - len(digest) - len(alt) - 2
    head = owner.encode("utf-8")[:room].decode("utf-8", "ignore").rstrip("_") or "x"
    return f"{head}_{digest}_{alt}"


@runtime_checkable
class Alternating(Protocol):
    """An adapter whose login holds one credential, so an overlap rotation alternates between
    two logins of one pair (AWS's "alternating users").

    The manifest line names the pair's owner (``as``, the login the controller derived; it
    owns the pair's objects and holds no credential) and which alternate is current (``alt``,
    ``"a"`` or ``"b"``: :func:`alternate_login`). The controller mints each overlap
    generation for the other alternate, so the consumer's connection file (which carries the
    login) changes with each rotation. With ``keep`` (an overlap's first step) the current
    alternate accepts the new credential and nothing else changes, so the login the consumer
    still holds keeps working; without, every other login of the pair (the other alternate,
    and the owner itself when it still logs in from before the pair alternated) is left with
    no credential and cannot log in. Both alternates act as the owner (what either creates
    belongs to the owner), so the consumer's data outlives the switch. ``remove`` of the owner
    removes the three; ``end_sessions``/``count_sessions`` of the owner (``LiveSessions``)
    mean the sessions of every login of the pair but the one holding ``digest``."""

    def create_alternate(
        self, owner: str, alt: str, password: str, values: Mapping[str, str], keep: bool
    ) -> Done:
        """Make ``owner``'s alternate ``alt`` hold ``password`` (its values made true as
        ``create`` would); with ``keep``, leave the pair's other logins as they are, else take
        their credentials away. Refused if not ours. Run again, it changes nothing."""
        ...

    def inspect_alternates(
        self, wanted: Mapping[str, tuple[str, Mapping[str, str]]]
    ) -> Mapping[str, Held]:
        """Read-only, the inspection of alternating pairs: for each owner of ``wanted`` (owner
        -> its current alternate and its values), the owner's Held as :meth:`inspect` would
        give it, but with the digest of the credential the current alternate logs in with
        (None when it cannot log in). The owner itself holds no credential: compared alone, a
        pair that alternates would read as changed outside meshtui at every inspection."""
        ...


AdapterFactory = Callable[[str, Scope], Adapter]
"""Opens an adapter from the admin connection text and the manifest's scope."""


@dataclass(frozen=True)
class Finished:
    """What a kind's after-run step (``Kind.finish``) did beside the logins, as one line of the
    report: PostgreSQL's pin block of pg_hba.conf is ``Finished("pg_hba.conf", ...)``."""

    name: str
    outcome: OutcomeName
    reason: str


@dataclass(frozen=True)
class Whole:
    """A kind's after-run step's answer to a delta's run when it cannot finish from the delta
    alone (PostgreSQL: this process has not verified the pin block the delta would change, or
    it changed outside meshtui since); the harness then reconciles the manifest whole."""

    why: str


Finish = Callable[
    [str, "Manifest", Mapping[str, str], frozenset[str] | None], Finished | Whole | None
]
"""``finish(admin, manifest, outcomes, only)``: a kind's after-run step, given each login's
outcome; ``only``: a delta's logins (``manifest`` is cut to them), None for a whole run."""


def check_name(name: str, what: str = "login") -> str:
    """Refuse a name that is empty, holds a NUL or exceeds 63 bytes, before any SQL is sent."""
    if not name:
        raise UnsafeLoginError(f"{what} is empty")
    if "\x00" in name:
        raise UnsafeLoginError(f"{what} {name!r} holds a NUL character")
    size = len(name.encode("utf-8", "surrogatepass"))
    if size > MAX_NAME_BYTES:
        raise UnsafeLoginError(
            f"{what} {name!r} is {size} bytes; PostgreSQL would truncate it to {MAX_NAME_BYTES}"
        )
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise UnsafeLoginError(f"{what} {name!r} is not valid Unicode text") from None
    return name
