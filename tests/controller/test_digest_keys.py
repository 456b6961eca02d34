"""The mesh's digest key without a lab: sealed to one controller's key it opens with that key
only; a backup and its restore carry the sealed copy; a second controller on the same
inventory is refused until a holder shares it, then opens the very same key; doctor's read
names who lacks it. (Two controllers on a real PostgreSQL with real agents and OpenBao:
tests/kinds/openbao/test_own_secrets_controllers.py.)"""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from meshtui import crypto
from meshtui.controller.act import digest_keys
from meshtui.controller.core import Controller
from meshtui.controller.keys import add_peer
from meshtui.controller.read.doctor import digest_key_lacking
from meshtui.errors import DigestKeyError, UnsealError
from tests.controller.test_backup import declared, secret_file, two_controllers
from tests.fix_mesh import Mesh


def a_key(state: Path) -> bytes:
    """The digest key ``state``'s controller derives from the mesh's key for one secret."""
    with Controller.open(state) as ctl:
        return digest_keys.open_key(ctl, make=False).of(None, "app1/gitea", "session_key")


def test_a_key_sealed_to_a_controller_opens_with_its_key_only() -> None:
    a = crypto.PrivateKeys.generate(node=False)
    b = crypto.PrivateKeys.generate(node=False)
    root = secrets.token_bytes(32)
    sealed = crypto.seal_to_verify_key(root, a.public().verify)
    assert root not in sealed
    assert a.unseal_as_signer(sealed) == root
    with pytest.raises(UnsealError):
        b.unseal_as_signer(sealed)


def test_a_backup_and_its_restore_carry_the_sealed_copy(mesh: Mesh) -> None:
    declared(mesh)
    with Controller.open(mesh.state) as ctl:
        digest_keys.open_key(ctl, make=True)
    before = a_key(mesh.state)
    target, pw = mesh.root / "b", secret_file(mesh.root)
    assert mesh.cli("backup", target, "--passphrase-file", pw).code == 0
    fresh = mesh.root / "fresh"
    res = mesh.run("--state", fresh, "restore", target, "--passphrase-file", pw)
    assert res.code == 0, res.err
    assert a_key(fresh) == before


def test_a_second_controller_is_refused_until_a_holder_shares_the_key(mesh: Mesh) -> None:
    """ctl-a and ctl-b on one inventory (one file, two state folders, each its own key)."""
    b = two_controllers(mesh)
    with Controller.open(mesh.state) as a:
        digest_keys.open_key(a, make=True)
    with Controller.open(b) as ctl, pytest.raises(DigestKeyError) as refused:
        digest_keys.open_key(ctl, make=True)  # even a writer never makes a key of its own
    said = str(refused.value)
    assert "controller ctl-b holds no copy of the mesh's digest key (held by ctl-a)" in said
    assert "meshtui secret share-key ctl-b" in said

    add_peer(mesh.state, "ctl-b", b / "controller.pub")
    with Controller.open(mesh.state) as a:
        (lacks,) = digest_key_lacking(a)
        assert lacks.subject == "ctl-b" and "share-key ctl-b" in lacks.fix
    res = mesh.cli("secret", "share-key")
    assert res.code == 0 and "sealed to ctl-b" in res.out, res.out + res.err
    with pytest.raises(DigestKeyError, match="sealed by controller ctl-a, whose key"):
        a_key(b)  # a copy is opened only when its sealer's signature is checked
    add_peer(b, "ctl-a", mesh.state / "controller.pub")
    assert a_key(b) == a_key(mesh.state)
    with Controller.open(mesh.state) as a:
        assert digest_key_lacking(a) == []
        shared = a.inventory.last_event("digest-key-shared")
    assert shared is not None and shared["detail"]["controllers"] == ["ctl-b"]
    assert shared["controller"] == "ctl-a"
    again = mesh.cli("secret", "share-key", "ctl-b")  # named again: its copy is sound
    assert again.code == 0 and "hold the mesh's digest key already" in again.out, again.out
    with Controller.open(mesh.state) as a:
        events = [e for e in a.inventory.events() if e["kind"] == "digest-key-shared"]
    assert len(events) == 1, events


def test_sharing_to_a_controller_not_known_here_is_refused_naming_the_file(mesh: Mesh) -> None:
    declared(mesh)
    res = mesh.cli("secret", "share-key", "ctl-q")
    assert res.code == 1 and "controller ctl-q is not known here" in res.err, res.out + res.err
    assert "controllers/ctl-q.pub" in res.err


def test_a_controller_whose_key_was_made_anew_is_refused_until_a_new_digest_key(
    mesh: Mesh,
) -> None:
    """The only holder lost its key: its copy no longer opens, it says so and what to run, and
    ``share-key --anew`` makes a new mesh digest key (audited), never silently."""
    declared(mesh)
    with Controller.open(mesh.state) as ctl:
        digest_keys.open_key(ctl, make=True)
    before = a_key(mesh.state)
    crypto.write_keys(mesh.state, "controller", crypto.PrivateKeys.generate(node=False))
    with pytest.raises(DigestKeyError) as refused:
        a_key(mesh.state)
    assert "is not one a known controller sealed to it" in str(refused.value)
    assert "meshtui secret share-key --anew" in str(refused.value)
    res = mesh.cli("secret", "share-key", "--anew")
    assert res.code == 0 and "a new mesh digest key was made" in res.out, res.out + res.err
    assert a_key(mesh.state) != before
    with Controller.open(mesh.state) as ctl:
        made = ctl.inventory.last_event("digest-key-made")
    assert made is not None and made["detail"]["anew"] is True
