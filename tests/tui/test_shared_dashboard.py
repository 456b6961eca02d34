"""The dashboard on a shared inventory (PostgreSQL) shows what another controller did within
about a second: its poll looks at the database's data version, off the UI thread."""

from __future__ import annotations

import shutil
import time
from typing import Any

import psycopg
from psycopg import sql

from meshtui.atomic import write_private
from tests.fix_mesh import modules
from tests.tui.helpers import RecordingApp, settle

DB = "meshtui_shared_dashboard"


async def test_another_controllers_declare_shows_within_about_a_second(
    mesh: Any, pg_clean: Any
) -> None:
    with psycopg.connect(pg_clean.admin_conninfo(), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DB)))
    info = psycopg.conninfo.make_conninfo(pg_clean.admin_conninfo(), dbname=DB)
    write_private(mesh.state / "inventory.conninfo", info.encode())
    config = '[inventory]\npostgres = "inventory.conninfo"\n'
    (mesh.state / "controller.toml").write_text('name = "ctl-a"\n' + config)
    first = mesh.cli("declare", mesh.write(mesh.spec(modules(["app1/gitea"]))))
    assert first.code == 0, first.out + first.err
    other = mesh.root / "ctl-b"  # the other machine's state folder, on the same inventory
    shutil.copytree(mesh.state, other)
    (other / "controller.toml").write_text('name = "ctl-b"\n' + config)

    app = RecordingApp(other, poll_seconds=1.0)  # the dashboard's own
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot)
        assert len(app.model.rows) == 1
        more = mesh.cli("declare", mesh.write(mesh.spec(modules(["app1/gitea", "app2/wiki"]))))
        assert more.code == 0, more.out + more.err
        began = time.monotonic()
        while len(app.model.rows) < 2 and time.monotonic() - began < 5:
            await pilot.pause(0.05)
        took = time.monotonic() - began
        assert len(app.model.rows) == 2
        assert took < 1.5, f"another controller's change shown after {took:.2f} s"
