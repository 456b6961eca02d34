"""A session on loan from a kind's pool of kept admin sessions: the adapter's calls made through
one hook, and ``close`` giving it back.

PostgreSQL (``kinds/postgres/warm.py``) and OpenBao (``kinds/openbao/kept.py``) keep their admin
sessions open between an agent's runs and lend them out again; each lends through a subclass of
:class:`Lent` whose :meth:`Lent._use` says what a call's failure means for the session (opened
anew and the call made again, or not kept after the run).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Generic, Protocol, TypeVar, cast

from meshtui.contracts.adapter import (
    Adapter,
    Alternating,
    Batching,
    Capabilities,
    Done,
    Held,
    LiveSessions,
    Narrowing,
    Overlapping,
    Wanted,
)


class KeptAdapter(Adapter, Batching, Narrowing, Protocol):
    """What a kept session's adapter can do: inspect (all or a few), create (one or many),
    remove."""


A = TypeVar("A", bound=KeptAdapter)
T = TypeVar("T")


class Lent(Generic[A]):
    """A kept session on loan: every call of the adapter's goes through :meth:`_use`."""

    adapter: A

    @property
    def capabilities(self) -> Capabilities:
        """The lent adapter's (see :class:`~meshtui.contracts.adapter.Capabilities`)."""
        return self.adapter.capabilities

    def describe(self, exc: BaseException) -> str | None:
        """See :meth:`~meshtui.contracts.adapter.Adapter.describe`."""
        return self.adapter.describe(exc)

    def _use(self, call: Callable[[A], T]) -> T:
        """Make ``call`` on the session (the subclass decides what its failure means)."""
        raise NotImplementedError

    def inspect(self, wanted: Mapping[str, Mapping[str, str]]) -> Mapping[str, Held]:
        """See :meth:`~meshtui.contracts.adapter.Adapter.inspect`."""
        return self._use(lambda a: a.inspect(wanted))

    def inspect_only(
        self, wanted: Mapping[str, Mapping[str, str]], logins: frozenset[str]
    ) -> Mapping[str, Held]:
        """See :meth:`~meshtui.contracts.adapter.Narrowing.inspect_only`."""
        return self._use(lambda a: a.inspect_only(wanted, logins))

    def create(self, login: str, password: str, values: Mapping[str, str]) -> Done:
        """See :meth:`~meshtui.contracts.adapter.Adapter.create`."""
        return self._use(lambda a: a.create(login, password, values))

    def create_keeping(self, login: str, password: str, values: Mapping[str, str]) -> Done:
        """See :meth:`~meshtui.contracts.adapter.Overlapping.create_keeping` (called only when
        the lent adapter's capabilities say ``overlapping``)."""
        return self._use(lambda a: cast(Overlapping, a).create_keeping(login, password, values))

    def create_alternate(
        self, owner: str, alt: str, password: str, values: Mapping[str, str], keep: bool
    ) -> Done:
        """See :meth:`~meshtui.contracts.adapter.Alternating.create_alternate` (called only
        when the lent adapter's capabilities say ``alternating``)."""
        return self._use(
            lambda a: cast(Alternating, a).create_alternate(owner, alt, password, values, keep)
        )

    def inspect_alternates(
        self, wanted: Mapping[str, tuple[str, Mapping[str, str]]]
    ) -> Mapping[str, Held]:
        """See :meth:`~meshtui.contracts.adapter.Alternating.inspect_alternates` (called only
        when the lent adapter's capabilities say ``alternating``)."""
        return self._use(lambda a: cast(Alternating, a).inspect_alternates(wanted))

    def create_many(self, batch: Sequence[Wanted]) -> dict[str, Done | Exception]:
        """See :meth:`~meshtui.contracts.adapter.Batching.create_many`."""
        return self._use(lambda a: a.create_many(batch))

    def remove(self, login: str) -> Done:
        """See :meth:`~meshtui.contracts.adapter.Adapter.remove`."""
        return self._use(lambda a: a.remove(login))

    def mark_sessions(self, login: str) -> str:
        """See :meth:`~meshtui.contracts.adapter.LiveSessions.mark_sessions`."""
        return self._use(lambda a: cast(LiveSessions, a).mark_sessions(login))

    def end_sessions(self, login: str, digest: str, before: str | None = None) -> int:
        """See :meth:`~meshtui.contracts.adapter.LiveSessions.end_sessions`."""
        return self._use(lambda a: cast(LiveSessions, a).end_sessions(login, digest, before))

    def count_sessions(self, login: str, digest: str, before: str | None = None) -> int:
        """See :meth:`~meshtui.contracts.adapter.LiveSessions.count_sessions`."""
        return self._use(lambda a: cast(LiveSessions, a).count_sessions(login, digest, before))
