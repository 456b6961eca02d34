"""The state folder a new operator meets: a command run on a folder that holds no
controller key says so, names the folder and what to do, and creates nothing; a lock file left
by a root-run command does not break the watch unit's user with a traceback."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fix_mesh import Mesh, Runner, modules
from tests.passwd import account


@pytest.mark.parametrize("command", [["declare", "mesh.toml"], ["push"], ["doctor"], ["watch"]])
def test_a_folder_without_a_controller_key_is_refused_and_left_empty(
    tmp_path: Path, run_cli: Runner, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MESHTUI_STATE", raising=False)
    (tmp_path / "mesh.toml").write_text("[nodes.db1\n")  # not even valid TOML
    res = run_cli(*command)  # no --state: ./state
    assert res.code == 2, res.err
    assert "state" in res.err and "controller.key" in res.err
    assert (
        "--state" in res.err
        and "MESHTUI_STATE" in res.err
        and "meshtui --state DIR init" in res.err
    )
    assert str(tmp_path / "state") in res.err  # the folder, absolute
    assert "Traceback" not in res.err
    assert not (tmp_path / "state").exists()


def test_an_existing_inventory_without_a_key_still_reads(mesh: Mesh) -> None:
    mesh.cli("declare", mesh.write(mesh.spec(modules(["app1/gitea"]))))
    (mesh.state / "controller.key").unlink()
    assert mesh.cli("status").code == 0  # an audit copy, say: reading needs no key
    res = mesh.cli("push")
    assert res.code == 2 and "controller.key" in res.err, res.err


@pytest.fixture
def unit_user() -> Iterator[str]:
    name = f"mtwatch{os.getpid() % 100000}"
    account("useradd", "-M", "-N", name)
    try:
        yield name
    finally:
        account("userdel", name, check=False)


@pytest.mark.root
def test_a_lock_file_left_by_root_is_a_clear_error_for_the_units_user(
    mesh: Mesh, unit_user: str
) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to make a user")
    mesh.cli("declare", mesh.write(mesh.spec(modules(["app1/gitea"]))))
    base = Path(tempfile.mkdtemp(prefix="meshtui-unit-"))  # pytest's own is root's alone
    base.chmod(0o711)
    state = base / "controller"
    shutil.copytree(mesh.state, state)
    shutil.chown(state, unit_user)
    for path in state.rglob("*"):
        shutil.chown(path, unit_user)
    lock = state / "deliver.lock"
    lock.unlink(missing_ok=True)
    lock.write_bytes(b"")  # what one `meshtui push` run as root leaves
    os.chown(lock, 0, 0)
    lock.chmod(0o600)
    python = shutil.which("python3", path="/usr/bin:/bin")
    if python is None:
        pytest.skip("no system python3 another user may run")
    # this interpreter may live in root's home: the system's, with this checkout's packages
    paths = [str(Path(__file__).parents[1]), *(p for p in sys.path if p.endswith("-packages"))]
    done = subprocess.run(
        ["runuser", "-u", unit_user, "--", "env", f"PYTHONPATH={':'.join(paths)}", python,
         "-m", "meshtui.cli", "--state", str(state), "push"],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    shutil.rmtree(base)
    assert done.returncode in (1, 2), done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert str(lock) in done.stderr and "chown" in done.stderr, done.stderr
