"""The newest restore proof of a state folder (``restored.json``): written by ``meshtui restore``,
shown to every node with the audit head so each accepts the restored chain once
(:class:`meshtui.protocol.wire.RestoreProof`)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from meshtui.atomic import write_private
from meshtui.controller.reports import AuditEvent
from meshtui.errors import InventoryError
from meshtui.protocol.wire import RestoreProof

PROOF_FILE = "restored.json"


def load_proof(state_dir: Path) -> RestoreProof | None:
    """The proof kept in ``state_dir`` (None: this controller was never restored)."""
    path = state_dir / PROOF_FILE
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise InventoryError(
            f"{path} cannot be read ({exc}); it is the proof of the last restore, which nodes "
            "that have not seen it yet need: restore the backup again, or take it from one"
        ) from exc
    try:
        return RestoreProof.from_json(data)
    except ValueError as exc:
        raise InventoryError(f"{path}: {exc}") from exc


def keep_proof(state_dir: Path, proof: RestoreProof) -> None:
    """Write the proof (0600, atomically, fsynced)."""
    write_private(state_dir / PROOF_FILE, json.dumps(proof.to_json(), sort_keys=True).encode())


@dataclass(frozen=True)
class RestoreView:
    """One restore as the audit log records it: when, from which backup, and the gap."""

    event: int
    at: str
    taken_at: str
    backup_events: int
    seen_up_to: int | None
    gap: list[int] | None
    nodes: dict[str, object]

    def line(self) -> str:
        """One sentence for ``audit --verify``."""
        said = (
            f"restored at event {self.event} ({self.at}) from a backup taken {self.taken_at} "
            f"holding events 1..{self.backup_events}"
        )
        if self.gap:
            return (
                f"{said}; the nodes had seen up to event {self.seen_up_to}: events "
                f"{self.gap[0]}..{self.gap[1]} of the lost inventory are the gap"
            )
        return f"{said}; no node had seen an event past the backup"


def restores_of(events: Iterable[AuditEvent]) -> list[RestoreView]:
    """Every restore in the audit log, oldest first."""
    out: list[RestoreView] = []
    for e in events:
        if e.kind != "restore":
            continue
        d = e.detail
        gap = d.get("gap")
        seen = d.get("seen_up_to")
        nodes = d.get("nodes")
        out.append(
            RestoreView(
                event=e.seq,
                at=e.at,
                taken_at=str(d.get("backup_taken_at", "?")),
                backup_events=int(str(d.get("backup_events", 0))),
                seen_up_to=int(str(seen)) if seen is not None else None,
                gap=[int(str(g)) for g in gap] if isinstance(gap, list) else None,
                nodes=dict(nodes) if isinstance(nodes, dict) else {},
            )
        )
    return out
