"""The CLI's init / declare / status / audit / host init, as a new operator uses them."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shlex
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from meshtui.inventory import SCHEMA_VERSION
from tests.fix_mesh import Mesh, Runner, modules

EIGHT = ["gitea", "keycloak", "grafana", "wiki", "chat", "ci", "registry", "metrics"]


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_new_operator_from_init_to_audit(
    tmp_path: Path, run_cli: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MESHTUI_STATE", raising=False)
    assert run_cli("--state", "S", "init").code == 0
    for name in ("db1", "app1", "app2"):
        res = run_cli(
            "host",
            "init",
            "--name",
            name,
            "--state",
            f"N/{name}",
            "--controller",
            "S/controller.pub",
        )
        assert res.code == 0, res.err
        assert f"N/{name}/node.pub" in res.out
    lines = []
    for name, last in (("db1", 2), ("app1", 3), ("app2", 4)):
        lines += [
            f"[nodes.{name}]",
            f'address = "10.213.0.{last}"',
            f'agent = "unix:/run/meshtui/{name}.sock"',
            f'keys = "N/{name}/node.pub"',
        ]
    lines += [
        '[modules."db1/postgres"]',
        'provides = [{ name = "database", port = 5432 }]',
        'receives = { database = "/var/lib/meshtui/db1/postgres/mesh.json" }',
        'grants = { database = "/var/lib/meshtui/db1/postgres/grants" }',
        'admin = "/var/lib/meshtui/db1/postgres/admin.conninfo"',
    ]
    for m in EIGHT:
        lines += [
            f'[modules."app1/{m}"]',
            f'requires = [{{ name = "database", values = {{ database = "{m}" }}, '
            f'file = "/etc/{m}/db.password", reload = ["systemctl", "reload", "{m}"] }}]',
        ]
    Path("mesh.toml").write_text("\n".join(lines) + "\n")
    res = run_cli("--state", "S", "declare", "mesh.toml")
    assert res.code == 0, res.err
    assert "8 new" in res.out and "run meshtui push" in res.out
    res = run_cli("--state", "S", "status", "--json")
    assert res.code == 0
    assert len({r["login"] for r in res.json()}) == 8
    res = run_cli("--state", "S", "audit", "--list")
    assert res.code == 0 and " declare " in res.out
    res = run_cli("--state", "S", "audit", "--verify")
    assert res.code == 0 and "audit chain verified: 1 events" in res.out
    res = run_cli("--state", "S", "audit", "--export", "csv")
    assert res.code == 0 and res.out.startswith("seq,at,operator")
    res = run_cli("--state", "S", "audit", "--json")
    assert res.code == 0 and res.json()[0]["kind"] == "declare"


def test_the_state_folder_comes_from_meshtui_state(
    mesh: Mesh, run_cli: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    mesh.cli("declare", mesh.write(mesh.spec(modules(["app1/gitea"]))))
    monkeypatch.setenv("MESHTUI_STATE", str(mesh.state))
    res = run_cli("status", "--json")
    assert res.code == 0 and len(res.json()) == 1


def test_host_init_refuses_bad_names_and_a_second_owner(tmp_path: Path, run_cli: Runner) -> None:
    assert run_cli("--state", tmp_path / "S", "init").code == 0
    pub = tmp_path / "S" / "controller.pub"
    res = run_cli(
        "host", "init", "--name", "n" * 70, "--state", tmp_path / "N", "--controller", pub
    )
    assert res.code == 2 and "not allowed" in res.err
    assert (
        run_cli(
            "host", "init", "--name", "db1", "--state", tmp_path / "N", "--controller", pub
        ).code
        == 0
    )
    res = run_cli("host", "init", "--name", "db2", "--state", tmp_path / "N", "--controller", pub)
    assert res.code == 2 and "already belongs to node 'db1'" in res.err
    res = run_cli(
        "host",
        "init",
        "--name",
        "db3",
        "--state",
        tmp_path / "M",
        "--controller",
        tmp_path / "none.pub",
    )
    assert res.code == 2 and "none.pub" in res.err


def test_status_lists_pairs_with_holders(mesh: Mesh) -> None:
    mesh.cli("declare", mesh.write(mesh.spec(modules(["app1/gitea"]))))
    res = mesh.cli("status")
    assert res.code == 0
    assert "database:app1/gitea->db1/postgres" in res.out
    assert (
        "holders: app1/gitea file /srv/app1/gitea/database.password; db1/postgres login" in res.out
    )
    assert res.out.rstrip().endswith("1 pairs")
    res = mesh.cli("status", "database:app1/nope->db1/postgres")
    assert res.code == 2 and "no pair" in res.err


def test_status_without_an_inventory_is_a_clear_error(tmp_path: Path, run_cli: Runner) -> None:
    res = run_cli("--state", tmp_path / "empty", "status")
    assert res.code == 1 and "no inventory here" in res.err and "Traceback" not in res.err
    assert not (tmp_path / "empty").exists()


def test_a_newer_inventory_is_a_clear_error(mesh: Mesh) -> None:
    mesh.cli("declare", mesh.write(mesh.spec(modules(["app1/gitea"]))))
    with contextlib.closing(sqlite3.connect(mesh.inventory)) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    for args in (["status"], ["declare", mesh.root / "mesh.toml"], ["audit", "--verify"]):
        res = mesh.cli(*args)
        assert res.code == 1 and "upgrade meshtui" in res.err, res.err


# ---------------------------------------------------------------------------- audit --verify


def _audited(mesh: Mesh) -> None:
    """Four declare events."""
    for consumers in (["app1/a"], ["app1/a", "app1/b"], ["app1/b"], ["app1/a", "app1/b", "app2/c"]):
        assert mesh.cli("declare", mesh.write(mesh.spec(modules(consumers)))).code == 0
    res = mesh.cli("audit", "--verify")
    assert res.code == 0 and "4 events" in res.out


def _sql(mesh: Mesh, *statements: str) -> None:
    with contextlib.closing(sqlite3.connect(mesh.inventory, isolation_level=None)) as conn:
        for s in statements:
            conn.execute(s)


SWAP = [
    "CREATE TEMP TABLE t AS SELECT * FROM audit WHERE seq IN (2, 3)",
    "UPDATE audit SET at = (SELECT at FROM t WHERE seq = 3), detail = (SELECT detail FROM t WHERE"
    " seq = 3), pairs = (SELECT pairs FROM t WHERE seq = 3), prev = (SELECT prev FROM t WHERE seq"
    " = 3), hash = (SELECT hash FROM t WHERE seq = 3) WHERE seq = 2",
    "UPDATE audit SET at = (SELECT at FROM t WHERE seq = 2), detail = (SELECT detail FROM t WHERE"
    " seq = 2), pairs = (SELECT pairs FROM t WHERE seq = 2), prev = (SELECT prev FROM t WHERE seq"
    " = 2), hash = (SELECT hash FROM t WHERE seq = 2) WHERE seq = 3",
]


@pytest.mark.parametrize(
    ("statements", "named"),
    [
        (["UPDATE audit SET outcome = 'failed' WHERE seq = 2"], "event 2: its content was edited"),
        (["DELETE FROM audit WHERE seq = 2"], "expected event 2 here, found 3"),
        (["DELETE FROM audit WHERE seq = 4"], "event 4: the newest events were deleted"),
        (SWAP, "event 2: does not link"),
    ],
    ids=["edited", "deleted-middle", "deleted-last", "swapped"],
)
def test_audit_verify_exits_1_and_names_the_first_bad_event(
    mesh: Mesh, statements: list[str], named: str
) -> None:
    _audited(mesh)
    _sql(mesh, *statements)
    res = mesh.cli("audit", "--verify")
    assert res.code == 1
    assert "audit chain BROKEN at" in res.err and named in res.err, res.err
    res = mesh.cli("audit", "--verify", "--json")
    assert res.code == 1
    assert res.json()["verified"] is False and res.json()["bad_event"] in (2, 3, 4)


def test_a_rewritten_chain_fails_without_the_controller_key(mesh: Mesh) -> None:
    """Someone who can write the file edits event 3 and rebuilds every later hash and the head:
    the chain links again, but the head is no longer signed by the controller."""
    from meshtui.inventory import event_hash

    _audited(mesh)
    with contextlib.closing(sqlite3.connect(mesh.inventory, isolation_level=None)) as conn:
        conn.row_factory = sqlite3.Row
        conn.execute("UPDATE audit SET outcome = 'forged' WHERE seq = 3")
        prev = conn.execute("SELECT hash FROM audit WHERE seq = 2").fetchone()[0]
        for row in conn.execute("SELECT * FROM audit WHERE seq >= 3 ORDER BY seq").fetchall():
            digest = event_hash(prev, dict(row))
            conn.execute(
                "UPDATE audit SET prev = ?, hash = ? WHERE seq = ?", (prev, digest, row["seq"])
            )
            prev = digest
        conn.execute("UPDATE audit_head SET hash = ?", (prev,))
    res = mesh.cli("audit", "--verify")
    assert res.code == 1
    assert "not signed by the controller key" in res.err, res.err


def test_init_after_declare_signs_the_head(tmp_path: Path, mesh: Mesh) -> None:
    _audited(mesh)
    (mesh.state / "controller.key").unlink()
    (mesh.state / "controller.pub").unlink()
    assert mesh.cli("init").code == 0  # new keys: the head is re-signed, on record
    res = mesh.cli("audit", "--verify")
    assert res.code == 0 and "5 events" in res.out, res.out + res.err


# ---------------------------------------------------------------------------- read-only


def test_read_only_flag_refuses_declare_and_still_shows_status(mesh: Mesh) -> None:
    path = mesh.write(mesh.spec(modules(["app1/gitea"])))
    assert mesh.cli("declare", path).code == 0
    before = sha(mesh.inventory)
    res = mesh.run(
        "--state", mesh.state, "--read-only", "declare", mesh.write(mesh.spec(modules(["app1/x"])))
    )
    assert res.code == 1
    assert "open read-only" in res.err and "Traceback" not in res.err
    res = mesh.run("--state", mesh.state, "--read-only", "status", "--json")
    assert res.code == 0 and len(res.json()) == 1
    res = mesh.run("--state", mesh.state, "--read-only", "audit", "--verify")
    assert res.code == 0
    assert sha(mesh.inventory) == before


def _read_only_mount_works() -> str | None:
    if shutil.which("unshare") is None or os.geteuid() != 0:
        return "needs root and unshare for a read-only bind mount"
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", "mount --bind /tmp /tmp && mount -o remount,bind,ro /tmp"],
        capture_output=True,
        check=False,
    )
    return None if probe.returncode == 0 else "cannot make a read-only bind mount here"


def _on_read_only_state(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run meshtui with ``state`` mounted read-only in a private mount namespace."""
    cmd = " ".join(
        shlex.quote(a) for a in [sys.executable, "-m", "meshtui.cli", "--state", str(state), *args]
    )
    script = (
        f"mount --bind {shlex.quote(str(state))} {shlex.quote(str(state))} && "
        f"mount -o remount,bind,ro {shlex.quote(str(state))} && exec {cmd}"
    )
    return subprocess.run(
        ["unshare", "-m", "sh", "-c", script],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


@pytest.mark.root
def test_status_and_audit_work_on_a_read_only_filesystem(mesh: Mesh) -> None:
    why = _read_only_mount_works()
    if why:
        pytest.skip(why)
    path = mesh.write(mesh.spec(modules(["app1/gitea", "app2/gitea"])))
    assert mesh.cli("declare", path).code == 0
    assert sorted(p.name for p in mesh.state.iterdir()) == [
        "controller.key",
        "controller.pub",
        "deliver.lock",
        "inventory.db",
    ], "a clean close leaves no -wal or -shm"
    before = sha(mesh.inventory)
    res = _on_read_only_state(mesh.state, "status", "--json")
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    assert len(json.loads(res.stdout)) == 2
    res = _on_read_only_state(mesh.state, "audit", "--verify")
    assert res.returncode == 0 and "verified: 1 events" in res.stdout, res.stderr
    res = _on_read_only_state(mesh.state, "declare", str(path))
    assert res.returncode == 1, res.stderr
    assert "Traceback" not in res.stderr and "read-only" in res.stderr, res.stderr
    assert sha(mesh.inventory) == before


def test_the_commands_name_the_labs_own_inventory_as_the_lab_does() -> None:
    """The hint after a failed open knows the lab's inventory by the names the lab gives it
    (kept apart so that no command imports the lab)."""
    from meshtui.cli import context
    from meshtui.lab import mesh, shared_inventory

    assert (context.LAB_FOLDER, context.LAB_CONNINFO, context.LAB_SERVER) == (
        mesh.LAB,
        shared_inventory.CONNINFO,
        shared_inventory.FOLDER,
    )
    assert shared_inventory._site(Path("/lab")).folder == Path(
        "/lab", context.LAB_SERVER, context.LAB_DATA
    )
