"""What an action reaches the mesh through: the inventory, the state folder, the signing keys, the
agents, the requests' sequence and the fault seam. The front door (:class:`~meshtui.controller.core.Controller`)
has all of it and passes itself; an action depends on this shape, not on the class that calls it,
so ``core.py`` imports the actions and none of them imports ``core.py`` back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from meshtui import crypto
    from meshtui.controller.agents.client import Agents
    from meshtui.controller.reports import (
        ProbeOutcome,
        Progress,
        PushReport,
        RotationReport,
        SecretStatus,
    )
    from meshtui.controller.turn import Turn
    from meshtui.inventory import Inventory
    from meshtui.inventory.lease import Leases
    from meshtui.inventory.rows import NodeRow
    from meshtui.protocol import wire
    from meshtui.protocol.fence import Fence


class Reach(Protocol):
    """What an action uses: where the mesh is recorded and how its agents are reached."""

    state_dir: Path
    inventory: Inventory
    sequence: wire.Sequence
    fence: Fence
    """This controller's name and its epoch, carried by every request (epoch 0 without a
    lease; whoever takes the lease sets the epoch it holds)."""
    turn: Turn | None
    """The lease turn this controller delivers under (PostgreSQL), checked before each send."""
    faults: dict[str, Callable[[], None]]

    def keys(self) -> crypto.PrivateKeys:
        """The controller's signing keys (refused when read-only)."""
        ...

    def agents(
        self, *, timeout: float | None = None, nodes: Mapping[str, NodeRow] | None = None
    ) -> Agents:
        """Signed clients for the nodes (all by default)."""
        ...

    def leases(self, conninfo_file: Path) -> Leases:
        """The lease table's connection, kept between this controller's delivering actions."""
        ...


class FrontDoor(Reach, Protocol):
    """What the unattended loop asks of the controller: the actions an operator runs, whole
    (each takes its own turn and checks), rather than their parts."""

    def push(self, progress: Progress = ...) -> PushReport: ...

    def probe(
        self, ids: Iterable[str] | None = None, progress: Progress = ...
    ) -> list[ProbeOutcome]: ...

    def rotate(
        self,
        ids: Iterable[str],
        progress: Progress = ...,
        *,
        revoke_old: bool = False,
        probe_after: bool = False,
    ) -> RotationReport: ...

    def secrets(self) -> list[SecretStatus]: ...

    def secret_rotate(self, module: str, name: str) -> int: ...
