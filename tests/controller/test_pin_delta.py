"""``pin = true`` through real agents: a rotation (a delta: the agent's scoped manifest, the
block it verified kept in memory) leaves pg_hba.conf untouched, a pair declared later is pinned
by the next push, and the block after both is what a whole run writes from every login."""

from __future__ import annotations

import psycopg
import pytest

from meshtui.kinds.postgres import hba as pg_hba
from meshtui.model import State

pytestmark = [pytest.mark.root]

GITEA = "database:app1/gitea->db1/postgres"
GRAFANA = "database:app1/grafana->db1/postgres"
SCOPE = "db1/postgres database"


@pytest.fixture
def mesh(mesh_with_agents, pg, pg_clean, pg_admin_file):
    hba = pg.datadir / "pg_hba.conf"
    text = hba.read_text()
    m = mesh_with_agents(consumers={"app1": ["gitea", "wiki"]}, port=pg.port, admin=pg_admin_file)
    try:
        yield m
    finally:
        hba.write_text(text)
        with psycopg.connect(pg.admin_conninfo(), autocommit=True) as conn:
            conn.execute("SELECT pg_reload_conf()")


def test_a_pinned_rotation_leaves_the_file_and_a_pushed_pair_is_pinned(mesh, pg):
    hba = pg.datadir / "pg_hba.conf"
    mesh.decl.write_text(mesh.decl.read_text().replace("admin = ", "pin = true\nadmin = ", 1))
    with mesh.controller() as ctl:
        ctl.declare(mesh.decl)
        assert ctl.push().ok
        before = hba.stat()
        assert ctl.rotate([GITEA]).ok
        after = hba.stat()
        assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
        mesh.decl.write_text(
            mesh.decl.read_text()
            + '\n[modules."app1/grafana"]\n'
            + 'requires = [{ name = "database", values = { database = "grafana_app1" }, '
            + 'file = "srv/app1/grafana/db.password" }]\n'
        )
        ctl.declare(mesh.decl)
        report = ctl.push()
        assert report.ok, report.behind
        rows = {r.pair: r for r in ctl.status()}
        assert rows[GRAFANA].state is not State.STALE, rows[GRAFANA].reason
        logins = {r.login for r in rows.values()}
    pins = pg_hba.pinned(pg_hba.parse(hba.read_text()).blocks[SCOPE])
    assert set(pins) == logins and set(pins.values()) == {"127.0.0.1"}
    # the block is what a whole run writes from every login
    whole = pg_hba.render(
        pg_hba.Layout(
            pg_hba.parse(hba.read_text()).foreign,
            {SCOPE: pg_hba.block({k: "127.0.0.1" for k in pins})},
        )
    )
    assert hba.read_text() == whole
