"""Who sends a request and under which turn: the sending controller's name and its epoch.

Every request's signed body carries both (:func:`meshtui.protocol.wire.envelope`). A node
verifies the request with the key its policy names for that controller, and keeps the highest
epoch it accepted a delivering request under, refusing a lower one: a controller that lost its
turn (paused past its lease while another took over) delivers nothing when it wakes.
"""

from __future__ import annotations

from dataclasses import dataclass

from meshtui.model import CONTROLLER_NAME_RE as NAME

EPOCH_MAX = 2**53 - 1
"""No lease gives an epoch above this (one per holding: beyond any count of them), far below
PostgreSQL's ``bigint``: a node saying it accepted a higher one is not believed (its guard is
its own file), so no node can raise a lease to where its next taking overflows."""


@dataclass(frozen=True)
class Fence:
    """The sending controller and its epoch: 0 where no lease is in use (SQLite), and the
    lease's epoch while the controller holds it (set by whoever took the lease)."""

    controller: str
    epoch: int = 0

    def __post_init__(self) -> None:
        if not NAME.match(self.controller):
            raise ValueError(
                f"controller name {self.controller!r} is not allowed (1-63 of a-z 0-9 . _ -, "
                "starting with a letter or digit)"
            )
        if self.epoch < 0:
            raise ValueError(f"epoch {self.epoch} is below 0")
