"""The shapes of ``meshtui doctor``'s check: what the controller asks a node, what it answers.

Shared by :mod:`meshtui.controller.doctor` (which builds the request and reads the answer) and
:mod:`meshtui.host.checks` (which does the node's part); they travel as the payload of a signed
``check`` message. Nothing in them is a secret: paths, names, ports and problems in words.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import msgspec

from meshtui import messages


@dataclass(frozen=True)
class ConsumerItem:
    """One consumer end on the node: its credential file, who must read it, its reload."""

    pair: str
    file: str
    owner: str | None = None
    group: str | None = None
    reload: tuple[str, ...] = ()


@dataclass(frozen=True)
class ProviderItem:
    """One provider module on the node: its admin file and what the provisioner needs of it."""

    provider: str
    admin: str | None
    builtin: bool  # the built-in PostgreSQL provisioner (its rights can be checked)
    databases: bool  # a consumer asks for a database: CREATEDB is needed
    pin: bool  # pin = true: hba_file and pg_hba_file_rules must be readable, reload allowed


@dataclass(frozen=True)
class PortItem:
    """A provider's address and port, to be reached by TCP from this (consumer) node."""

    host: str
    port: int
    provider: str
    pairs: tuple[str, ...] = ()


@dataclass(frozen=True)
class CheckRequest:
    """Everything one node is asked to check."""

    consumers: tuple[ConsumerItem, ...] = ()
    providers: tuple[ProviderItem, ...] = ()
    ports: tuple[PortItem, ...] = ()

    def to_json(self) -> messages.CheckRequest:
        """The request's payload (its shape: :class:`meshtui.messages.CheckRequest`)."""
        return cast(messages.CheckRequest, _as_json(self))

    @classmethod
    def from_json(cls, data: messages.CheckRequest) -> CheckRequest:
        """A request from its payload, whose shape was checked on receipt (messages.CHECK)."""
        return cls(
            consumers=tuple(
                ConsumerItem(
                    pair=str(c["pair"]),
                    file=str(c["file"]),
                    owner=_optional(c.get("owner")),
                    group=_optional(c.get("group")),
                    reload=tuple(str(a) for a in c.get("reload") or ()),
                )
                for c in data.get("consumers", [])
            ),
            providers=tuple(
                ProviderItem(
                    provider=str(p["provider"]),
                    admin=_optional(p.get("admin")),
                    builtin=bool(p["builtin"]),
                    databases=bool(p["databases"]),
                    pin=bool(p["pin"]),
                )
                for p in data.get("providers", [])
            ),
            ports=tuple(
                PortItem(
                    host=str(p["host"]),
                    port=int(p["port"]),
                    provider=str(p["provider"]),
                    pairs=tuple(str(x) for x in p.get("pairs") or ()),
                )
                for p in data.get("ports", [])
            ),
        )


@dataclass(frozen=True)
class Finding:
    """One problem a node found: what was checked, about what, what is wrong, what to do."""

    check: str  # folder, owner, group, reload, admin-file, admin-rights, port
    subject: str  # the pair, the provider module, or host:port
    problem: str
    fix: str


@dataclass(frozen=True)
class CheckAnswer:
    """A node's answer: its clock, how many checks passed, and every problem found."""

    node: str
    at: float  # the node's clock when it answered (compared with the controller's)
    passed: int
    findings: tuple[Finding, ...] = field(default_factory=tuple)
    elapsed_ms: float = 0.0

    def to_json(self) -> messages.CheckAnswer:
        """The answer's payload (its shape: :class:`meshtui.messages.CheckAnswer`)."""
        return cast(messages.CheckAnswer, _as_json(self))

    @classmethod
    def from_json(cls, data: messages.CheckAnswer) -> CheckAnswer:
        """An answer from its payload, whose shape was checked on receipt (messages.CHECK)."""
        return cls(
            node=str(data["node"]),
            at=float(data["at"]),
            passed=int(data["passed"]),
            findings=tuple(
                Finding(
                    check=str(f["check"]),
                    subject=str(f["subject"]),
                    problem=str(f["problem"]),
                    fix=str(f["fix"]),
                )
                for f in data.get("findings", [])
            ),
            elapsed_ms=float(data.get("elapsed_ms", 0.0)),
        )


def _as_json(shape: object) -> object:
    """A dataclass as the JSON it travels as (tuples become lists, as on the other side)."""
    return msgspec.json.decode(msgspec.json.encode(shape))


def _optional(value: Any) -> str | None:
    return None if value is None else str(value)
