"""Keys, minting, sealing, digests and signatures: the only module that imports PyNaCl.

A credential is minted, sealed to the two nodes that need it (libsodium sealed boxes to their
X25519 keys), digested so both ends can be compared without revealing it, and dropped. Messages
between controller and agents are signed with Ed25519.

PyNaCl and ``tomllib`` are imported by the functions that use them, not with this module: most
of meshtui imports it for a name or a type, and ``meshtui status`` never signs, seals or opens
(docs/ARCHITECTURE.md, "Start-up").
"""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from meshtui.atomic import read_private, write_private
from meshtui.errors import CryptoError, KeyFileError, SignatureError, UnsealError

if TYPE_CHECKING:
    import nacl.public
    import nacl.signing

DIGEST_PERSON = b"meshtui-secret"
KEYED_PREFIX = "keyed-blake2b:"
"""How a keyed digest (:func:`keyed_digest`) begins; any other digest is :func:`secret_digest`'s."""
KEYED_PERSON = b"meshtui-keyed"
DIGEST_KEY_PERSON = b"meshtui-dkey"


def mint() -> str:
    """A new credential: 32 random bytes, URL-safe base64 (ASCII, so SASLprep is the identity)."""
    return secrets.token_urlsafe(32)


_MINTED = re.compile(rb"[A-Za-z0-9_-]{43}")


def is_minted(data: bytes) -> bool:
    """Whether ``data`` is exactly what :func:`mint` makes (a lone 43-character token): a file
    holding anything else is not a credential meshtui wrote, and the agent does not replace it."""
    return _MINTED.fullmatch(data) is not None


def secret_digest(secret: bytes) -> str:
    """The digest of a secret file's exact bytes (docs/ARCHITECTURE.md), unkeyed: safe to show
    only for what :func:`mint` makes (256 random bits); a value that may be guessed takes
    :func:`keyed_digest`."""
    h = hashlib.blake2b(secret, digest_size=32, person=DIGEST_PERSON)
    return "blake2b:" + h.hexdigest()


def keyed_digest(secret: bytes, key: bytes) -> str:
    """The digest of a value that may have low entropy (a module's own secret, which an operator
    may choose): BLAKE2b keyed with ``key``, so whoever holds the digest but not the key cannot
    test guesses against it (docs/security-digests.md)."""
    h = hashlib.blake2b(secret, digest_size=32, key=key, person=KEYED_PERSON)
    return KEYED_PREFIX + h.hexdigest()


def b64(data: bytes) -> str:
    """Standard base64 text of ``data``."""
    return base64.b64encode(data).decode("ascii")


def unb64(text: str, what: str = "value") -> bytes:
    """Decode base64 text; a ValueError names ``what`` when it is not base64."""
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError) as exc:
        raise ValueError(f"{what} is not valid base64") from exc


@dataclass(frozen=True)
class PublicKeys:
    """A party's public half: ``seal`` (X25519, nodes only) and ``verify`` (Ed25519)."""

    verify: bytes
    seal: bytes | None = None

    def fingerprint(self) -> str:
        """A short, stable name for these keys, for screens and audit entries."""
        h = hashlib.blake2b((self.seal or b"") + self.verify, digest_size=8)
        return "-".join(h.hexdigest()[i : i + 4] for i in range(0, 16, 4))

    def to_toml(self) -> str:
        """The ``.pub`` file text (docs/ARCHITECTURE.md, Contracts, "Keys")."""
        lines = []
        if self.seal is not None:
            lines.append(f'seal = "{b64(self.seal)}"')
        lines.append(f'verify = "{b64(self.verify)}"')
        return "\n".join(lines) + "\n"


def parse_public(text: str, source: str, *, need_seal: bool) -> PublicKeys:
    """Parse a ``.pub`` file's TOML; errors name the file and the key."""
    import tomllib

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise KeyFileError(f"{source}: not valid TOML: {exc}") from exc
    try:
        verify = unb64(str(data["verify"]), "verify")
        seal = unb64(str(data["seal"]), "seal") if "seal" in data else None
    except KeyError as exc:
        raise KeyFileError(f"{source}: missing key {exc.args[0]!r}") from exc
    except ValueError as exc:
        raise KeyFileError(f"{source}: {exc}") from exc
    if len(verify) != 32 or (seal is not None and len(seal) != 32):
        raise KeyFileError(f"{source}: keys must be 32 bytes each")
    if need_seal and seal is None:
        raise KeyFileError(f"{source}: a node's key file needs 'seal' (run meshtui host init)")
    return PublicKeys(verify=verify, seal=seal)


def load_public(path: Path, *, need_seal: bool = True) -> PublicKeys:
    """Read a ``.pub`` file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise KeyFileError(f"{path}: cannot read key file: {exc.strerror}") from exc
    return parse_public(text, str(path), need_seal=need_seal)


class PrivateKeys:
    """A party's private keys: a signing key, and for nodes an unsealing key. Kept in 0600 files."""

    def __init__(self, signing: bytes, unsealing: bytes | None = None) -> None:
        import nacl.public
        import nacl.signing

        self._signing: nacl.signing.SigningKey = nacl.signing.SigningKey(signing)
        self._unsealing: nacl.public.PrivateKey | None = (
            nacl.public.PrivateKey(unsealing) if unsealing is not None else None
        )

    @classmethod
    def generate(cls, *, node: bool) -> PrivateKeys:
        """Fresh keys; ``node`` adds the X25519 key that deliveries are sealed to."""
        import nacl.public
        import nacl.signing

        unsealing = bytes(nacl.public.PrivateKey.generate()) if node else None
        return cls(bytes(nacl.signing.SigningKey.generate()), unsealing)

    def public(self) -> PublicKeys:
        """The public half, as written to the ``.pub`` file."""
        seal = bytes(self._unsealing.public_key) if self._unsealing is not None else None
        return PublicKeys(verify=bytes(self._signing.verify_key), seal=seal)

    def sign(self, body: bytes) -> bytes:
        """Detached Ed25519 signature of ``body``."""
        return bytes(self._signing.sign(body).signature)

    def unseal(self, blob: bytes) -> bytes:
        """Open a sealed box addressed to this node; never says what was inside on failure."""
        if self._unsealing is None:
            raise UnsealError("these keys cannot unseal (controller keys have no X25519 half)")
        import nacl.exceptions
        import nacl.public

        try:
            return bytes(nacl.public.SealedBox(self._unsealing).decrypt(blob))
        except (nacl.exceptions.CryptoError, ValueError, TypeError) as exc:
            raise UnsealError("sealed blob does not open with this node's key") from exc

    def digest_key(self, context: bytes) -> bytes:
        """A 32-byte key for :func:`keyed_digest`, derived from the signing key and ``context``:
        the holder makes the same key again for the same context, and it never rests
        anywhere in the clear (nodes receive it sealed, for one request)."""
        return derive_digest_key(bytes(self._signing), context)

    def unseal_as_signer(self, blob: bytes) -> bytes:
        """Open what :func:`seal_to_verify_key` sealed to this party's verify key (the signing
        key's X25519 form); UnsealError, never saying what was inside, when it does not open."""
        import nacl.exceptions
        import nacl.public

        unsealing = self._signing.to_curve25519_private_key()
        try:
            return bytes(nacl.public.SealedBox(unsealing).decrypt(blob))
        except (nacl.exceptions.CryptoError, ValueError, TypeError) as exc:
            raise UnsealError("sealed blob does not open with this controller's key") from exc

    def to_toml(self) -> str:
        """The private key file text (0600 only)."""
        lines = [f'sign = "{b64(bytes(self._signing))}"']
        if self._unsealing is not None:
            lines.append(f'unseal = "{b64(bytes(self._unsealing))}"')
        return "\n".join(lines) + "\n"


def load_private(path: Path) -> PrivateKeys:
    """Read a private key file, refusing one that others could read."""
    try:
        raw = read_private(Path(path))
    except FileNotFoundError as exc:
        raise KeyFileError(f"{path}: no key file (run meshtui init / meshtui host init)") from exc
    except PermissionError as exc:
        raise KeyFileError(str(exc)) from exc
    except OSError as exc:
        raise KeyFileError(f"{path}: cannot read key file: {exc.strerror}") from exc
    return parse_private(raw, str(path))


def parse_private(raw: bytes, source: str) -> PrivateKeys:
    """A private key file's bytes as keys; KeyFileError naming ``source`` when they are not."""
    import tomllib

    try:
        data = tomllib.loads(raw.decode("utf-8"))
        signing = unb64(str(data["sign"]), "sign")
        unsealing = unb64(str(data["unseal"]), "unseal") if "unseal" in data else None
        return PrivateKeys(signing, unsealing)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, KeyError, ValueError) as exc:
        raise KeyFileError(f"{source}: not a meshtui private key file") from exc


def write_keys(folder: Path, stem: str, keys: PrivateKeys) -> tuple[Path, Path]:
    """Write ``<stem>.key`` (0600) and ``<stem>.pub`` (0644) into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    key_path, pub_path = folder / f"{stem}.key", folder / f"{stem}.pub"
    write_private(key_path, keys.to_toml().encode())
    write_private(pub_path, keys.public().to_toml().encode(), mode=0o644)
    return key_path, pub_path


def seal(secret: bytes, seal_key: bytes) -> bytes:
    """Seal ``secret`` to one node's X25519 public key (anonymous sender)."""
    import nacl.public

    return bytes(nacl.public.SealedBox(nacl.public.PublicKey(seal_key)).encrypt(secret))


def seal_to_verify_key(secret: bytes, verify_key: bytes) -> bytes:
    """Seal ``secret`` to a party that has only an Ed25519 key (a controller): to that key's
    X25519 form, which libsodium derives from it; :meth:`PrivateKeys.unseal_as_signer` opens
    it. ValueError when ``verify_key`` is not a valid Ed25519 key."""
    import nacl.exceptions
    import nacl.public
    import nacl.signing

    try:
        public = nacl.signing.VerifyKey(verify_key).to_curve25519_public_key()
    except (nacl.exceptions.CryptoError, ValueError, TypeError) as exc:
        raise ValueError("not a valid Ed25519 verify key") from exc
    return bytes(nacl.public.SealedBox(public).encrypt(secret))


def derive_digest_key(root: bytes, context: bytes) -> bytes:
    """The 32-byte key for :func:`keyed_digest` that ``root`` (a 32-byte secret) derives for
    ``context``: one root gives every secret its own key, the same each time."""
    return hashlib.blake2b(context, digest_size=32, key=root, person=DIGEST_KEY_PERSON).digest()


def verify(body: bytes, signature: bytes, verify_key: bytes, who: str) -> None:
    """Check a detached Ed25519 signature; raise SignatureError naming ``who`` otherwise."""
    import nacl.exceptions
    import nacl.signing

    try:
        nacl.signing.VerifyKey(verify_key).verify(body, signature)
    except (nacl.exceptions.BadSignatureError, ValueError, TypeError) as exc:
        raise SignatureError(f"signature does not verify as {who}") from exc


# ---- passphrase encryption (backups) ------------------------------------------------------

PASSPHRASE_OPSLIMIT = 3
"""Argon2id passes for a backup's key (libsodium's ``OPSLIMIT_MODERATE``, a test holds them
equal): about a second here."""
PASSPHRASE_MEMLIMIT = 256 * 2**20
"""Argon2id memory for a backup's key (256 MiB, libsodium's ``MEMLIMIT_MODERATE``)."""
PASSPHRASE_SALT_BYTES = 16
"""libsodium's ``crypto_pwhash_SALTBYTES``."""
PASSPHRASE_LIMITS = ((1, 10), (8 * 2**20, 2**30))
"""The (opslimit, memlimit) ranges a file may ask for: a tampered header cannot make the
reader spend more than a gigabyte or ten passes before the passphrase is even tried."""


def passphrase_key(passphrase: bytes, salt: bytes, opslimit: int, memlimit: int) -> bytes:
    """The 32-byte secret-box key Argon2id derives from ``passphrase`` with these parameters;
    ValueError naming the parameter when it is outside :data:`PASSPHRASE_LIMITS`."""
    (ops_lo, ops_hi), (mem_lo, mem_hi) = PASSPHRASE_LIMITS
    if not ops_lo <= opslimit <= ops_hi:
        raise ValueError(f"opslimit {opslimit} is outside {ops_lo}..{ops_hi}")
    if not mem_lo <= memlimit <= mem_hi:
        raise ValueError(f"memlimit {memlimit} is outside {mem_lo}..{mem_hi}")
    if len(salt) != PASSPHRASE_SALT_BYTES:
        raise ValueError(f"salt must be {PASSPHRASE_SALT_BYTES} bytes")
    import nacl.pwhash.argon2id
    import nacl.secret

    return bytes(
        nacl.pwhash.argon2id.kdf(
            nacl.secret.SecretBox.KEY_SIZE, passphrase, salt, opslimit=opslimit, memlimit=memlimit
        )
    )


def new_salt() -> bytes:
    """A fresh random salt for :func:`passphrase_key`."""
    return secrets.token_bytes(PASSPHRASE_SALT_BYTES)


def box_seal(key: bytes, plaintext: bytes, associated: bytes = b"") -> bytes:
    """Encrypt and authenticate ``plaintext`` (and ``associated``, sent in the clear beside it)
    under a secret-box key: XSalsa20-Poly1305 with a random nonce, the nonce first.

    ``associated`` is bound by prefixing its BLAKE2b digest to the plaintext, so a changed
    header fails exactly like a changed body."""
    import nacl.secret

    bound = hashlib.blake2b(associated, digest_size=32).digest() + plaintext
    return bytes(nacl.secret.SecretBox(key).encrypt(bound))


def box_open(key: bytes, sealed: bytes, associated: bytes = b"") -> bytes:
    """Open what :func:`box_seal` made; CryptoError when the key is wrong or anything changed
    (the ciphertext, its length, or ``associated``)."""
    import nacl.exceptions
    import nacl.secret

    try:
        bound = bytes(nacl.secret.SecretBox(key).decrypt(sealed))
    except (nacl.exceptions.CryptoError, ValueError, TypeError) as exc:
        raise CryptoError("cannot be opened with this key") from exc
    if bound[:32] != hashlib.blake2b(associated, digest_size=32).digest():
        raise CryptoError("its header was changed")
    return bound[32:]
