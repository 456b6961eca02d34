"""Keys on disk as docs/ARCHITECTURE.md "Keys" says, minting, sealing, digests and signatures."""

from __future__ import annotations

import base64
import hashlib
import os
import re
import secrets
import stat
import tomllib
from pathlib import Path

import pytest

from meshtui import crypto
from meshtui.errors import KeyFileError, SignatureError, UnsealError
from tests.fix_mesh import Mesh, Runner


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def b64_32(text: str) -> bytes:
    raw = base64.b64decode(text, validate=True)
    assert len(raw) == 32
    return raw


# ---------------------------------------------------------------------------- keys on disk


def test_init_and_host_init_write_keys_as_design_says(tmp_path: Path, run_cli: Runner) -> None:
    state = tmp_path / "S"
    res = run_cli("--state", state, "init")
    assert res.code == 0 and "wrote controller keys" in res.out
    assert mode(state / "controller.key") == 0o600
    controller = tomllib.loads((state / "controller.pub").read_text())
    assert set(controller) == {"verify"}, "the controller's .pub has verify only"
    b64_32(controller["verify"])

    for name in ("db1", "app1"):
        folder = tmp_path / "N" / name
        res = run_cli(
            "host",
            "init",
            "--name",
            name,
            "--state",
            folder,
            "--controller",
            state / "controller.pub",
        )
        assert res.code == 0, res.err
        assert mode(folder / "node.key") == 0o600
        pub = tomllib.loads((folder / "node.pub").read_text())
        assert set(pub) == {"seal", "verify"}
        b64_32(pub["seal"])
        b64_32(pub["verify"])
        lines = (folder / "node.pub").read_text().splitlines()
        assert [re.sub(r'"[^"]*"', '"…"', line) for line in lines] == [
            'seal = "…"',
            'verify = "…"',
        ]
        # the controller's key is pinned
        assert tomllib.loads((folder / "controller.pub").read_text()) == controller
        keys = crypto.load_private(folder / "node.key")
        assert keys.public().seal == b64_32(pub["seal"])
        assert keys.public().verify == b64_32(pub["verify"])


def test_init_twice_keeps_the_keys(tmp_path: Path, run_cli: Runner) -> None:
    state = tmp_path / "S"
    assert run_cli("--state", state, "init").code == 0
    before = (state / "controller.key").read_bytes()
    res = run_cli("--state", state, "init")
    assert res.code == 0 and "kept" in res.out
    assert (state / "controller.key").read_bytes() == before


def test_a_world_readable_key_is_refused(tmp_path: Path, run_cli: Runner) -> None:
    state = tmp_path / "S"
    assert run_cli("--state", state, "init").code == 0
    key = state / "controller.key"
    key.chmod(0o644)
    with pytest.raises(KeyFileError, match="chmod 600"):
        crypto.load_private(key)
    res = run_cli("--state", state, "init")
    assert res.code == 2 and "readable by others" in res.err and str(key) in res.err
    key.chmod(0o640)
    with pytest.raises(KeyFileError, match="readable by others"):
        crypto.load_private(key)


def test_private_key_file_errors_are_key_file_errors(tmp_path: Path) -> None:
    with pytest.raises(KeyFileError, match="no key file"):
        crypto.load_private(tmp_path / "none.key")
    bad = tmp_path / "bad.key"
    bad.write_text("sign = 'nope'\n")
    bad.chmod(0o600)
    with pytest.raises(KeyFileError, match="not a meshtui private key file"):
        crypto.load_private(bad)
    short = tmp_path / "short.key"
    short.write_text(f'sign = "{base64.b64encode(b"x" * 5).decode()}"\n')
    short.chmod(0o600)
    with pytest.raises(KeyFileError):
        crypto.load_private(short)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("verify = ", "not valid TOML"),
        ('seal = "AAAA"\n', "missing key 'verify'"),
        ('verify = "***"\n', "verify is not valid base64"),
        (f'verify = "{base64.b64encode(b"x" * 31).decode()}"\n', "32 bytes"),
    ],
)
def test_public_key_file_errors_name_the_file(text: str, match: str) -> None:
    with pytest.raises(KeyFileError, match=match) as info:
        crypto.parse_public(text, "keys/x.pub", need_seal=False)
    assert "keys/x.pub" in str(info.value)


def test_a_node_key_file_needs_seal() -> None:
    pub = crypto.PrivateKeys.generate(node=False).public().to_toml()
    assert crypto.parse_public(pub, "c.pub", need_seal=False).seal is None
    with pytest.raises(KeyFileError, match="needs 'seal'"):
        crypto.parse_public(pub, "c.pub", need_seal=True)


def test_public_keys_roundtrip_through_toml() -> None:
    pub = crypto.PrivateKeys.generate(node=True).public()
    assert crypto.parse_public(pub.to_toml(), "x", need_seal=True) == pub
    assert re.fullmatch(r"[0-9a-f]{4}(-[0-9a-f]{4}){3}", pub.fingerprint())


# ---------------------------------------------------------------------------- mint, seal, digest


def test_mint_is_token_urlsafe_32(monkeypatch: pytest.MonkeyPatch) -> None:
    minted = {crypto.mint() for _ in range(100)}
    assert len(minted) == 100
    for m in minted:
        assert re.fullmatch(r"[A-Za-z0-9_-]{43}", m)
        assert len(base64.urlsafe_b64decode(m + "=")) == 32
    calls: list[int | None] = []

    def fake(n: int | None = None) -> str:
        calls.append(n)
        return "x"

    monkeypatch.setattr(secrets, "token_urlsafe", fake)
    assert crypto.mint() == "x" and calls == [32]


def test_seal_unseal_roundtrip_and_only_for_its_node() -> None:
    a, b = crypto.PrivateKeys.generate(node=True), crypto.PrivateKeys.generate(node=True)
    secret = crypto.mint().encode()
    blob = crypto.seal(secret, a.public().seal or b"")
    assert secret not in blob
    assert a.unseal(blob) == secret
    assert crypto.seal(secret, a.public().seal or b"") != blob  # fresh ephemeral key each time
    with pytest.raises(UnsealError) as info:
        b.unseal(blob)
    assert secret.decode() not in str(info.value)


@pytest.mark.parametrize("where", [0, 31, 32, 47, -1])
def test_a_tampered_blob_does_not_unseal(where: int) -> None:
    keys = crypto.PrivateKeys.generate(node=True)
    blob = bytearray(crypto.seal(b"secret", keys.public().seal or b""))
    blob[where] ^= 0x01
    with pytest.raises(UnsealError):
        keys.unseal(bytes(blob))
    with pytest.raises(UnsealError):
        keys.unseal(bytes(blob[:10]))


def test_controller_keys_cannot_unseal() -> None:
    keys = crypto.PrivateKeys.generate(node=False)
    with pytest.raises(UnsealError, match="cannot unseal"):
        keys.unseal(b"x" * 80)


def test_digest_is_designs_formula() -> None:
    secret = crypto.mint().encode()
    h = hashlib.new("blake2b", secret, digest_size=32, person=b"meshtui-secret")
    assert crypto.secret_digest(secret) == "blake2b:" + h.hexdigest()
    assert len(crypto.secret_digest(secret)) == len("blake2b:") + 64
    plain = hashlib.blake2b(secret, digest_size=32).hexdigest()
    assert crypto.secret_digest(secret) != "blake2b:" + plain  # the person string counts
    assert crypto.secret_digest(secret + b"\n") != crypto.secret_digest(secret)


def test_a_keyed_digest_needs_its_key_and_the_key_comes_again_from_the_same_keys() -> None:
    keys, other = crypto.PrivateKeys.generate(node=False), crypto.PrivateKeys.generate(node=False)
    key = keys.digest_key(b"own-secret\0app1/gitea\0smtp")
    assert key == keys.digest_key(b"own-secret\0app1/gitea\0smtp") and len(key) == 32
    assert key != keys.digest_key(b"own-secret\0app1/gitea\0smtq")
    assert key != other.digest_key(b"own-secret\0app1/gitea\0smtp")
    weak = b"Summer2026!"
    made = crypto.keyed_digest(weak, key)
    assert made.startswith(crypto.KEYED_PREFIX) and len(made) == len(crypto.KEYED_PREFIX) + 64
    assert made.split(":")[1] not in (
        crypto.secret_digest(weak).split(":")[1],
        hashlib.blake2b(weak, digest_size=32).hexdigest(),
        hashlib.blake2b(weak, digest_size=32, key=key).hexdigest(),  # the person string counts
    )


# ---------------------------------------------------------------------------- signatures


def test_sign_and_verify() -> None:
    keys = crypto.PrivateKeys.generate(node=False)
    body = b'{"kind":"state"}'
    sig = keys.sign(body)
    assert len(sig) == 64
    crypto.verify(body, sig, keys.public().verify, "controller")


def test_a_forged_signature_is_refused() -> None:
    keys, mallory = crypto.PrivateKeys.generate(node=False), crypto.PrivateKeys.generate(node=True)
    body = b"deliver"
    with pytest.raises(SignatureError, match="as controller"):
        crypto.verify(body, mallory.sign(body), keys.public().verify, "controller")
    with pytest.raises(SignatureError):
        crypto.verify(body + b"!", keys.sign(body), keys.public().verify, "controller")
    forged = bytearray(keys.sign(body))
    forged[0] ^= 1
    with pytest.raises(SignatureError):
        crypto.verify(body, bytes(forged), keys.public().verify, "controller")
    with pytest.raises(SignatureError):
        crypto.verify(body, b"short", keys.public().verify, "controller")


def test_private_keys_roundtrip_through_their_file(tmp_path: Path) -> None:
    keys = crypto.PrivateKeys.generate(node=True)
    key_path, pub_path = crypto.write_keys(tmp_path / "k", "node", keys)
    assert mode(key_path) == 0o600 and mode(pub_path) == 0o644
    loaded = crypto.load_private(key_path)
    assert loaded.public() == keys.public() == crypto.load_public(pub_path)
    blob = crypto.seal(b"s", keys.public().seal or b"")
    assert loaded.unseal(blob) == b"s"
    assert not any(p.name.endswith(".tmp") for p in key_path.parent.iterdir())


def test_node_keys_in_a_mesh_open_what_was_sealed_to_them(mesh: Mesh) -> None:
    for node in ("db1", "app1", "app2"):
        keys = mesh.keys(node)
        pub = crypto.load_public(mesh.node_dirs[node] / "node.pub")
        assert keys.unseal(crypto.seal(b"x", pub.seal or b"")) == b"x"
    assert os.stat(mesh.state / "controller.key").st_mode & 0o077 == 0


def test_the_passphrase_limits_are_libsodiums_moderate() -> None:
    """crypto writes libsodium's numbers as literals (PyNaCl is imported only when used); they
    must stay the library's own."""
    import nacl.pwhash.argon2id

    assert crypto.PASSPHRASE_OPSLIMIT == nacl.pwhash.argon2id.OPSLIMIT_MODERATE
    assert crypto.PASSPHRASE_MEMLIMIT == nacl.pwhash.argon2id.MEMLIMIT_MODERATE
    assert crypto.PASSPHRASE_SALT_BYTES == nacl.pwhash.argon2id.SALTBYTES
