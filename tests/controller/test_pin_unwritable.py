"""``pin = true`` when the agent cannot write pg_hba.conf (the shipped unit's ProtectSystem=strict
makes /etc read-only): push, status and doctor must not be green, and push pins the login once
the file can be written again.

The provider's agent runs in a mount namespace of its own in which the cluster's folder is a
read-only bind mount, as systemd would make it; the server itself is not affected.
"""

from __future__ import annotations

import shutil

import psycopg
import pytest

from meshtui.kinds.postgres import hba as pg_hba
from meshtui.model import State

pytestmark = [pytest.mark.root]

GITEA = "database:app1/gitea->db1/postgres"

READ_ONLY = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'


@pytest.fixture
def mesh(mesh_with_agents, pg, pg_clean, pg_admin_file):
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed")
    hba = pg.datadir / "pg_hba.conf"
    text = hba.read_text()
    m = mesh_with_agents(consumers={"app1": ["gitea"]}, port=pg.port, admin=pg_admin_file)
    try:
        yield m
    finally:
        hba.write_text(text)
        with psycopg.connect(pg.admin_conninfo(), autocommit=True) as conn:
            conn.execute("SELECT pg_reload_conf()")


def test_pin_that_cannot_write_pg_hba_is_not_green_and_push_repairs_it(mesh, pg):
    hba = pg.datadir / "pg_hba.conf"
    mesh.wrap["db1"] = ["unshare", "-m", "--propagation", "private", "sh", "-c", READ_ONLY]
    mesh.wrap["db1"].append(str(pg.datadir))
    mesh.start("db1")
    text = mesh.decl.read_text()
    mesh.decl.write_text(text.replace("admin = ", "pin = true\nadmin = ", 1))
    with mesh.controller() as ctl:
        ctl.declare(mesh.decl)
        report = ctl.push()
        assert not report.ok, report
        assert "pg_hba.conf" in report.behind[GITEA], report.behind
        row = {r.pair: r for r in ctl.status()}[GITEA]
        assert row.state is State.STALE and "pg_hba.conf" in row.reason
        assert "ReadWritePaths=" in row.reason
        assert row.consumer_generation == row.generation  # the password itself is set
        probed = mesh.cli("probe")  # the login works, but the pair is not green
        assert probed.returncode == 1 and f"but stale {GITEA}" in probed.stdout, probed.stdout
        assert "pg_hba.conf" in probed.stdout
        found = [p for p in ctl.doctor().problems if p.node == "db1"]
        assert any("ReadWritePaths=" in p.fix for p in found), found
        again = ctl.push()  # still read-only: still not green, and tried again
        assert not again.ok and "pg_hba.conf" in again.behind[GITEA]
    assert "meshtui pin begin" not in hba.read_text()
    said = mesh.agent_logs()  # and the agent said so in its log (journalctl -u meshtui-agent)
    assert "db1/postgres database: provisioner not ok: pg_hba.conf: failed" in said, said
    mesh.wrap.pop("db1")
    mesh.start("db1")  # the unit's ReadWritePaths= now names the folder
    with mesh.controller() as ctl:
        fixed = ctl.push()
        assert fixed.ok, fixed.behind
        login = {r.pair: r for r in ctl.status()}[GITEA].login
        block = pg_hba.parse(hba.read_text()).blocks["db1/postgres database"]
        assert login in pg_hba.pinned(block)
        assert ctl.push().ok and not ctl.push().delivered
        assert not [p for p in ctl.doctor().problems if p.node == "db1"]
