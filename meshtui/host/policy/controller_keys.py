"""The controllers a node accepts, each by name with its own verify key.

A node's policy names them (``[[controllers]]``: ``name`` and ``pub``, the path of that
controller's ``.pub`` file, or ``verify``, its verify key in base64). A node whose policy names
none accepts the one key it pinned at ``meshtui host init`` (``controller.pub``), whatever name
a request gives: a one-controller mesh works as it did. Once the policy names controllers, it
accepts exactly those: a name it does not list, or a key it no longer lists, is refused.

The policy is the operator's one file of what a node allows (owned by the agent's user, never
written by a controller): which controllers may ask belongs there with what they may ask for.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from meshtui import crypto
from meshtui.errors import EnvelopeError
from meshtui.protocol.wire import SignedHead


@dataclass(frozen=True)
class Controllers:
    """The controllers node ``node`` accepts: ``named`` by its policy (``policy``), else the
    key it pinned (``pinned``), under any name."""

    node: str
    policy: Path
    pinned: bytes
    named: Mapping[str, bytes]

    def key_of(self, name: str | None) -> bytes:
        """The verify key of controller ``name``; EnvelopeError (naming the controller, the
        node and the fix) when this node does not accept it."""
        if not self.named:
            return self.pinned
        key = self.named.get(name) if name is not None else None
        if key is not None:
            return key
        if name is None:
            raise EnvelopeError(
                f"refused: node {self.node} accepts only named controllers (its policy, "
                f"{self.policy}, names {', '.join(sorted(self.named))}) and this request names "
                "no controller: update meshtui on the controller"
            )
        who = f"controller {name!r}"
        raise EnvelopeError(
            f"refused: node {self.node} does not accept {who}: its policy ({self.policy}) "
            f"names only {', '.join(sorted(self.named))}; to accept it, add a [[controllers]] "
            "entry with its name and its .pub file there and restart the agent"
        )

    def verifies(self, head: SignedHead) -> bool:
        """True when an accepted controller's key (the one the head names) signed ``head``."""
        try:
            return head.verifies(self.key_of(head.controller))
        except EnvelopeError:
            return False

    def listing(self) -> list[tuple[str | None, str]]:
        """(name, key fingerprint) of each accepted controller; (None, pin) when the policy
        names none."""
        if not self.named:
            return [(None, crypto.PublicKeys(self.pinned).fingerprint())]
        return [(n, crypto.PublicKeys(k).fingerprint()) for n, k in sorted(self.named.items())]
