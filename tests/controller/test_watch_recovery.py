"""A rotation the dead leader left journaled on the shared inventory is finished or rolled back
by the watch that takes the lead after it, and proved by a probe, never trusted: real agents,
a real PostgreSQL holding the inventory, real ``meshtui watch`` processes."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import textwrap
import time

import psycopg
from psycopg import sql

from meshtui.atomic import write_private
from tests.controller.failover import LEASE, Watches, lease_table
from tests.controller.test_rotate import GITEA, can_login, login_of

DB = "meshtui_shared_inventory"


def test_the_next_leader_finishes_a_rotation_the_dead_one_left(
    mesh_with_agents, pg, pg_clean, pg_admin_file
) -> None:
    mesh = mesh_with_agents(
        consumers={"app1": ["gitea", "wiki"], "app2": ["grafana"]},
        port=pg.port,
        admin=pg_admin_file,
    )
    with psycopg.connect(pg.admin_conninfo(), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DB)))
    info = psycopg.conninfo.make_conninfo(pg.admin_conninfo(), dbname=DB)
    write_private(mesh.state / "inventory.conninfo", info.encode())
    config = '[inventory]\npostgres = "inventory.conninfo"\n' + lease_table(LEASE)
    (mesh.state / "controller.toml").write_text('name = "ctl-a"\n' + config)
    with mesh.controller() as ctl:  # the shared inventory: declared and delivered
        ctl.declare(mesh.decl)
        assert ctl.push().ok
    other = mesh.root / "ctl-b"  # the second machine's state folder (the same key here)
    shutil.copytree(mesh.state, other, ignore=shutil.ignore_patterns("*.db*", "*.lock"))
    (other / "controller.toml").write_text('name = "ctl-b"\n' + config)

    # the leader dies in the middle of a rotation: providers hold the new credential
    script = textwrap.dedent(f"""
        import os, signal
        from meshtui.controller.core import Controller
        ctl = Controller.open({str(mesh.state)!r})
        ctl.faults["after-providers:to"] = lambda: os.kill(os.getpid(), signal.SIGKILL)
        ctl.rotate([{GITEA!r}])
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert done.returncode == -signal.SIGKILL, done.stderr
    with mesh.controller() as ctl:
        assert len(ctl.inventory.open_rotations()) == 1

    watches = Watches()
    try:
        began = time.monotonic()
        watches.start("ctl-b", other)
        (leader,) = watches.wait_roles(30)
        deadline = time.monotonic() + 10 * LEASE["length_s"]
        while time.monotonic() < deadline:
            with mesh.controller() as ctl:
                if not ctl.inventory.open_rotations():
                    break
            time.sleep(0.2)
        took = time.monotonic() - began
        with mesh.controller() as ctl:
            assert ctl.inventory.open_rotations() == [], watches.describe()
            row = {r.pair: r for r in ctl.status()}[GITEA]
            assert row.generation == row.consumer_generation == row.provider_generation
        assert took <= 2 * LEASE["length_s"] + 5, took  # the dead one's deliver turn ran out
    finally:
        watches.stop_all()
    # proved by a live login with the credential the consumer's file holds
    assert (
        can_login(
            pg, login_of(mesh, GITEA), mesh.secret("srv/app1/gitea/db.password"), "gitea_app1"
        )
        is True
    )
    probed = mesh.cli("probe", GITEA)
    assert probed.returncode == 0, probed.stdout + probed.stderr
    with mesh.controller() as ctl:
        assert {r.pair: r for r in ctl.status()}[GITEA].state.value == "working"
