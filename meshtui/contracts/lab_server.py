"""What a kind's ``lab.py`` gives the lab: :class:`LabServer`, one object (the module's ``LAB``,
what ``Kind.lab`` names) that raises a real server of the kind on the lab's provider node, says
whether it runs, stops it, and writes the kind's part of the lab's declaration.

The lab (:mod:`meshtui.lab.mesh`) finds each kind's server through the registry and knows no kind
by name: a kind added to the registry is raised by ``meshtui lab up`` and ``meshtui demo`` with
no edit to the lab.

Imports nothing of meshtui.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, Protocol, TypeVar

Value = str | int | float | bool | Sequence["Value"] | Mapping[str, "Value"]
"""What a key of a declaration may hold; a mapping inside a section is written as an inline
table."""

Table = tuple[Sequence[str], Mapping[str, Value]]
"""A section of a declaration: its path (``("modules", "db1/postgres")``) and its keys."""


@dataclass(frozen=True)
class LabSite:
    """Where the lab raises one kind's server."""

    folder: Path  # the server's own folder, inside the lab's folder
    node_state: Path  # the provider node's agent state folder
    module: str  # the provider module it serves as, ``<node>/<name>``
    files: Path  # that module's credential folder (its ``receives`` and ``grants`` go there)
    address: str  # the provider node's address
    netns: str | None  # the provider node's namespace; None: a loopback lab, ports of its own
    networks: tuple[str, ...]  # where the nodes connect from (CIDRs)


@dataclass(frozen=True)
class LabProvider:
    """A raised server, as the lab's declaration and the nodes' policies name it."""

    table: Mapping[str, Value]  # its provider module's table in the declaration
    address: str
    port: int
    ca: Path | None  # the CA its consumers' probes verify it against (None: no TLS)


@dataclass(frozen=True)
class LabConsumer:
    """A module of the lab's mesh that may require a kind's server."""

    node: str
    module: str
    files: Path  # its credential folder
    mesh: Mapping[str, Sequence[str]]  # the whole mesh, node by node (for a name unique in it)


@dataclass(frozen=True)
class LabNeed:
    """What a consumer's table gets from one kind: its ``requires`` entry, and any other keys."""

    requires: Mapping[str, Value]
    more: Mapping[str, Value] = field(default_factory=dict)


class LabServer(Protocol):
    """A kind's lab server; see the module docstring. ``folder``: the name of its folder in the
    lab's folder; ``module``: the name of its provider module on the provider node."""

    @property
    def folder(self) -> str: ...

    @property
    def module(self) -> str: ...

    def available(self) -> bool:
        """Whether this machine can run the server (what it needs is installed)."""
        ...

    def raise_server(self, site: LabSite) -> LabProvider:
        """Write its files (once) and start it; safe to run again on a running one."""
        ...

    def running(self, folder: Path) -> bool | None:
        """Whether the server in ``folder`` runs (None: the lab has none there)."""
        ...

    def stop(self, folder: Path, *, purge: bool, say: Callable[[str], None]) -> bool:
        """Stop the server in ``folder``, telling ``say`` what a slow stop waits for; ``purge``:
        its data is removed next. Whether one was running."""
        ...

    def need(self, consumer: LabConsumer) -> LabNeed | None:
        """What ``consumer`` requires of the server in the demo mesh (None: nothing)."""
        ...


class Found(Protocol):
    """A lab server as the files in its folder describe it."""

    def pid(self) -> int | None: ...

    def running(self) -> bool: ...

    def stop(self) -> None: ...


S = TypeVar("S", bound=Found)


class FoundInFolder(Generic[S]):
    """The half of a :class:`LabServer` that kinds write alike, for a server found from its
    folder's files (``find``): whether it runs, stopping it, and what a fixed set of the demo's
    modules (``consumers``) require of it (``requires``). ``halt`` says more on a slow stop."""

    title: str = ""
    consumers: frozenset[tuple[str, str]] = frozenset()

    def find(self, folder: Path) -> S | None:
        raise NotImplementedError

    def requires(self, consumer: LabConsumer) -> LabNeed:
        raise NotImplementedError

    def halt(self, server: S, *, purge: bool, say: Callable[[str], None]) -> None:
        say(f"stopping {self.title} ...")
        server.stop()

    def running(self, folder: Path) -> bool | None:
        server = self.find(folder)
        return None if server is None else server.running()

    def stop(self, folder: Path, *, purge: bool, say: Callable[[str], None]) -> bool:
        server = self.find(folder)
        if server is None or server.pid() is None:
            return False
        self.halt(server, purge=purge, say=say)
        return True

    def need(self, consumer: LabConsumer) -> LabNeed | None:
        if (consumer.node, consumer.module) not in self.consumers:
            return None
        return self.requires(consumer)
