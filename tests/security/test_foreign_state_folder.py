"""Root never works in a controller state folder another user owns.

Attack: the shipped units run ``watch`` and the nightly ``backup`` as the ``meshtui``
user, which owns the controller's state folder. Root running a controller command on that
folder (``meshtui --state /var/lib/meshtui/controller push``) opened ``deliver.lock`` through
whatever that user had put there, following a link, then truncated it and wrote its pid into
it: the folder's owner made root truncate any file on the machine (SQLite's journal beside the
inventory is opened the same way). Real user, real link, the real CLI as root.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fix_mesh import Mesh, MeshFactory, modules
from tests.security.fix_users import Attacker

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a user")


def test_root_refuses_a_state_folder_another_user_owns(
    mesh_factory: MeshFactory, attacker: Attacker, open_tmp: Path
) -> None:
    mesh: Mesh = mesh_factory()
    assert mesh.cli("declare", mesh.write(mesh.spec(modules(["app1/gitea"])))).code == 0
    state = open_tmp / "controller"
    shutil.copytree(mesh.state, state)
    for path in [state, *state.rglob("*")]:
        os.chown(path, attacker.uid, attacker.gid, follow_symlinks=False)
    secret = open_tmp / "root-only"
    secret.mkdir(mode=0o700)
    victim = secret / "precious.conf"
    victim.write_text("root's file, 38 bytes, not meshtui's\n")
    (state / "deliver.lock").unlink(missing_ok=True)
    attacker.run("ln", "-s", victim, state / "deliver.lock")

    for command in (["push"], ["status"]):
        done = subprocess.run(
            [sys.executable, "-m", "meshtui.cli", "--state", str(state), *command],
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
        assert victim.read_text() == "root's file, 38 bytes, not meshtui's\n", command
        assert done.returncode != 0, (command, done.stdout)
        assert str(state) in done.stderr and attacker.name in done.stderr, done.stderr
        assert f"sudo -u {attacker.name}" in done.stderr, done.stderr
    # the folder's own user is not refused (the link is its own business, root's file safe)
    assert victim.read_text() == "root's file, 38 bytes, not meshtui's\n"
