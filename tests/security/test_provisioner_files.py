"""Attack: the provisioner, run by root (``meshtui provision``, or the agent's built-in one), reading
a manifest, its secret files and the admin conninfo file in a folder another user controls.

The manifest's folder, the grants folder below it and the admin file's folder may belong to
the database's OS user. Root must not follow that user's links (a secret "grants/x.secret"
whose grants is a link to root's own folder), must not hang on that user's FIFO, and must not
take a conninfo that user wrote (it could point root's libpq at root's ~/.pgpass).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from meshtui.crypto import secret_digest
from meshtui.kinds.postgres.lab import Cluster
from tests.security.fix_users import Attacker

HANG_S = 20.0


def reconcile_as_root(manifest: Path, admin: Path) -> tuple[str, float]:
    """``reconcile`` in a child process (it may hang): what it said, or "HUNG"."""
    code = textwrap.dedent(
        f"""
        import json, sys
        from pathlib import Path
        from meshtui.errors import MeshtuiError
        from meshtui.provisioner.harness import reconcile
        try:
            report = reconcile(Path({str(manifest)!r}), Path({str(admin)!r}))
        except MeshtuiError as exc:
            print("REFUSED", exc)
        else:
            print("REPORT", json.dumps(report.as_dict()))
        """
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=HANG_S,
            env={**os.environ, "PYTHONPATH": os.getcwd()},
        )
    except subprocess.TimeoutExpired:
        return "HUNG", HANG_S
    assert done.returncode == 0, done.stderr
    return done.stdout.strip(), 0.0


def manifest_doc(secret: str, digest: str) -> dict[str, object]:
    return {
        "version": 1,
        "provision": "database",
        "provider": "db1/postgres",
        "serial": 1,
        "consumers": [
            {
                "as": "gitea_app1_atk",
                "node": "app1",
                "module": "gitea",
                "at": "127.0.0.1",
                "secret": secret,
                "digest": digest,
            }
        ],
    }


def attacker_folder(attacker: Attacker, base: Path) -> Path:
    """The database user's folder, as the agent's operator might have pointed `receives` at."""
    folder = base / "db"
    folder.mkdir()
    os.chown(folder, attacker.uid, attacker.gid)
    folder.chmod(0o755)
    return folder


def test_a_fifo_as_a_secret_file_does_not_hang_root(
    pg_clean: Cluster, attacker: Attacker, open_tmp: Path
) -> None:
    folder = attacker_folder(attacker, open_tmp)
    doc = manifest_doc("app1.gitea.secret", secret_digest(b"x" * 44))
    (open_tmp / "m.json").write_text(json.dumps(doc))
    attacker.run("cp", open_tmp / "m.json", folder / "mesh.json")
    attacker.run("mkfifo", folder / "app1.gitea.secret")
    admin = pg_clean.write_admin_file(open_tmp / "admin.conninfo")
    said, _ = reconcile_as_root(folder / "mesh.json", admin)
    assert said.startswith("REFUSED"), said
    assert str(folder) in said and attacker.name in said


def test_root_does_not_follow_the_users_link_to_its_own_secret(
    pg_clean: Cluster, attacker: Attacker, open_tmp: Path
) -> None:
    private = open_tmp / "root-only"
    private.mkdir(mode=0o700)
    (private / "token").write_bytes(b"root's own secret, never the user's")
    folder = attacker_folder(attacker, open_tmp)
    doc = manifest_doc("grants/token", secret_digest((private / "token").read_bytes()))
    (open_tmp / "m.json").write_text(json.dumps(doc))
    attacker.run("cp", open_tmp / "m.json", folder / "mesh.json")
    attacker.run("ln", "-s", private, folder / "grants")
    admin = pg_clean.write_admin_file(open_tmp / "admin.conninfo")
    said, _ = reconcile_as_root(folder / "mesh.json", admin)
    assert '"created"' not in said, "root read its own file through the user's link"
    assert said.startswith("REFUSED"), said


def test_an_admin_file_the_user_controls_is_not_taken(
    pg_clean: Cluster, attacker: Attacker, open_tmp: Path
) -> None:
    mine = open_tmp / "root"
    mine.mkdir(mode=0o700)
    secret = b"s" * 44
    (mine / "app1.gitea.secret").write_bytes(secret)
    (mine / "mesh.json").write_text(
        json.dumps(manifest_doc("app1.gitea.secret", secret_digest(secret)))
    )
    folder = attacker_folder(attacker, open_tmp)
    attacker.run("mkfifo", "-m", "600", folder / "admin.conninfo")
    said, _ = reconcile_as_root(mine / "mesh.json", folder / "admin.conninfo")
    assert said.startswith("REFUSED"), said
    assert str(folder) in said
    # a regular 0600 file the user wrote: root would hand its libpq whatever the user wants
    attacker.run("rm", folder / "admin.conninfo")
    (open_tmp / "a").write_text(pg_clean.admin_conninfo())
    attacker.run("cp", open_tmp / "a", folder / "admin.conninfo")
    attacker.run("chmod", "600", folder / "admin.conninfo")
    said, _ = reconcile_as_root(mine / "mesh.json", folder / "admin.conninfo")
    assert said.startswith("REFUSED"), said
    assert attacker.name in said
