"""The inventory as one image of bytes: taken consistently while others write (a backup), checked
before it is put back (a restore), and a damaged file recognised before anything writes to it.

A backup reads the file through SQLite's online backup API into memory, so a ``watch`` committing
meanwhile is neither blocked for long nor seen half-way; the image is the file's bytes as
SQLite would write them. What the image holds (events, pairs, generations) is read from the image
itself, never from the live file, so the summary is exactly what was saved.
"""

from __future__ import annotations

import sqlite3
import struct
from dataclasses import dataclass, field
from pathlib import Path

from meshtui.errors import DamagedInventoryError, InventoryError
from meshtui.inventory import audit as audit_mod
from meshtui.inventory import schema

MAGIC = b"SQLite format 3\x00"
HEADER = 100
"""An SQLite file's header: magic, page size (bytes 16-17), page count (bytes 28-31)."""

DAMAGE_WORDS = ("malformed", "not a database", "disk image", "file is encrypted", "corrupt")
"""What SQLite says when a file's pages cannot be read as a database."""


@dataclass(frozen=True)
class ImageSummary:
    """What an inventory image holds: its audit chain (events, head) and its pairs."""

    events: int
    head_seq: int
    head_hash: str
    pairs: int
    withdrawn: int
    generations: dict[str, int] = field(default_factory=dict)
    schema: int = 0


@dataclass(frozen=True)
class Image:
    """An inventory's bytes and what they hold."""

    data: bytes
    summary: ImageSummary


def damaged(path: Path, why: str) -> DamagedInventoryError:
    """The one error every command raises for a damaged inventory: names it, points to restore."""
    return DamagedInventoryError(
        f"{path}: the inventory is damaged ({why}); nothing was written to it. Keep the file "
        "as it is for inspection, and restore the newest backup into an empty state folder: "
        "meshtui --state NEW_FOLDER restore BACKUP --passphrase-file FILE (README, "
        '"Backup and restore")'
    )


def is_damage(exc: sqlite3.DatabaseError) -> bool:
    """True when SQLite's error says the file itself is damaged (not busy, not read-only)."""
    text = str(exc).lower()
    return any(word in text for word in DAMAGE_WORDS)


def check_file(path: Path) -> None:
    """Raise :class:`DamagedInventoryError` when ``path`` is not a whole SQLite file.

    Cheap (the 100-byte header and one stat): the magic, a valid page size, and a file at
    least as long as the page count its header declares (a truncated copy is shorter). Pages
    damaged inside are found by SQLite when read (:func:`is_damage`). An empty or absent file is
    not damaged: it is a new inventory.
    """
    try:
        with open(path, "rb") as f:
            head = f.read(HEADER)
            size = f.seek(0, 2)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise InventoryError(f"{path}: cannot read the inventory ({exc.strerror})") from exc
    if size == 0:
        return
    if len(head) < HEADER or not head.startswith(MAGIC):
        raise damaged(path, "it is not an SQLite file, or its first page was overwritten")
    (page,) = struct.unpack(">H", head[16:18])
    page = 65536 if page == 1 else page
    if page < 512 or page & (page - 1):
        raise damaged(path, f"its header names an impossible page size ({page})")
    (count,) = struct.unpack(">I", head[28:32])
    (changes,) = struct.unpack(">I", head[24:28])
    (valid_for,) = struct.unpack(">I", head[92:96])
    if count and changes == valid_for and size < count * page:
        raise damaged(
            path, f"it is cut short: {size} bytes where its header declares {count * page}"
        )


def take(conn: sqlite3.Connection, path: Path) -> Image:
    """A consistent image of the database behind ``conn`` (SQLite's online backup, into memory)
    and what it holds; :class:`DamagedInventoryError` naming ``path`` when a page of it is
    damaged (a backup of a damaged file would only fail later, at the restore)."""
    memory = sqlite3.connect(":memory:")
    try:
        conn.backup(memory)
        found = memory.execute("PRAGMA quick_check").fetchone()[0]
        if found != "ok":
            raise damaged(path, str(found))
        summary = summarise(memory)
        return Image(_rollback_mode(memory.serialize()), summary)
    finally:
        memory.close()


def _rollback_mode(data: bytes) -> bytes:
    """The image marked as a rollback-journal file (header bytes 18 and 19 set to 1, as SQLite
    writes them outside WAL mode): an image of a WAL file cannot be opened in memory, and the
    inventory turns WAL on again when it is opened from disk."""
    if len(data) < HEADER or not data.startswith(MAGIC):
        return bytes(data)
    out = bytearray(data)
    out[18] = out[19] = 1
    return bytes(out)


def summarise(conn: sqlite3.Connection) -> ImageSummary:
    """Events, head, pairs and each live pair's generation, read from ``conn``."""
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    head = audit_mod.head(conn)
    pairs = conn.execute("SELECT id, generation, withdrawn_at FROM pairs ORDER BY id").fetchall()
    return ImageSummary(
        events=audit_mod.last_seq(conn),
        head_seq=head["seq"] if head else 0,
        head_hash=head["hash"] if head else audit_mod.GENESIS,
        pairs=sum(1 for _, _, gone in pairs if gone is None),
        withdrawn=sum(1 for _, _, gone in pairs if gone is not None),
        generations={str(pid): int(gen) for pid, gen, gone in pairs if gone is None},
        schema=version,
    )


def check(data: bytes, verify_key: bytes | audit_mod.KeyOf, source: str) -> ImageSummary:
    """Read an image in memory (nothing is written): a whole SQLite database of a schema this
    meshtui reads, whose audit chain verifies and whose head ``verify_key`` signed (or, by name,
    the key of the controller that signed it).
    InventoryError naming ``source`` and the problem otherwise."""
    memory = sqlite3.connect(":memory:")
    try:
        try:
            memory.deserialize(_rollback_mode(data))
            found = memory.execute("PRAGMA quick_check").fetchone()[0]
        except sqlite3.DatabaseError as exc:
            raise InventoryError(f"{source}: the inventory inside is not readable ({exc})") from exc
        if found != "ok":
            raise InventoryError(f"{source}: the inventory inside is damaged ({found})")
        version = int(memory.execute("PRAGMA user_version").fetchone()[0])
        if version > schema.SCHEMA_VERSION:
            raise InventoryError(
                f"{source}: the inventory inside is of schema {version}, newer than this "
                f"meshtui reads ({schema.SCHEMA_VERSION}); restore with a newer meshtui"
            )
        chain = audit_mod.walk(memory, verify_key)
        if not chain.ok:
            raise InventoryError(
                f"{source}: the audit chain inside does not verify with the controller keys "
                f"known (event {chain.bad_seq}: {chain.problem})"
            )
        return summarise(memory)
    finally:
        memory.close()
