"""The status image: a one-shot reader (``meshtui status``, a fresh process) brings up to date
what an earlier reader made, kept in the state folder, and trusts it only when nothing is in
doubt. Written by one process and read by another, stale, damaged, of another inventory, a link
or a FIFO in its place, or a folder the reader cannot write: each read is exactly the read of
every pair, and an image that must not be believed is not (each test gives the image a lie that
would show if it were)."""

from __future__ import annotations

import json
import os
import random
import shutil
import sqlite3
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from meshtui.atomic import write_private
from meshtui.cli import render
from meshtui.controller.read import status as status_mod
from meshtui.controller.read import status_image
from meshtui.controller.read.status import statuses
from meshtui.inventory import Inventory, now
from meshtui.inventory.rows import StatusChanges, StatusMark
from meshtui.model import State
from tests.fix_pg import Engine, inventory_database
from tests.test_inventory_postgres import (  # noqa: F401
    Replicated,
    standby,
    text_of,
    write_conninfo,
)
from tests.test_status_read import PAIRS, pair_record, probe, want

LIE = "a lie the image was given"


def made(folder: Path) -> Inventory:
    """A fresh inventory in ``folder`` holding the walk's pairs, every end delivered."""
    return filled(Inventory.open(folder / "inventory.db"))


def filled(inv: Inventory) -> Inventory:
    """``inv`` holding the walk's pairs, every end delivered."""
    with inv.transaction("test") as tx:
        tx.put_pairs([pair_record(pid, generation=want(pid)) for pid in PAIRS])
        tx.put_deliveries(
            [
                {"pair": pid, "end": end, "generation": want(pid), "digest": None,
                 "since": now(), "attempted_at": now(), "error": None}
                for pid in PAIRS for end in ("consumer", "provider")
            ]
        )  # fmt: skip
    return inv


@pytest.fixture
def inv(tmp_path: Path) -> Iterator[Inventory]:
    with made(tmp_path) as inv:
        yield inv


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[StatusChanges]:
    """Every status read the inventory answers from now on (a spy: the read itself runs)."""
    seen: list[StatusChanges] = []
    real = Inventory.status_changes

    def spy(self: Inventory, since: StatusMark | None, also: Any = ()) -> StatusChanges:
        got = real(self, since, also)
        seen.append(got)
        return got

    monkeypatch.setattr(Inventory, "status_changes", spy)
    return seen


def image_json(folder: Path) -> dict[str, Any]:
    return json.loads((folder / status_image.IMAGE).read_bytes())


def lied(image: dict[str, Any]) -> dict[str, Any]:
    """The image with every reason replaced by :data:`LIE` (still a well-formed image)."""
    rows = image["rows"]
    return image | {"rows": rows | {"reason": [LIE] * len(rows["reason"])}}


def plant(folder: Path, image: dict[str, Any]) -> None:
    path = folder / status_image.IMAGE
    path.unlink(missing_ok=True)
    path.write_bytes(json.dumps(image).encode())
    path.chmod(0o600)


def believed(got: list[Any]) -> bool:
    return any(st.reason == LIE for st in got)


def test_an_image_written_by_one_process_is_read_by_another(
    inv: Inventory, tmp_path: Path, reads: list[StatusChanges]
) -> None:
    """``meshtui status --json`` in a fresh process reads every pair and leaves the image
    (0600); after another write, this process reads the image and only the pair written since,
    and a fresh CLI process again prints exactly what the read of every pair gives."""
    cli = [sys.executable, "-m", "meshtui.cli", "--state", str(tmp_path), "status", "--json"]
    subprocess.run(cli, check=True, capture_output=True)
    written = os.stat(tmp_path / status_image.IMAGE)
    assert stat.S_IMODE(written.st_mode) == 0o600 and stat.S_ISREG(written.st_mode)
    with inv.transaction("test") as tx:
        tx.add_probes([probe(PAIRS[2], random.Random(1))])
    got = statuses(inv, image=tmp_path)
    assert [r.whole for r in reads] == [False] and len(reads[0].rows) == 1
    assert got == statuses(inv)
    printed = json.loads(subprocess.run(cli, check=True, capture_output=True).stdout)
    assert printed == json.loads(json.dumps(render.status_json(statuses(inv))))


def test_a_stale_image_is_brought_up_to_date(
    inv: Inventory, tmp_path: Path, reads: list[StatusChanges], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An image behind the inventory by a probe, a rotation, an open rotation and a provider's
    kind is read with what changed since (not believed as it stands); once a pair is added,
    every pair is read and the image written again at the new mark, and so it is when more
    statuses were made than :data:`~meshtui.controller.read.status.REWRITE_AFTER`."""
    statuses(inv, image=tmp_path)
    rng = random.Random(2)
    with inv.transaction("test") as tx:
        refused = probe(PAIRS[0], rng) | {"verdict": "refused", "generation": want(PAIRS[0]),
                                          "withdrawn": 0, "reason": "refused (28P01)"}  # fmt: skip
        tx.add_probes([refused])  # type: ignore[list-item]
        tx.set_generation(PAIRS[1], want(PAIRS[1]) + 1, now())
        tx.journal_rotation([{"pair": PAIRS[3], "from": 1, "to": 2}], owner_pid=1)
    del reads[:]
    got = statuses(inv, image=tmp_path)
    assert got == statuses(inv)
    assert not reads[0].whole and {st.state for st in got} == {State.STALE, State.UNKNOWN}
    with inv.transaction("test") as tx:
        tx.put_modules([{"id": "db1/postgres", "node": "db1", "name": "postgres",
                         "spec": '{"provides": [{"name": "database", "port": 6379, "kind": "redis"}]}',
                         "declared": 1}])  # fmt: skip
    assert statuses(inv, image=tmp_path) == statuses(inv)
    assert {st.kind for st in statuses(inv, image=tmp_path)} == {"redis"}
    with inv.transaction("test") as tx:  # declare adds a pair: the pairs' stamp moves
        tx.put_pairs([pair_record("database:late/svc->db1/postgres")])
    del reads[:]
    assert statuses(inv, image=tmp_path) == statuses(inv)
    assert reads[0].whole and image_json(tmp_path)["mark"] == mark_json(reads[0].mark)
    monkeypatch.setattr(status_mod, "REWRITE_AFTER", 2)
    with inv.transaction("test") as tx:
        tx.add_probes([probe(pid, rng) for pid in PAIRS[:3]])
    del reads[:]
    assert statuses(inv, image=tmp_path) == statuses(inv)
    assert not reads[0].whole and len(reads[0].rows) == 3
    assert image_json(tmp_path)["mark"] == mark_json(reads[0].mark)  # more than 2 made


def mark_json(mark: StatusMark | None) -> dict[str, int]:
    assert mark is not None
    return {"epoch": mark.epoch, "stamp": mark.stamp, "tick": mark.tick}


def _truncated(image: dict[str, Any]) -> bytes:
    data = json.dumps(image).encode()
    return data[: len(data) // 2]


def _shorter_column(image: dict[str, Any]) -> bytes:
    rows = image["rows"]
    return json.dumps(image | {"rows": rows | {"reason": rows["reason"][:-1]}}).encode()


def _unsorted(image: dict[str, Any]) -> bytes:
    rows = image["rows"]
    flipped = {name: column[::-1] for name, column in rows.items()}
    return json.dumps(image | {"rows": flipped}).encode()


DAMAGED = {
    "truncated": _truncated,
    "garbage": lambda image: os.urandom(4096),
    "empty": lambda image: b"",
    "a column shorter than the others": _shorter_column,
    "rows out of order": _unsorted,
    "another format": lambda image: json.dumps(image | {"format": 99}).encode(),
    "other code": lambda image: json.dumps(image | {"code": "0" * 32}).encode(),
    "an unknown field": lambda image: json.dumps(image | {"extra": 1}).encode(),
}


@pytest.mark.parametrize("damage", sorted(DAMAGED))
def test_a_damaged_image_is_read_whole_and_written_again(
    inv: Inventory, tmp_path: Path, reads: list[StatusChanges], damage: str
) -> None:
    """An image truncated, garbled, empty, of columns of unequal length, out of order, of
    another format or other code, or with a field it does not know is not used (the read is
    the read of every pair, never an error) and is replaced by a good one."""
    statuses(inv, image=tmp_path)
    path = tmp_path / status_image.IMAGE
    path.write_bytes(DAMAGED[damage](lied(image_json(tmp_path))))
    del reads[:]
    got = statuses(inv, image=tmp_path)
    assert not believed(got) and got == statuses(inv)
    assert reads[0].whole
    assert status_image.read(tmp_path, inv.identity()) is not None  # written again, good


@pytest.mark.parametrize("how", ["readable by others", "another owner"])
def test_an_image_others_could_have_written_is_not_believed(
    inv: Inventory, tmp_path: Path, how: str
) -> None:
    """An image readable by group or others, or owned by someone other than the inventory's
    owner, is not believed (its lie does not show) and is replaced by the owner's own."""
    statuses(inv, image=tmp_path)
    plant(tmp_path, lied(image_json(tmp_path)))
    path = tmp_path / status_image.IMAGE
    if how == "readable by others":
        path.chmod(0o644)
    else:
        if os.geteuid() != 0:
            pytest.skip("giving a file to another user needs root")
        os.chown(path, 65534, 65534)
    assert not believed(statuses(inv, image=tmp_path))
    st = os.stat(path)
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (os.stat(inv.path).st_uid, 0o600)


def test_a_lie_in_a_well_formed_image_is_believed(inv: Inventory, tmp_path: Path) -> None:
    """The control of the tests above: the same lie in a well-formed image of the owner's is
    believed (the image is trusted as its owner wrote it), so each refusal above is the check
    it names."""
    statuses(inv, image=tmp_path)
    plant(tmp_path, lied(image_json(tmp_path)))
    assert believed(statuses(inv, image=tmp_path))


def test_an_image_of_a_recreated_inventory_is_not_used(tmp_path: Path) -> None:
    """The state folder made again (the inventory removed, declared anew): the old image,
    left beside the new file, is not used (another epoch)."""
    with made(tmp_path) as inv:
        statuses(inv, image=tmp_path)
        plant(tmp_path, lied(image_json(tmp_path)))
    for name in ("inventory.db", "inventory.db-wal", "inventory.db-shm"):
        (tmp_path / name).unlink(missing_ok=True)
    with made(tmp_path) as inv:
        got = statuses(inv, image=tmp_path)
        assert not believed(got) and got == statuses(inv)


def test_an_image_of_a_restored_inventory_is_not_used(tmp_path: Path) -> None:
    """An older copy of the file put back in its place (a restore: a new file, the same epoch)
    and written since to the very tick the image was made at: the image, made from the file
    before it was replaced, holds writes the restored file never had, under the same mark. It
    is not used: its file is another file."""
    with made(tmp_path) as inv:
        older = tmp_path / "older.db"
        with sqlite3.connect(older) as copy:
            inv._db.conn.backup(copy)
        copy.close()
        rng = random.Random(3)
        with inv.transaction("test") as tx:
            tx.add_probes([probe(PAIRS[0], rng)])
        statuses(inv, image=tmp_path)
        kept = image_json(tmp_path)
    os.replace(older, tmp_path / "inventory.db")  # the restore
    for name in ("inventory.db-wal", "inventory.db-shm"):
        (tmp_path / name).unlink(missing_ok=True)
    plant(tmp_path, kept)
    with Inventory.open(tmp_path / "inventory.db") as inv:
        with inv.transaction("test") as tx:
            tx.add_probes([probe(PAIRS[5], rng)])
        now_mark = inv.status_changes(None).mark
        assert now_mark is not None and [now_mark.epoch, now_mark.stamp, now_mark.tick] == [
            kept["mark"]["epoch"],
            kept["mark"]["stamp"],
            kept["mark"]["tick"],
        ]  # the same mark: only the file tells them apart
        got = statuses(inv, image=tmp_path)
        assert got == statuses(inv), "an image of the file before the restore was used"


def test_a_link_at_the_image_path_is_never_followed(inv: Inventory, tmp_path: Path) -> None:
    """A link planted where the image goes, to a well-formed image that lies: not read
    through, and replaced by the image itself (the link's target is left as it was)."""
    statuses(inv, image=tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    target = elsewhere / "planted.json"
    target.write_bytes(json.dumps(lied(image_json(tmp_path))).encode())
    target.chmod(0o600)
    before = target.read_bytes()
    (tmp_path / status_image.IMAGE).unlink()
    (tmp_path / status_image.IMAGE).symlink_to(target)
    got = statuses(inv, image=tmp_path)
    assert not believed(got) and got == statuses(inv)
    assert not (tmp_path / status_image.IMAGE).is_symlink()
    assert target.read_bytes() == before


def test_a_fifo_at_the_image_path_never_blocks(inv: Inventory, tmp_path: Path) -> None:
    """A FIFO planted where the image goes (nobody writing to it): a fresh process's read
    neither blocks on it nor fails, and the FIFO is replaced by the image."""
    os.mkfifo(tmp_path / status_image.IMAGE, 0o600)
    read = (
        "import sys\n"
        "from pathlib import Path\n"
        "from meshtui.controller.read.status import statuses\n"
        "from meshtui.inventory import Inventory\n"
        "folder = Path(sys.argv[1])\n"
        "with Inventory.open(folder / 'inventory.db', read_only=True) as inv:\n"
        "    print(len(statuses(inv, image=folder)))\n"
    )
    done = subprocess.run([sys.executable, "-c", read, str(tmp_path)], capture_output=True,
                          text=True, timeout=30, check=True)  # fmt: skip
    assert done.stdout.strip() == str(len(PAIRS))
    assert stat.S_ISREG(os.lstat(tmp_path / status_image.IMAGE).st_mode)
    assert status_image.read(tmp_path, inv.identity()) is not None


@pytest.mark.skipif(os.geteuid() != 0, reason="runs a reader as another user (root only)")
def test_a_reader_that_cannot_write_the_folder_reads_and_writes_nothing() -> None:
    """The inventory's owner reading from a folder it may not write (mode 0500): the read is
    complete, no image is left and nothing is said; an image there it may not write over is
    still read."""
    base = Path(tempfile.mkdtemp(prefix="meshtui-image-"))
    try:
        base.chmod(0o755)
        folder = base / "state"
        folder.mkdir()
        with made(folder) as inv:
            whole = [st.to_json() for st in statuses(inv)]
        for path in [folder, *folder.iterdir()]:
            os.chown(path, 65534, 65534)
        folder.chmod(0o500)
        read = (  # imported as root (the interpreter is root's), then 65534 for good
            "import importlib.metadata, json, os, sys\n"
            "from pathlib import Path\n"
            "from meshtui.controller.read.status import statuses\n"
            "from meshtui.controller.read.status_image import code_digest\n"
            "from meshtui.inventory import Inventory\n"
            "code_digest()\n"
            "os.setgroups([]); os.setresgid(65534, 65534, 65534); os.setresuid(65534, 65534, 65534)\n"
            "folder = Path(sys.argv[1])\n"
            "with Inventory.open(folder / 'inventory.db', read_only=True) as inv:\n"
            "    print(json.dumps([st.to_json() for st in statuses(inv, image=folder)]))\n"
        )
        argv = [sys.executable, "-c", read, str(folder)]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True,
                              cwd="/")  # fmt: skip
        assert json.loads(done.stdout) == whole and done.stderr == ""
        assert not (folder / status_image.IMAGE).exists()
        folder.chmod(0o700)  # the owner may write: the image is left, given to the owner
        subprocess.run(argv, capture_output=True, timeout=60, check=True,
                       cwd="/")  # fmt: skip
        st = os.stat(folder / status_image.IMAGE)
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (65534, 0o600)
        folder.chmod(0o500)
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True,
                              cwd="/")  # fmt: skip
        assert json.loads(done.stdout) == whole
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_root_gives_the_image_the_inventorys_owner(tmp_path: Path) -> None:
    """Root reading a state folder whose inventory another user owns leaves the image that
    user's (0600), so the owner's own reads trust it."""
    if os.geteuid() != 0:
        pytest.skip("needs root")
    with made(tmp_path) as inv:
        os.chown(inv.path, 65534, 65534)
        statuses(inv, image=tmp_path)
        st = os.stat(tmp_path / status_image.IMAGE)
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (65534, 65534, 0o600)
        assert status_image.read(tmp_path, inv.identity()) is not None


def test_the_images_columns_are_a_status_rows_fields() -> None:
    """The image's columns are :class:`~meshtui.model.PairStatus`'s fields, in order (the
    statuses are made from them by position)."""
    from meshtui.model import PairStatus

    assert tuple(PairStatus.__dataclass_fields__) == status_image.FIELDS


def test_a_keeping_reader_starts_from_the_image_and_leaves_one(
    inv: Inventory, tmp_path: Path, reads: list[StatusChanges], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A keeping reader (``watch``, the dashboard) given the folder reads its first read from
    the image (only the pair written since), keeps it in memory from then on, and leaves the
    image again when its read made more than
    :data:`~meshtui.controller.read.status.REWRITE_AFTER` statuses (a probe of many pairs), so the
    next one-shot read after it starts from there."""
    statuses(inv, image=tmp_path)
    rng = random.Random(4)
    with inv.transaction("test") as tx:
        tx.add_probes([probe(PAIRS[1], rng)])
    with Inventory.open(inv.path, read_only=True) as keeper:
        del reads[:]
        assert statuses(keeper, keep=True, image=tmp_path) == statuses(inv)
        assert not reads[0].whole and len(reads[0].rows) == 1
        monkeypatch.setattr(status_mod, "REWRITE_AFTER", 2)
        with inv.transaction("test") as tx:
            tx.add_probes([probe(pid, rng) for pid in PAIRS])
        del reads[:]
        assert statuses(keeper, keep=True, image=tmp_path) == statuses(inv)
        assert image_json(tmp_path)["mark"] == mark_json(reads[0].mark)
        del reads[:]
        assert statuses(inv, image=tmp_path) == statuses(inv)
        assert reads[0].rows == []  # the one-shot reader had nothing left to read


def brought_up(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every read a one-shot reader brought up to date from now on (a spy: each runs)."""
    seen: list[Any] = []
    real = status_mod._brought_up

    def spy(inv: Inventory, kept: Any) -> Any:
        got = real(inv, kept)
        seen.append((kept is not None, got.whole, got.made))
        return got

    monkeypatch.setattr(status_mod, "_brought_up", spy)
    return seen


def test_a_one_shot_reader_starts_from_the_image_on_either_engine(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CLI's ``status`` (one-shot, through the image) makes only the pair written since the
    last read, on PostgreSQL as on SQLite (an image kept beside a PostgreSQL inventory used
    to be refused as of no inventory file, so every ``meshtui status`` read every pair)."""
    seen = brought_up(monkeypatch)
    with filled(engine.open(tmp_path / "inventory.db")) as inv:
        statuses(inv, image=tmp_path)
        assert (tmp_path / status_image.IMAGE).exists()
        with inv.transaction("test") as tx:
            tx.add_probes([probe(PAIRS[2], random.Random(4))])
        got = statuses(inv, image=tmp_path)
        assert got == statuses(inv)
    assert seen[:2] == [(False, True, len(PAIRS)), (True, False, 1)]


def test_an_image_of_another_postgres_database_is_not_used(pg_clean: Any, tmp_path: Path) -> None:
    """A copy of the inventory's database (a dump restored, ``CREATE DATABASE … TEMPLATE``)
    has the same epoch, stamp and tick as the image was made at: only the database tells them
    apart, and the image made from the first is not used for the copy."""
    import psycopg
    from psycopg import sql

    first = inventory_database(pg_clean, tmp_path)
    with filled(Inventory.open(tmp_path / "inventory.db", postgres=first)) as inv:
        statuses(inv, image=tmp_path)
    plant(tmp_path, lied(image_json(tmp_path)))
    with Inventory.open(tmp_path / "inventory.db", postgres=first) as inv:
        assert believed(statuses(inv, image=tmp_path))  # the lie shows: the image is used
    plant(tmp_path, lied(image_json(tmp_path)))
    admin = pg_clean.admin_conninfo()
    source = psycopg.conninfo.conninfo_to_dict(first.read_text().strip())["dbname"]
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(f"{source}_copy"), sql.Identifier(str(source))
            )
        )
    copy = tmp_path / "copy.conninfo"
    write_private(
        copy, (psycopg.conninfo.make_conninfo(admin, dbname=f"{source}_copy") + "\n").encode()
    )
    with Inventory.open(tmp_path / "inventory.db", postgres=copy) as inv:
        got = statuses(inv, image=tmp_path)
        assert not believed(got) and got == statuses(inv)


def _probed(conninfo: Path, folder: Path, pid: str) -> tuple[list[Any], list[Any]]:
    """One probe of ``pid`` written (a status tick) on the inventory ``conninfo`` names, then
    the statuses a one-shot reader makes there through the image in ``folder``, and those of
    a read of every pair."""
    with Inventory.open(folder / "inventory.db", postgres=conninfo) as inv:
        with inv.transaction("test") as tx:
            tx.add_probes([probe(pid, random.Random(7))])
        return statuses(inv, image=folder), statuses(inv)


def test_an_image_of_what_a_promoted_standby_never_received_is_not_used(
    standby: Replicated,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The inventory's primary dies and its standby, which had not received the last write,
    is promoted (one conninfo naming both, ``target_session_attrs=read-write``): same server
    name, same database oid, same epoch and stamp, and the next write brings its tick back to
    the image's. The image made on the lost primary holds what the promoted standby does not:
    it is not used there."""
    conninfo = write_conninfo(tmp_path / "both.conninfo",
                              standby.both(target_session_attrs="read-write"))  # fmt: skip
    filled(Inventory.open(tmp_path / "inventory.db", postgres=conninfo)).close()
    standby.cut_off()
    _probed(conninfo, tmp_path, PAIRS[2])  # the write the standby never gets, and the image
    plant(tmp_path, lied(image_json(tmp_path)))
    standby.primary.stop()
    standby.promote()
    got, truth = _probed(conninfo, tmp_path, PAIRS[3])  # on the promoted standby
    assert not believed(got) and got == truth


def test_a_keeping_reader_reads_every_pair_again_on_the_promoted_standby(
    standby: Replicated,  # noqa: F811
    tmp_path: Path,
) -> None:
    """A reader that keeps its statuses (``watch``) across the same switch, its connection
    opened anew on the promoted standby: what it kept from the lost primary is not brought up
    to date there (the clock caught up with its mark through another write), it reads every
    pair again."""
    conninfo = write_conninfo(tmp_path / "both.conninfo",
                              standby.both(target_session_attrs="read-write"))  # fmt: skip
    with filled(Inventory.open(tmp_path / "inventory.db", postgres=conninfo)) as inv:
        standby.cut_off()
        with inv.transaction("test") as tx:
            tx.add_probes([probe(PAIRS[2], random.Random(7))])  # never received
        statuses(inv, keep=True)
        standby.primary.stop()
        standby.promote()
        with inv.transaction("test") as tx:  # on the promoted standby
            tx.add_probes([probe(PAIRS[3], random.Random(7))])
        assert statuses(inv, keep=True) == statuses(inv)


def test_an_image_of_a_database_recreated_with_its_oid_is_not_used(
    pg_clean: Any, tmp_path: Path
) -> None:
    """The inventory's database dropped and made again from an earlier copy of it, with the
    same oid (``CREATE DATABASE … OID``, as a restore that gives it back its number): the
    same server, oid, epoch and stamp, and the next write brings its tick back to the image's.
    The image made before holds what the database no longer does: it is not used."""
    import psycopg
    from psycopg import sql

    first = inventory_database(pg_clean, tmp_path)
    filled(Inventory.open(tmp_path / "inventory.db", postgres=first)).close()
    name = str(psycopg.conninfo.conninfo_to_dict(first.read_text().strip())["dbname"])
    with psycopg.connect(pg_clean.admin_conninfo(), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
            sql.Identifier(f"{name}_earlier"), sql.Identifier(name)))  # fmt: skip
    _probed(first, tmp_path, PAIRS[2])  # the write the earlier copy lacks, and the image
    plant(tmp_path, lied(image_json(tmp_path)))
    with psycopg.connect(pg_clean.admin_conninfo(), autocommit=True) as conn:
        found = conn.execute("SELECT oid FROM pg_database WHERE datname = %s", [name]).fetchone()
        assert found is not None
        conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {} OID {} TEMPLATE {}").format(
            sql.Identifier(name), sql.Literal(found[0]), sql.Identifier(f"{name}_earlier")))  # fmt: skip
    got, truth = _probed(first, tmp_path, PAIRS[3])
    assert not believed(got) and got == truth


IDENTITY_PARTS = (
    "SELECT d.oid, d.xmin::text, c.epoch, s.stamp FROM pg_database d, status_clock c, "
    "pairs_stamp s WHERE d.datname = current_database()"
)
"""What tells two databases apart short of their cluster: oid, catalog row, status epoch, stamp."""


def _first_database(cluster: Any, folder: Path) -> Path:
    """The first database made on ``cluster`` (its number the first a new cluster gives), and
    a conninfo file naming it in ``folder``."""
    import psycopg

    with psycopg.connect(cluster.admin_conninfo(), autocommit=True) as conn:
        conn.execute("CREATE DATABASE inventory")
    return write_conninfo(folder / "inventory.conninfo",
                          psycopg.conninfo.make_conninfo(cluster.admin_conninfo(),
                                                         dbname="inventory"))  # fmt: skip


def test_an_image_of_a_server_made_anew_under_its_name_is_not_used(tmp_path: Path) -> None:
    """The inventory's server made anew where it was (same socket and port), its database
    made the same way (the same oid, the same catalog row) and a dump of it restored: same
    server name, oid, epoch and stamp, and the next write brings its tick back to the image's.
    The image made on the old server holds the write the dump lacks: it is not used."""
    import psycopg

    from meshtui.kinds.postgres.lab import create_cluster
    from tests.fix_pg import BINARIES, start_cluster

    old, base = start_cluster("15")
    try:
        conninfo = _first_database(old, tmp_path)
        filled(Inventory.open(tmp_path / "inventory.db", postgres=conninfo)).close()
        done = old._run([str(old.binaries / "pg_dump"), "-h", str(old.socket_dir), "-p", str(old.port),
                         "-U", "postgres", "--inserts", "-d", "inventory"])  # fmt: skip
        assert done.returncode == 0, done.stderr
        dumped = [line for line in done.stdout.splitlines() if not line.startswith("\\")]
        _probed(conninfo, tmp_path, PAIRS[2])  # the write the dump lacks, and the image
        plant(tmp_path, lied(image_json(tmp_path)))
        with psycopg.connect(text_of(conninfo)) as conn:
            before = conn.execute(IDENTITY_PARTS).fetchone()
        old.stop()
        shutil.rmtree(old.datadir)
        new = create_cluster(old.datadir, port=old.port, bindir=BINARIES["15"])
        new.start()
        assert _first_database(new, tmp_path) == conninfo
        with psycopg.connect(text_of(conninfo), autocommit=True) as conn:
            conn.execute("\n".join(dumped))
        with psycopg.connect(text_of(conninfo)) as conn:
            assert conn.execute(IDENTITY_PARTS).fetchone() == before  # only the cluster differs
        got, truth = _probed(conninfo, tmp_path, PAIRS[3])
        assert not believed(got) and got == truth
    finally:
        old.stop()  # the new server, in the same folder
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("refused", [1, 2])
def test_a_server_that_refuses_to_say_its_history_still_reads_status(
    pg_clean: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, refused: int
) -> None:
    """A server that refuses the functions naming its cluster and timeline (a role denied
    them, a server with no WAL of its own) is known by its database's row alone, and the image
    is still used from one session to the next; one that refuses even that gets a history of
    its own per session: the image is never used, and every status is still right."""
    from meshtui.inventory import pg_connection

    seen = brought_up(monkeypatch)
    monkeypatch.setattr(pg_connection, "HISTORY_SQL", "SELECT meshtui_refused()")
    if refused == 2:
        monkeypatch.setattr(pg_connection, "CATALOG_HISTORY_SQL", "SELECT meshtui_refused()")
    conninfo = inventory_database(pg_clean, tmp_path)
    filled(Inventory.open(tmp_path / "inventory.db", postgres=conninfo)).close()
    for pid in PAIRS[:2]:
        got, truth = _probed(conninfo, tmp_path, pid)
        assert got == truth
    assert seen[1][:2] == (True, refused == 2)  # the second session: the image, held or not


def _one_statement(inv: Inventory, folder: Path, pid: str, reads: list[Any], keep: bool) -> None:
    """A probe of ``pid`` written, then a read through what is kept (in memory with ``keep``,
    else the image in ``folder``): right, and nothing read apart from the one statement."""
    with inv.transaction("test") as tx:
        tx.add_probes([probe(pid, random.Random(3))])
    del reads[:]
    assert statuses(inv, keep=keep, image=folder) == statuses(inv)
    assert reads == [], reads


def test_a_keeping_reader_on_postgres_brings_its_status_up_in_one_statement(
    pg_clean: Any, tmp_path: Path, reads: list[StatusChanges]
) -> None:
    """The history mixed into the mark is taken out again for the server's own comparison: a
    read after a write is the one-statement read (not the mark and the changes read apart),
    for a keeping reader on its session and for a one-shot reader of the image on a new one."""
    conninfo = inventory_database(pg_clean, tmp_path)
    with filled(Inventory.open(tmp_path / "inventory.db", postgres=conninfo)) as inv:
        statuses(inv, keep=True, image=tmp_path)  # every pair read, kept, and the image
        _one_statement(inv, tmp_path, PAIRS[2], reads, keep=True)
    with Inventory.open(tmp_path / "inventory.db", postgres=conninfo) as inv:
        _one_statement(inv, tmp_path, PAIRS[3], reads, keep=False)
