"""A node takes a restored (shorter) chain's head only through the controller's signed restore
proof, once; the head it kept before becomes history, durably; anything else that is shorter
is refused as before (a wipe or an older inventory put back, caught)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from meshtui import crypto
from meshtui.errors import WireError
from meshtui.host.state.anchor import AuditAnchor
from meshtui.host.state.guard import Accepted
from meshtui.protocol import wire

KEY = crypto.PrivateKeys.generate(node=False)
OTHER = crypto.PrivateKeys.generate(node=False)


def digest(n: int, tag: str = "") -> str:
    return hashlib.sha256(f"{tag}{n}".encode()).hexdigest()


def head(seq: int, tag: str = "", proof: wire.RestoreProof | None = None) -> wire.SignedHead:
    h = digest(seq, tag)
    sig = crypto.b64(KEY.sign(wire.head_message(seq, h)))
    return wire.SignedHead(seq, h, sig, proof)


def proof(seq: int, tag: str, base: int, keys: crypto.PrivateKeys = KEY) -> wire.RestoreProof:
    p = wire.RestoreProof(seq, digest(seq, tag), base, digest(base), "2026-12-01T00:00:00", "")
    return wire.RestoreProof(**{**p.to_json(), "sig": crypto.b64(keys.sign(p.message()))})


class Node:
    """The guard's record and the anchor, as an agent holds them (restartable)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.seq = 1_000
        self.start()

    def start(self) -> None:
        self.accepted = Accepted(self.folder, "app1")
        self.anchor = AuditAnchor(
            self.folder, KEY.public().verify, self.accepted.head, self.accepted.history
        )

    def show(self, shown: wire.SignedHead) -> bool:
        """One request showing ``shown``, as the agent handles it: kept when wanted."""
        self.seq += 1
        self.accepted.take(self.seq)
        wanted = self.anchor.wants(shown)
        self.accepted.record(self.seq, (), shown.to_json() if wanted else None)
        if wanted:
            self.anchor.keep(shown)
        return wanted

    def restart(self) -> None:
        self.accepted.close()
        self.start()


def test_a_restored_head_is_taken_once_through_its_signed_proof(tmp_path: Path) -> None:
    node = Node(tmp_path)
    assert node.show(head(9))
    assert not node.show(head(5, "r"))  # shorter, no proof: a wipe, refused
    assert not node.show(head(5, "r", proof(5, "r", 4, OTHER)))  # a proof by another key
    assert not node.show(head(4, "r", proof(5, "r", 4)))  # a proof newer than the head
    restored = proof(5, "r", 4)
    assert node.show(head(5, "r", restored))
    assert node.anchor.head == head(5, "r", restored)
    assert [h.seq for h in node.anchor.history] == [9]
    node.restart()  # durably so: the guard's record holds both
    assert node.anchor.head == head(5, "r", restored)
    assert [h.seq for h in node.anchor.history] == [9]
    assert node.show(head(6, "r", restored))  # the restored chain goes on as usual
    # the restored inventory put back later (its proof already seen): refused, as any wipe
    assert not node.show(head(5, "r", restored))
    assert node.anchor.head is not None and node.anchor.head.seq == 6
    # a second restore, with its own proof: taken, the head before it kept too
    again = proof(3, "s", 2)
    assert node.show(head(3, "s", again))
    assert [h.seq for h in node.anchor.history] == [9, 6]
    node.restart()
    assert [h.seq for h in node.anchor.history] == [9, 6]
    assert node.anchor.head is not None and node.anchor.head.seq == 3


def test_the_readable_copy_follows_a_restored_head(tmp_path: Path) -> None:
    """``audit-head.json`` (what a restart reads beside the record) shows the restored head,
    though its number is lower than the one the copy held."""
    node = Node(tmp_path)
    assert node.show(head(9))
    restored = proof(5, "r", 4)
    assert node.show(head(5, "r", restored))
    node.anchor.copy()
    copied = wire.SignedHead.from_json(json.loads((tmp_path / "audit-head.json").read_text()))
    assert copied.seq == 5 and copied.restore == restored


def test_a_kept_head_of_a_retired_controller_on_a_pinned_node_says_how_to_keep_it(
    tmp_path: Path,
) -> None:
    """A node whose policy names no controller checks every head against its one pinned key: a
    head kept from a controller since retired (ctl-b) stops the agent, and the refusal says
    to name the controllers that stay (the named case keeps such a head), not only to delete
    it."""
    h = digest(7)
    by_b = wire.SignedHead(7, h, crypto.b64(OTHER.sign(wire.head_message(7, h))), None, "ctl-b")
    (tmp_path / "audit-head.json").write_text(json.dumps(by_b.to_json()))
    with pytest.raises(WireError) as refused:
        AuditAnchor(tmp_path, KEY.public().verify)
    said = str(refused.value)
    assert "not signed by the key of controller ctl-b" in said, said
    assert "if controller ctl-b was retired, name the controllers that stay" in said, said
    assert AuditAnchor(tmp_path, lambda name: OTHER.public().verify).head == by_b
