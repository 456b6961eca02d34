"""A damaged inventory (cut short, its header overwritten, a page inside garbled): every command
says so, names the file and points to ``restore``, and nothing writes to it."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest

from tests.fix_mesh import Mesh, modules

COMMANDS = [
    ("status",),
    ("status", "--json"),
    ("audit", "--verify"),
    ("audit", "--list"),
    ("push",),
    ("rotate", "--all", "--yes"),
    ("declare", "DECL"),
    ("doctor",),
]


def damage(path: Path, how: str) -> None:
    raw = path.read_bytes()
    page = int.from_bytes(raw[16:18], "big")
    if how == "truncated":
        path.write_bytes(raw[: len(raw) // 2])
    elif how == "header":
        path.write_bytes(b"\0" * 100 + raw[100:])
    else:  # a page in the middle: the pairs' table or its index, read by every listing
        garbled = bytearray(raw)
        for n in range(1, len(raw) // page):
            garbled[n * page : n * page + 64] = b"\xff" * 64
        path.write_bytes(bytes(garbled))


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("how", ["truncated", "header", "pages"])
def test_every_command_names_the_damaged_inventory_and_writes_nothing(mesh: Mesh, how: str) -> None:
    decl = mesh.write(mesh.spec(modules([f"app1/m{i}" for i in range(40)])))
    assert mesh.cli("declare", decl).code == 0
    con = sqlite3.connect(mesh.inventory)  # fold the WAL in, so the file is the whole truth
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    damage(mesh.inventory, how)
    before = digest(mesh.inventory)
    for command in COMMANDS:
        args = [str(decl) if a == "DECL" else a for a in command]
        res = mesh.cli(*args)
        assert res.code != 0, (command, res.out)
        assert str(mesh.inventory) in res.err, (command, res.err)
        assert "damaged" in res.err and "restore" in res.err, (command, res.err)
        assert digest(mesh.inventory) == before, command
    pw = mesh.root / "pass"
    pw.write_text("passphrase\n")
    pw.chmod(0o600)
    res = mesh.cli("backup", mesh.root / "b", "--passphrase-file", pw)
    assert res.code != 0 and "damaged" in res.err and str(mesh.inventory) in res.err
    assert not (mesh.root / "b").exists()  # a damaged inventory is not backed up as if whole
    assert digest(mesh.inventory) == before
