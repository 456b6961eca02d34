"""``meshtui restore``: a backup put back into an empty state folder, on the record.

Everything is checked in memory first (the passphrase, the file whole and unchanged, the
inventory inside readable and its audit chain verified with the controller key inside); only
then are the files written, and any failure after that removes what was written (the folder
was empty). Then every declared node is asked, without a key, what it kept: its audit head (how
far it saw the old chain) and the highest request number it accepted. The request sequence jumps
past the highest, so no node refuses the restored controller as a replay, and the restore is
appended to the chain as one signed event: taken at T holding events 1..N, the nodes had seen up
to M. Its signed proof (:class:`~meshtui.protocol.wire.RestoreProof`) is kept beside the inventory and
shown to every node with the head, so each accepts the restored chain exactly once and keeps
what it saw before as history.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from meshtui import crypto
from meshtui.atomic import sync_folder, write_private
from meshtui.controller.agents.client import AnchorRead, read_anchor_answer
from meshtui.controller.config import load as load_config
from meshtui.controller.core import INVENTORY, own_folder
from meshtui.controller.keys import KEY_STEM, PEERS, keyring
from meshtui.controller.records.backup import (
    KEPT_FILES,
    PUBLIC_FILES,
    SEQUENCE_FILE,
    Payload,
    open_file,
)
from meshtui.controller.records.restored import PROOF_FILE, keep_proof
from meshtui.errors import AgentError, BackupError, InventoryError, KeyFileError
from meshtui.freeform import JsonObject
from meshtui.inventory import Inventory
from meshtui.inventory import image as image_mod
from meshtui.inventory.audit import KeyOf
from meshtui.protocol import wire

RESTORE = "restore"
"""The audit event's kind."""
ASK_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class NodeSeen:
    """What one node said it kept when the restore asked (or why it could not be asked)."""

    node: str
    seen_seq: int | None = None
    seen_hash: str | None = None
    accepted: int | None = None
    reason: str = ""


@dataclass(frozen=True)
class RestoreReport:
    """What was restored, the gap, and the event that records it."""

    state: str
    taken_at: str
    events: int
    pairs: int
    event: int
    seen_up_to: int | None
    gap: tuple[int, int] | None
    nodes: list[NodeSeen] = field(default_factory=list)
    sequence: int = 0  # every request from now on is numbered past this

    def to_json(self) -> JsonObject:
        """The report as plain JSON."""
        return asdict(self)


def refuse_unless_empty(state_dir: Path) -> None:
    """BackupError naming what is there when ``state_dir`` is not an empty folder (or absent)."""
    if state_dir.is_symlink():
        raise BackupError(f"{state_dir} is a symbolic link; restore into a real, empty folder")
    if not state_dir.exists():
        return
    own_folder(state_dir)
    if not state_dir.is_dir():
        raise BackupError(f"{state_dir} is not a folder; restore into an empty folder")
    found = sorted(set(os.listdir(state_dir)) - ({PEERS} if _only_peers(state_dir) else set()))
    if found:
        shown = ", ".join(found[:8]) + (f" and {len(found) - 8} more" if len(found) > 8 else "")
        raise BackupError(
            f"{state_dir} is not empty (it holds {shown}); a restore never mixes with what is "
            "there: restore into a new, empty folder (--state NEW_FOLDER)"
        )


def _only_peers(state_dir: Path) -> bool:
    """Whether ``state_dir`` holds a real ``controllers/`` folder of public keys only (the
    other controllers' ``NAME.pub``, put there before a restore so that an audit head another
    controller signed verifies)."""
    peers = state_dir / PEERS
    if peers.is_symlink() or not peers.is_dir():
        return False
    return all(p.suffix == ".pub" and p.is_file() and not p.is_symlink() for p in peers.iterdir())


def _key_of(state_dir: Path, own: bytes) -> KeyOf:
    """The verify key of each controller the restored one knows: its own (the backup's key)
    and the others' in ``state_dir``'s ``controllers/``; None for one it does not know."""
    try:
        peers = keyring(state_dir, "").keys
    except KeyFileError as exc:
        raise BackupError(str(exc)) from None
    return lambda name: own if name is None else peers.get(name)


def _verify_key(payload: Payload, source: str) -> bytes:
    """The controller's verify key from the key pair inside, checked against its .pub."""
    try:
        raw = crypto.unb64(payload.files[f"{KEY_STEM}.key"], "controller.key")
        keys = crypto.parse_private(raw, f"{source}: controller.key")
    except (ValueError, KeyFileError) as exc:
        raise BackupError(f"{source}: the controller key inside is not readable ({exc})") from None
    pub = payload.files.get(f"{KEY_STEM}.pub")
    if pub is not None:
        try:
            public = crypto.parse_public(
                crypto.unb64(pub, "controller.pub").decode(), "controller.pub", need_seal=False
            )
        except (KeyFileError, ValueError, UnicodeDecodeError) as exc:
            raise BackupError(f"{source}: controller.pub inside is not readable ({exc})") from None
        if public.verify != keys.public().verify:
            raise BackupError(f"{source}: controller.pub inside does not match controller.key")
    return keys.public().verify


def _write(state_dir: Path, payload: Payload) -> list[Path]:
    """Write the backup's files into the empty ``state_dir``; the paths written."""
    written: list[Path] = []
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    if state_dir.is_symlink():  # swapped in since it was checked
        raise BackupError(f"{state_dir} is a symbolic link; restore into a real, empty folder")
    own_folder(state_dir)
    for name, text in [(INVENTORY, payload.inventory), *sorted(payload.files.items())]:
        path = state_dir / name
        mode = 0o644 if name in PUBLIC_FILES else 0o600
        written.append(path)
        write_private(path, crypto.unb64(text, name), mode=mode)
    sync_folder(state_dir)
    return written


def _ask(inv: Inventory) -> list[NodeSeen]:
    """Every declared node's kept head and highest accepted number (in parallel)."""
    nodes = {n: row for n, row in inv.nodes().items() if row["declared"]}

    def one(name: str) -> NodeSeen:
        try:
            got: AnchorRead = read_anchor_answer(nodes[name], timeout=ASK_TIMEOUT_S)
        except AgentError as exc:
            return NodeSeen(name, reason=f"not asked: {exc.reason}")
        head = got.head
        return NodeSeen(
            name,
            seen_seq=head.seq if head else None,
            seen_hash=head.hash if head else None,
            accepted=got.accepted,
            reason="asked" if head else "keeps no audit head",
        )

    if not nodes:
        return []
    with ThreadPoolExecutor(max_workers=min(8, len(nodes))) as pool:
        return list(pool.map(one, sorted(nodes)))


def restore(state_dir: Path, backup: Path, passphrase: bytes) -> RestoreReport:
    """Restore ``backup`` into the empty ``state_dir`` (see the module's docstring)."""
    state_dir = Path(state_dir)
    refuse_unless_empty(state_dir)
    payload, _params = open_file(backup, passphrase)
    strange = sorted(set(payload.files) - set(KEPT_FILES))
    if strange:  # only the names a backup writes, never a path: nothing lands outside the folder
        raise BackupError(f"{backup}: holds files a backup never holds ({', '.join(strange)})")
    if f"{KEY_STEM}.key" not in payload.files:
        raise BackupError(f"{backup}: holds no controller key; it cannot restore a controller")
    key = _verify_key(payload, str(backup))
    try:
        data = crypto.unb64(payload.inventory, "inventory")
        held = image_mod.check(data, _key_of(state_dir, key), str(backup))
    except (ValueError, InventoryError) as exc:
        raise BackupError(str(exc)) from None
    created = not state_dir.exists()
    written: list[Path] = []
    try:
        written = _write(state_dir, payload)
        return _record(state_dir, payload, held)
    except BaseException:
        for path in [*written, state_dir / PROOF_FILE, *_sidecars(state_dir)]:
            with contextlib.suppress(OSError):
                path.unlink()
        if created:
            with contextlib.suppress(OSError):
                state_dir.rmdir()
        raise


def _sidecars(state_dir: Path) -> list[Path]:
    """SQLite's files beside the inventory (removed with it when a restore is undone)."""
    return [state_dir / f"{INVENTORY}{tail}" for tail in ("-wal", "-shm", "-journal")]


def _record(state_dir: Path, payload: Payload, held: image_mod.ImageSummary) -> RestoreReport:
    """Ask the nodes, jump the sequence, append the signed restore event, keep its proof."""
    keys = crypto.load_private(state_dir / f"{KEY_STEM}.key")
    with Inventory.open(state_dir / INVENTORY) as inv:
        inv.signer = keys.sign
        inv.controller = load_config(state_dir).name  # the restore event is this controller's
        nodes = _ask(inv)
        sequence = wire.Sequence(state_dir / SEQUENCE_FILE)
        highest = max((n.accepted or 0 for n in nodes), default=0)
        sequence.jump_past(highest)
        seen = [n.seen_seq for n in nodes if n.seen_seq is not None]
        seen_up_to = max(seen) if seen else None
        gap = (held.events + 1, seen_up_to) if seen_up_to and seen_up_to > held.events else None
        detail: dict[str, object] = {
            "backup_taken_at": payload.taken_at,
            "backup_events": held.events,
            "backup_head": held.head_hash,
            "seen_up_to": seen_up_to,
            "gap": list(gap) if gap else None,
            "nodes": {
                n.node: {
                    "seen_seq": n.seen_seq,
                    "seen_hash": n.seen_hash,
                    "accepted": n.accepted,
                    "reason": n.reason,
                }
                for n in nodes
            },
            "note": (
                f"restored from a backup taken at {payload.taken_at} holding events "
                f"1..{held.events}; "
                + (
                    f"the nodes had seen up to event {seen_up_to}: events "
                    f"{gap[0]}..{gap[1]} of the lost inventory are not in this chain"
                    if gap
                    else "no node had seen an event past the backup"
                )
            ),
        }
        event = inv.record(RESTORE, [], detail, "restored")
        proof = wire.RestoreProof(
            seq=event["seq"],
            hash=event["hash"],
            base_seq=held.head_seq,
            base_hash=held.head_hash,
            taken_at=payload.taken_at,
            sig="",
        )
        proof = dataclasses.replace(proof, sig=crypto.b64(keys.sign(proof.message())))
        keep_proof(state_dir, proof)
    return RestoreReport(
        state=str(state_dir),
        taken_at=payload.taken_at,
        events=held.events,
        pairs=held.pairs,
        event=event["seq"],
        seen_up_to=seen_up_to,
        gap=gap,
        nodes=nodes,
        sequence=highest,
    )
