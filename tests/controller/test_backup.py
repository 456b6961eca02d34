"""``meshtui backup`` and ``meshtui restore`` without a lab: what the file holds and hides, and
every refusal (an existing file, a non-empty folder, a wrong passphrase, a truncated or changed
file, a passphrase file others can read), each leaving nothing written."""

from __future__ import annotations

import json
import os
import shutil
import stat
import threading
from pathlib import Path

import pytest

from meshtui import crypto
from meshtui.controller.core import Controller
from tests.fix_mesh import Mesh, modules

PASSPHRASE = "correct horse battery staple"


def secret_file(root: Path, text: str = PASSPHRASE, name: str = "pass") -> Path:
    path = root / name
    path.write_text(text + "\n")
    path.chmod(0o600)
    return path


def declared(mesh: Mesh) -> Path:
    path = mesh.write(mesh.spec(modules(["app1/gitea", "app2/wiki"])))
    res = mesh.cli("declare", path)
    assert res.code == 0, res.err
    return path


def listing(folder: Path) -> list[str]:
    return sorted(os.listdir(folder)) if folder.exists() else []


def test_backup_writes_0600_says_what_it_holds_and_hides_the_keys(mesh: Mesh) -> None:
    declared(mesh)
    target = mesh.root / "nightly.backup"
    res = mesh.cli("backup", target, "--passphrase-file", secret_file(mesh.root), "--json")
    assert res.code == 0, res.err
    got = res.json()
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert got["pairs"] == 2 and got["events"] >= 1 and got["head_seq"] == got["events"]
    assert got["generations"] == {
        "database:app1/gitea->db1/postgres": 1,
        "database:app2/wiki->db1/postgres": 1,
    }
    assert "controller.key" in got["files"] and "inventory.db" in got["files"]
    assert got["kdf"] == {"name": "argon2id", "opslimit": 3, "memlimit": 256 * 2**20}
    raw = target.read_bytes()
    key_text = (mesh.state / "controller.key").read_text()
    signing = key_text.split('"')[1]
    assert signing.encode() not in raw and crypto.unb64(signing) not in raw
    assert b"SQLite format 3" not in raw and b"gitea" not in raw  # the inventory is sealed too
    assert PASSPHRASE.encode() not in raw


def test_backup_into_a_folder_names_a_new_file_each_time(mesh: Mesh) -> None:
    declared(mesh)
    folder = mesh.root / "backups"
    folder.mkdir()
    pw = secret_file(mesh.root)
    made = []
    for _ in range(2):
        res = mesh.cli("backup", folder, "--passphrase-file", pw, "--json")
        assert res.code == 0, res.err
        made.append(Path(res.json()["file"]))
    assert made[0] != made[1] and sorted(folder.iterdir()) == sorted(made)
    assert all(p.name.startswith("meshtui-") and p.name.endswith(".backup") for p in made)


def test_backup_never_replaces_a_file_nor_follows_a_link(mesh: Mesh) -> None:
    declared(mesh)
    there = mesh.root / "there"
    there.write_text("keep me")
    link = mesh.root / "link"
    link.symlink_to(mesh.root / "elsewhere")
    for target in (there, link):
        res = mesh.cli("backup", target, "--passphrase-file", secret_file(mesh.root))
        assert res.code == 2
        assert str(target) in res.err and "never replaces" in res.err
    assert there.read_text() == "keep me"
    assert not (mesh.root / "elsewhere").exists()


def test_passphrase_file_others_can_read_is_refused(mesh: Mesh) -> None:
    declared(mesh)
    loose = secret_file(mesh.root)
    loose.chmod(0o644)
    res = mesh.cli("backup", mesh.root / "b", "--passphrase-file", loose)
    assert res.code == 2 and str(loose) in res.err and "chmod 600" in res.err
    assert PASSPHRASE not in res.err
    assert not (mesh.root / "b").exists()


def test_restore_round_trip_is_a_signed_event_and_the_chain_verifies(mesh: Mesh) -> None:
    declared(mesh)
    target = mesh.root / "b"
    pw = secret_file(mesh.root)
    assert mesh.cli("backup", target, "--passphrase-file", pw).code == 0
    fresh = mesh.root / "fresh"
    res = mesh.run("--state", fresh, "restore", target, "--passphrase-file", pw, "--json")
    assert res.code == 0, res.err
    report = res.json()
    assert report["pairs"] == 2 and report["event"] == report["events"] + 1
    assert {n["node"] for n in report["nodes"]} == {"db1", "app1", "app2"}
    assert all(n["reason"].startswith("not asked") for n in report["nodes"])  # no agents here
    assert stat.S_IMODE((fresh / "controller.key").stat().st_mode) == 0o600
    assert (fresh / "controller.key").read_bytes() == (mesh.state / "controller.key").read_bytes()
    assert stat.S_IMODE((fresh / "inventory.db").stat().st_mode) == 0o600
    res = mesh.run("--state", fresh, "audit", "--verify", "--json")
    assert res.code == 0, res.out + res.err
    with Controller.open(fresh, read_only=True) as ctl:
        last = ctl.inventory.last_event("restore")
        assert last is not None and last["outcome"] == "restored"
        assert last["detail"]["backup_events"] == report["events"]
        proof = ctl.inventory.restore_proof
        assert proof is not None and proof.seq == report["event"]
        assert proof.verifies(crypto.load_public(fresh / "controller.pub", need_seal=False).verify)
        head = ctl.inventory.signed_head()
        assert head is not None and head.restore == proof
        assert sorted(p["id"] for p in ctl.inventory.pairs()) == [
            "database:app1/gitea->db1/postgres",
            "database:app2/wiki->db1/postgres",
        ]


def test_restore_into_a_folder_that_is_not_empty_is_refused_naming_what_is_there(
    mesh: Mesh,
) -> None:
    declared(mesh)
    target, pw = mesh.root / "b", secret_file(mesh.root)
    assert mesh.cli("backup", target, "--passphrase-file", pw).code == 0
    before = {p: p.read_bytes() for p in mesh.state.iterdir() if p.is_file()}
    res = mesh.cli("restore", target, "--passphrase-file", pw)
    assert res.code == 2
    assert "not empty" in res.err and "inventory.db" in res.err and "controller.key" in res.err
    assert {p: p.read_bytes() for p in mesh.state.iterdir() if p.is_file()} == before


@pytest.mark.parametrize("damage", ["passphrase", "truncated", "flipped", "header", "cut-header"])
def test_restore_refuses_a_wrong_passphrase_or_a_damaged_file_and_writes_nothing(
    mesh: Mesh, damage: str
) -> None:
    declared(mesh)
    target, pw = mesh.root / "b", secret_file(mesh.root)
    assert mesh.cli("backup", target, "--passphrase-file", pw).code == 0
    raw = target.read_bytes()
    if damage == "passphrase":
        pw = secret_file(mesh.root, "not the passphrase", "wrong")
    elif damage == "truncated":
        target.write_bytes(raw[: len(raw) - 100])
    elif damage == "flipped":
        middle = len(raw) // 2
        target.write_bytes(raw[:middle] + bytes([raw[middle] ^ 1]) + raw[middle + 1 :])
    elif damage == "header":  # a cheaper key derivation written in: the key changes
        target.write_bytes(raw.replace(b'"opslimit":3', b'"opslimit":1', 1))
    else:
        target.write_bytes(raw[:40])
    fresh = mesh.root / "fresh"
    res = mesh.run("--state", fresh, "restore", target, "--passphrase-file", pw)
    assert res.code == 2, res.out
    assert str(target) in res.err
    if damage in ("passphrase", "truncated", "flipped", "header"):
        assert "wrong passphrase, or the file was truncated or changed" in res.err
    assert "nothing" in res.err or "truncated" in res.err
    assert not fresh.exists()
    empty = mesh.root / "empty"
    empty.mkdir()
    res = mesh.run("--state", empty, "restore", target, "--passphrase-file", pw)
    assert res.code == 2 and listing(empty) == []


def test_backup_while_another_process_commits_is_consistent(mesh: Mesh) -> None:
    """The nightly backup runs while ``watch`` writes: the image is one consistent state."""
    declared(mesh)
    stop = threading.Event()
    wrote = []

    def writer() -> None:
        with Controller.open(mesh.state) as ctl:
            while not stop.is_set():
                wrote.append(ctl.inventory.record("probe", [], {"n": len(wrote)}, "ok")["seq"])

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        while len(wrote) < 5:
            threading.Event().wait(0.01)
        target, pw = mesh.root / "b", secret_file(mesh.root)
        res = mesh.cli("backup", target, "--passphrase-file", pw, "--json")
    finally:
        stop.set()
        thread.join()
    assert res.code == 0, res.err
    held = res.json()["events"]
    assert 5 <= held <= wrote[-1]
    fresh = mesh.root / "fresh"
    assert mesh.run("--state", fresh, "restore", target, "--passphrase-file", pw).code == 0
    res = mesh.run("--state", fresh, "audit", "--verify", "--json")
    assert res.code == 0, res.out
    assert len(json.loads(res.out)["events"]) == held + 1


def test_on_a_terminal_the_passphrase_is_asked_without_echo(mesh: Mesh) -> None:
    """No --passphrase-file: asked twice on the terminal (backup), once (restore), never shown."""
    import pty
    import sys
    import time

    declared(mesh)

    def on_terminal(*args: str | Path, answers: list[str]) -> tuple[int, str]:
        pid, fd = pty.fork()
        if pid == 0:  # the child: the real CLI with the pty as its terminal
            os.execv(sys.executable, [sys.executable, "-m", "meshtui.cli", *map(str, args)])
        seen = b""
        for answer in answers:
            deadline = time.monotonic() + 60
            while b": " not in seen.rsplit(b"\n", 1)[-1] and time.monotonic() < deadline:
                seen += os.read(fd, 1024)
            os.write(fd, answer.encode() + b"\n")
            seen += os.read(fd, 1024)
        while True:
            try:
                chunk = os.read(fd, 1024)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
        _, status = os.waitpid(pid, 0)
        os.close(fd)
        return os.waitstatus_to_exitcode(status), seen.decode(errors="replace")

    target = mesh.root / "asked.backup"
    code, shown = on_terminal(
        "--state", mesh.state, "backup", target, answers=[PASSPHRASE, PASSPHRASE]
    )
    assert code == 0, shown
    assert "backup passphrase:" in shown and PASSPHRASE not in shown
    code, shown = on_terminal(
        "--state", mesh.root / "fresh", "restore", target, answers=[PASSPHRASE]
    )
    assert code == 0, shown
    assert PASSPHRASE not in shown and "restored into" in shown


def test_a_backup_naming_a_path_is_refused_and_nothing_is_written(mesh: Mesh) -> None:
    """Made by someone who knows the passphrase, a payload naming ``../x`` writes nowhere."""
    from meshtui.controller.records.backup import KdfParams, Payload, open_file, seal

    declared(mesh)
    good, pw = mesh.root / "b", secret_file(mesh.root)
    assert mesh.cli("backup", good, "--passphrase-file", pw).code == 0
    payload, _ = open_file(good, PASSPHRASE.encode())
    files = {**payload.files, "../escaped": crypto.b64(b"x")}
    forged = Payload(payload.format, payload.taken_at, payload.inventory, files, payload.held)
    bad = mesh.root / "forged"
    bad.write_bytes(seal(forged, PASSPHRASE.encode(), KdfParams(1, 8 * 2**20)))
    fresh = mesh.root / "deep" / "fresh"
    res = mesh.run("--state", fresh, "restore", bad, "--passphrase-file", pw)
    assert res.code == 2 and "../escaped" in res.err
    assert not fresh.exists() and not (mesh.root / "deep" / "escaped").exists()


def test_a_restored_controller_keeps_its_name_and_its_restore_event_names_it(mesh: Mesh) -> None:
    """The nodes' policies accept a controller by its name: a restore that forgot the name
    (controller.toml) would come back as the host name, refused by every node naming ctl-a."""
    (mesh.state / "controller.toml").write_text('name = "ctl-a"\n')
    declared(mesh)
    target = mesh.root / "b"
    pw = secret_file(mesh.root)
    assert mesh.cli("backup", target, "--passphrase-file", pw).code == 0
    fresh = mesh.root / "fresh"
    res = mesh.run("--state", fresh, "restore", target, "--passphrase-file", pw)
    assert res.code == 0, res.err
    assert (fresh / "controller.toml").read_text() == 'name = "ctl-a"\n'
    with Controller.open(fresh, read_only=True) as ctl:
        assert ctl.fence.controller == "ctl-a"
        last = ctl.inventory.last_event("restore")
        assert last is not None and last["controller"] == "ctl-a"
        head = ctl.inventory.signed_head()
        assert head is not None and head.controller == "ctl-a"


def two_controllers(mesh: Mesh) -> Path:
    """Declare, name this state folder's controller ctl-a and make ctl-b's state folder on
    the same inventory file (two state folders, each its own key); ctl-b's folder."""
    declared(mesh)
    assert mesh.cli("init", "--name", "ctl-a").code == 0
    b = mesh.root / "ctl-b"
    b.mkdir(mode=0o700)
    assert mesh.run("--state", b, "init", "--name", "ctl-b").code == 0
    os.link(mesh.state / "inventory.db", b / "inventory.db")
    return b


def test_restore_accepts_a_head_another_known_controller_signed_and_names_an_unknown_one(
    mesh: Mesh,
) -> None:
    """ctl-a and ctl-b write one inventory (one file, two state folders, each its own key);
    ctl-b appends last. Restoring ctl-a's backup verifies that head with ctl-b's key from the
    target's ``controllers/``; without it the restore is refused naming ctl-b."""
    b = two_controllers(mesh)
    spec = mesh.write(mesh.spec(modules(["app1/gitea"])))
    res = mesh.run("--state", b, "declare", spec)
    assert res.code == 0, res.err
    target, pw = mesh.root / "b.backup", secret_file(mesh.root)
    assert mesh.cli("backup", target, "--passphrase-file", pw).code == 0

    unknown = mesh.root / "unknown"
    res = mesh.run("--state", unknown, "restore", target, "--passphrase-file", pw)
    assert res.code != 0 and "ctl-b" in res.err and "controllers/ctl-b.pub" in res.err, res.err
    assert listing(unknown) == []

    known = mesh.root / "known"
    (known / "controllers").mkdir(parents=True, mode=0o700)
    shutil.copy2(b / "controller.pub", known / "controllers" / "ctl-b.pub")
    res = mesh.run("--state", known, "restore", target, "--passphrase-file", pw)
    assert res.code == 0, res.err
    res = mesh.run("--state", known, "audit", "--verify")
    assert res.code == 0, res.out + res.err
