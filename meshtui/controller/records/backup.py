"""``meshtui backup``: the state folder's whole truth in one encrypted file a restore can use.

What a backup holds: a consistent image of the inventory (SQLite's online backup, so a running
``watch`` may keep committing), the controller's key pair, its request sequence and the newest
restore proof (:mod:`meshtui.controller.records.restored`) when there is one. Nothing else in the state
folder is needed (the lock, the heartbeat and the lab are remade). The inventory holds no
credential in plain, and the keys leave the folder only encrypted.

The file (version 1)::

    meshtui-backup 1\\n
    {"cipher": "xsalsa20-poly1305", "kdf": {"name": "argon2id", "opslimit": 3,
     "memlimit": 268435456, "salt": "<base64, 16 bytes>"}, "format": 1}\\n
    <secret box: 24-byte nonce, then the payload sealed with Poly1305>

The key is Argon2id (libsodium's ``crypto_pwhash``, "moderate": 3 passes, 256 MiB) of the
passphrase and the salt; the header line is bound to the sealed payload (a changed parameter or
salt fails exactly as a wrong passphrase). The payload is JSON (:class:`Payload`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from meshtui import crypto
from meshtui.atomic import read_private
from meshtui.controller.core import INVENTORY, has_inventory, open_inventory, own_folder
from meshtui.controller.keys import KEY_STEM
from meshtui.controller.records.export import write_new
from meshtui.controller.records.restored import PROOF_FILE
from meshtui.errors import BackupError, CryptoError
from meshtui.freeform import JsonObject
from meshtui.inventory import now

MAGIC = b"meshtui-backup 1\n"
FORMAT = 1
SEQUENCE_FILE = "sequence"  # the controller's (controller.core.SEQUENCE_FILE; core imports us not)
KEPT_FILES = (f"{KEY_STEM}.key", f"{KEY_STEM}.pub", SEQUENCE_FILE, PROOF_FILE)
"""The state folder's files a backup carries beside the inventory (the key is required)."""
MAX_PASSPHRASE = 4096


@dataclass(frozen=True)
class KdfParams:
    """Argon2id's cost: passes and memory (bytes). The default is libsodium's "moderate"."""

    opslimit: int = crypto.PASSPHRASE_OPSLIMIT
    memlimit: int = crypto.PASSPHRASE_MEMLIMIT


class Kdf(msgspec.Struct, forbid_unknown_fields=True):
    """The header's key derivation: Argon2id, its cost and salt."""

    name: str
    opslimit: int
    memlimit: int
    salt: str


class Header(msgspec.Struct, forbid_unknown_fields=True):
    """The clear header line: the format and how the key is derived."""

    format: int
    cipher: str
    kdf: Kdf


class Held(msgspec.Struct, forbid_unknown_fields=True):
    """What the inventory inside holds: its chain and its pairs."""

    events: int
    head_seq: int
    head_hash: str
    pairs: int
    withdrawn: int
    generations: dict[str, int]
    schema: int


class Payload(msgspec.Struct, forbid_unknown_fields=True):
    """The sealed payload: when it was taken, the inventory image, the kept files (base64)."""

    format: int
    taken_at: str
    inventory: str
    files: dict[str, str]
    held: Held


@dataclass(frozen=True)
class BackupSummary:
    """What a backup holds (``backup --json``); no secret, no key."""

    file: str
    taken_at: str
    events: int
    head_seq: int
    pairs: int
    withdrawn: int
    generations: dict[str, int] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
    kdf: dict[str, int | str] = field(default_factory=dict)

    def to_json(self) -> JsonObject:
        """The summary as plain JSON."""
        return asdict(self)


def read_passphrase(path: Path) -> bytes:
    """The passphrase from a file only its owner can read (one line; a trailing newline is not
    part of it). BackupError naming the file otherwise; never says what is in it."""
    try:
        raw = read_private(Path(path))
    except FileNotFoundError:
        raise BackupError(f"{path}: no passphrase file there") from None
    except PermissionError as exc:
        raise BackupError(f"passphrase file {exc}") from None
    except OSError as exc:
        raise BackupError(f"{path}: cannot read the passphrase file ({exc.strerror})") from None
    passphrase = raw.rstrip(b"\r\n")
    if not passphrase:
        raise BackupError(f"{path}: the passphrase file is empty")
    if len(passphrase) > MAX_PASSPHRASE or b"\n" in passphrase:
        raise BackupError(f"{path}: a passphrase file holds one line of at most {MAX_PASSPHRASE}")
    return passphrase


def seal(payload: Payload, passphrase: bytes, params: KdfParams) -> bytes:
    """The file's bytes: magic, header line, the payload sealed under the derived key."""
    salt = crypto.new_salt()
    header = Header(
        format=FORMAT,
        cipher="xsalsa20-poly1305",
        kdf=Kdf("argon2id", params.opslimit, params.memlimit, crypto.b64(salt)),
    )
    line = msgspec.json.encode(header)
    key = crypto.passphrase_key(passphrase, salt, params.opslimit, params.memlimit)
    return MAGIC + line + b"\n" + crypto.box_seal(key, msgspec.json.encode(payload), line)


def take(state_dir: Path, target: Path, passphrase: bytes, params: KdfParams) -> BackupSummary:
    """Write a backup of ``state_dir`` to ``target`` (0600, never over an existing file); a
    ``target`` that is a folder gets a new file named for the time (``meshtui-<UTC>.backup``),
    as the nightly timer uses it.

    The inventory is opened read-only and copied with SQLite's online backup, so it is safe
    while ``watch`` or another command writes. BackupError when the state folder has no
    inventory or no controller key (a backup without the key cannot restore a controller).
    """
    own_folder(state_dir)
    target = Path(target)
    if target.is_dir() and not target.is_symlink():
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        target = target / f"meshtui-{stamp}.backup"
    if target.exists() or target.is_symlink():
        raise BackupError(f"{target}: exists already; a backup never replaces a file")
    if not has_inventory(state_dir):
        raise BackupError(f"{state_dir / INVENTORY}: no inventory to back up")
    files: dict[str, str] = {}
    for name in KEPT_FILES:
        path = state_dir / name
        try:
            data = read_private(path) if name != f"{KEY_STEM}.pub" else path.read_bytes()
        except FileNotFoundError:
            if name == f"{KEY_STEM}.key":
                raise BackupError(
                    f"{path}: no controller key; a backup without it cannot restore this "
                    "controller (run meshtui init first)"
                ) from None
            continue
        except OSError as exc:
            raise BackupError(f"{path}: cannot be read for the backup ({exc})") from None
        files[name] = crypto.b64(data)
    with open_inventory(state_dir, read_only=True) as inv:
        image = inv.image()
    taken_at = now()
    s = image.summary
    held = Held(s.events, s.head_seq, s.head_hash, s.pairs, s.withdrawn, s.generations, s.schema)
    payload = Payload(FORMAT, taken_at, crypto.b64(image.data), files, held)
    data = seal(payload, passphrase, params)
    try:
        write_new(target, data, "a backup")
    except FileExistsError as exc:
        raise BackupError(f"{target}: {exc.strerror}") from None
    except OSError as exc:
        raise BackupError(f"{target}: cannot write the backup ({exc.strerror})") from None
    return summary_of(target, payload, params)


def summary_of(path: Path, payload: Payload, params: KdfParams) -> BackupSummary:
    """What ``payload`` holds, as ``--json`` says it."""
    held = payload.held
    return BackupSummary(
        file=str(path),
        taken_at=payload.taken_at,
        events=held.events,
        head_seq=held.head_seq,
        pairs=held.pairs,
        withdrawn=held.withdrawn,
        generations=dict(held.generations),
        files=[INVENTORY, *sorted(payload.files)],
        kdf={"name": "argon2id", "opslimit": params.opslimit, "memlimit": params.memlimit},
    )


def open_file(path: Path, passphrase: bytes) -> tuple[Payload, KdfParams]:
    """Read and open a backup in memory; BackupError naming the file and the problem: not a
    backup, truncated, a header or payload changed, or the wrong passphrase. Nothing is
    written."""
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise BackupError(f"{path}: no backup there") from None
    except OSError as exc:
        raise BackupError(f"{path}: cannot read the backup ({exc.strerror})") from None
    if not raw.startswith(MAGIC):
        if raw.startswith(b"meshtui-backup "):
            raise BackupError(f"{path}: a backup of another format; restore it with its meshtui")
        raise BackupError(f"{path}: not a meshtui backup (or its first line was cut off)")
    line, sep, sealed = raw[len(MAGIC) :].partition(b"\n")
    if not sep:
        raise BackupError(f"{path}: truncated (the header line does not end)")
    try:
        header = msgspec.json.decode(line, type=Header)
        if header.format != FORMAT or header.kdf.name != "argon2id":
            raise ValueError(f"format {header.format}, kdf {header.kdf.name!r}")
        salt = crypto.unb64(header.kdf.salt, "salt")
        params = KdfParams(header.kdf.opslimit, header.kdf.memlimit)
        key = crypto.passphrase_key(passphrase, salt, params.opslimit, params.memlimit)
    except (msgspec.DecodeError, ValueError) as exc:
        raise BackupError(
            f"{path}: its header was changed or cut ({exc}); nothing restored"
        ) from None
    try:
        body = crypto.box_open(key, sealed, line)
    except CryptoError:  # which one of them cannot be told apart, by design
        size = f"{len(raw)} bytes"
        raise BackupError(
            f"{path}: cannot be opened: wrong passphrase, or the file was truncated or changed "
            f"after it was written ({size}); nothing was restored"
        ) from None
    try:
        payload = msgspec.json.decode(body, type=Payload)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise BackupError(f"{path}: its payload is not a backup's ({exc})") from None
    return payload, params


def as_text(summary: BackupSummary) -> str:
    """One line for the terminal."""
    gens = sum(summary.generations.values())
    return (
        f"{summary.file}: taken {summary.taken_at}; audit events 1..{summary.events}, "
        f"{summary.pairs} pairs ({summary.withdrawn} withdrawn), {gens} generations in all; "
        f"encrypted (argon2id, {summary.kdf.get('opslimit')} passes, "
        f"{int(summary.kdf.get('memlimit', 0)) // 2**20} MiB)"
    )
