"""The words of DESIGN.md as plain dataclasses: nodes, modules, pairs, states. No I/O here."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
"""Node and module names: they become file names, login stems and path parts, so keep them plain."""

BUILTIN_POSTGRES = "builtin:postgres"
"""The built-in provisioner; it reconciles whichever kind the manifest names."""

POSTGRES = "postgres"
REDIS = "redis"
KINDS = (POSTGRES, REDIS)
"""What a provider's software is (``kind`` of a ``provides`` entry); PostgreSQL by default."""


class State(StrEnum):
    """A pair's state, as DESIGN "States of a pair" defines it."""

    WORKING = "working"
    STALE = "stale"
    REVOKED = "revoked"
    UNKNOWN = "unknown"


class End(StrEnum):
    """The two ends of a pair."""

    CONSUMER = "consumer"
    PROVIDER = "provider"


@dataclass(frozen=True)
class Node:
    """A machine: private address (probes go there), agent URL, and its two public keys."""

    name: str
    address: str
    agent: str
    seal_key: bytes
    verify_key: bytes


@dataclass(frozen=True)
class Offer:
    """A provision a module provides: the port it listens on and what kind of software it is.

    ``ca`` (Redis) is the CA certificate, a path on each consumer's node, that probes verify the
    server's certificate against; ``tls`` False means a plain-text Redis (see docs/redis.md).
    """

    name: str
    port: int
    kind: str = POSTGRES
    ca: str | None = None
    tls: bool = True


@dataclass(frozen=True)
class Requirement:
    """A provision a module requires, where its credential goes, and how to reload it."""

    name: str
    file: str
    values: Mapping[str, str] = field(default_factory=dict)
    reload: tuple[str, ...] = ()
    source: str | None = None  # the `from` key: which provider, when several provide it


@dataclass(frozen=True)
class Module:
    """A piece of software on a node, named ``node/module``."""

    node: str
    name: str
    provides: tuple[Offer, ...] = ()
    requires: tuple[Requirement, ...] = ()
    receives: Mapping[str, str] = field(default_factory=dict)
    grants: Mapping[str, str] = field(default_factory=dict)
    admin: str | None = None
    provisioner: tuple[str, ...] = (BUILTIN_POSTGRES,)

    @property
    def id(self) -> str:
        """``node/module``."""
        return f"{self.node}/{self.name}"


def node_of(module_id: str) -> str:
    """The node of a ``node/module`` id."""
    return module_id.split("/", 1)[0]


def pair_id(provision: str, consumer: str, provider: str) -> str:
    """``database:app1/gitea->db1/postgres``."""
    return f"{provision}:{consumer}->{provider}"


def split_pair_id(text: str) -> tuple[str, str, str]:
    """Inverse of :func:`pair_id`; ValueError when ``text`` is not a pair id."""
    provision, sep, rest = text.partition(":")
    consumer, arrow, provider = rest.partition("->")
    if not (sep and arrow and provision and "/" in consumer and "/" in provider):
        raise ValueError(f"{text!r} is not a pair id (like database:app1/gitea->db1/postgres)")
    return provision, consumer, provider


@dataclass(frozen=True)
class Pair:
    """One provision between one consumer module and one provider module, as declared."""

    provision: str
    consumer: str
    provider: str
    login: str
    file: str
    port: int
    values: Mapping[str, str] = field(default_factory=dict)
    reload: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        """The pair id."""
        return pair_id(self.provision, self.consumer, self.provider)

    @property
    def consumer_node(self) -> str:
        """The node the consumer module runs on."""
        return node_of(self.consumer)

    @property
    def provider_node(self) -> str:
        """The node the provider module runs on."""
        return node_of(self.provider)


@dataclass(frozen=True)
class Declaration:
    """A whole declaration after resolution: nodes, modules and the pairs they imply."""

    source: str
    nodes: Mapping[str, Node]
    modules: Mapping[str, Module]
    pairs: tuple[Pair, ...]


@dataclass(frozen=True)
class PairStatus:
    """One row of ``meshtui status``: a pair, who holds it, how far each end is, and its state."""

    pair: str
    provision: str
    consumer: str
    provider: str
    login: str
    generation: int
    consumer_generation: int | None
    provider_generation: int | None
    withdrawn: bool
    state: State
    reason: str
    probed_at: str | None
    rotated_at: str | None
    consumer_file: str
    created_at: str
    alarm: bool = False
    latency_ms: float | None = None
    kind: str = POSTGRES  # the provider's software (its provides entry's kind)

    @property
    def consumer_node(self) -> str:
        """The consumer's node."""
        return node_of(self.consumer)

    @property
    def provider_node(self) -> str:
        """The provider's node."""
        return node_of(self.provider)

    def to_json(self) -> dict[str, object]:
        """The ``status --json`` object."""
        return {
            "pair": self.pair,
            "provision": self.provision,
            "consumer": self.consumer,
            "provider": self.provider,
            "login": self.login,
            "generation": self.generation,
            "consumer_generation": self.consumer_generation,
            "provider_generation": self.provider_generation,
            "withdrawn": self.withdrawn,
            "state": str(self.state),
            "reason": self.reason,
            "probed_at": self.probed_at,
            "rotated_at": self.rotated_at,
            "created_at": self.created_at,
            "alarm": self.alarm,
            "latency_ms": self.latency_ms,
            "kind": self.kind,
            "holders": {
                "consumer": {
                    "node": self.consumer_node,
                    "module": self.consumer,
                    "file": self.consumer_file,
                },
                "provider": {
                    "node": self.provider_node,
                    "module": self.provider,
                    "login": self.login,
                },
            },
        }
