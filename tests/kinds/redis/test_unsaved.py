"""A failed ACL SAVE is said, and the next run saves even when nothing else changed.

The aclfile's folder is made immutable (``chattr +i``: even root cannot create the temporary
file ACL SAVE writes), so the real ACL SAVE of a real Redis fails.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from meshtui.errors import ProvisionError
from meshtui.kinds.redis import lab as lab_redis
from meshtui.kinds.redis.adapter import UNSAVED_USER, RedisAdapter
from meshtui.provisioner.harness import inspect

from .conftest import RMesh, client_as, outcomes

if shutil.which("chattr") is None:
    pytest.skip("chattr is not installed (e2fsprogs)", allow_module_level=True)


@contextmanager
def immutable(folder: Path) -> Iterator[None]:
    done = subprocess.run(["chattr", "+i", str(folder)], capture_output=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"chattr +i does not work here: {done.stderr.decode().strip()}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True)


def saves(rmesh: RMesh) -> int:
    with rmesh.redis() as admin:
        return int(admin.info("commandstats").get("cmdstat_acl|save", {}).get("calls", 0))


def sha(rmesh: RMesh, node: str, module: str) -> str:
    return hashlib.sha256(rmesh.password(node, module).encode()).hexdigest()


def test_a_failed_acl_save_is_retried_by_the_next_idle_run(rmesh: RMesh) -> None:
    rmesh.add("app1", "worker")
    rmesh.add("app2", "web")
    assert rmesh.reconcile().ok
    rmesh.rotate("app1", "worker")
    with immutable(rmesh.server.aclfile.parent):
        with pytest.raises(ProvisionError, match="ACL SAVE failed") as failed:
            rmesh.reconcile()
        assert "the next run retries the save" in str(failed.value)
        # the rotation holds in memory, not in the aclfile
        assert sha(rmesh, "app1", "worker") not in rmesh.server.aclfile.read_text()
        assert rmesh.can_auth("app1", "worker")
        # a read-only inspect meanwhile writes nothing, not even the retried save
        before = saves(rmesh)
        inspect(rmesh.manifest, rmesh.admin, factory=RedisAdapter)
        assert saves(rmesh) == before
    report = rmesh.reconcile()  # nothing changed since: every login is unchanged...
    assert set(outcomes(report).values()) == {"unchanged"}, report.lines()
    text = rmesh.server.aclfile.read_text()  # ...and yet the rotation is saved now
    assert sha(rmesh, "app1", "worker") in text
    assert UNSAVED_USER not in text
    with rmesh.redis() as admin:
        assert UNSAVED_USER not in admin.acl_users()
    before = saves(rmesh)
    assert set(outcomes(rmesh.reconcile()).values()) == {"unchanged"}
    assert saves(rmesh) == before  # saved once; later idle runs write nothing
    rmesh.server.stop()
    rmesh.server.start()
    assert rmesh.can_auth("app1", "worker")


def test_the_unsaved_mark_is_no_login(rmesh: RMesh) -> None:
    rmesh.add("app1", "worker", login=UNSAVED_USER)
    report = rmesh.reconcile()
    assert outcomes(report)[UNSAVED_USER] == "refused", report.lines()
    with rmesh.redis() as admin:
        assert UNSAVED_USER not in admin.acl_users()
    assert lab_redis.ADMIN_USER != UNSAVED_USER


def test_a_hand_made_user_of_the_marks_name_is_left_alone(rmesh: RMesh) -> None:
    """The failed-save mark never resets, disables or deletes a user meshtui did not make."""
    with rmesh.redis() as admin:
        admin.execute_command(
            "ACL", "SETUSER", UNSAVED_USER, "on", ">hand-made-password", "~reports:*", "+@read"
        )
        before = admin.execute_command("ACL", "GETUSER", UNSAVED_USER)
    rmesh.add("app1", "worker")
    with (
        immutable(rmesh.server.aclfile.parent),
        pytest.raises(ProvisionError, match="ACL SAVE failed") as failed,
    ):
        rmesh.reconcile()
    with rmesh.redis() as admin:
        assert admin.execute_command("ACL", "GETUSER", UNSAVED_USER) == before
    assert UNSAVED_USER in str(failed.value)  # says why the next run may not retry
    hand_made = client_as(rmesh.server, UNSAVED_USER, "hand-made-password")
    try:
        assert hand_made.get("reports:x") is None  # it still logs in and reads
    finally:
        hand_made.close()
    assert rmesh.reconcile().ok  # a later run (the save works again) deletes nothing of it
    with rmesh.redis() as admin:
        assert admin.execute_command("ACL", "GETUSER", UNSAVED_USER) == before
        admin.execute_command("ACL", "DELUSER", UNSAVED_USER)
