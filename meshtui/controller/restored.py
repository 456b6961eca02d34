"""The newest restore proof of a state folder (``restored.json``): written by ``meshtui restore``,
shown to every node with the audit head so each accepts the restored chain once
(:class:`meshtui.wire.RestoreProof`)."""

from __future__ import annotations

import json
from pathlib import Path

from meshtui.atomic import write_private
from meshtui.errors import InventoryError
from meshtui.wire import RestoreProof

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
