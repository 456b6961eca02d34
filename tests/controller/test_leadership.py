"""``status`` says who leads the controllers of a shared inventory (epoch, seconds left on its
lease by the database's clock), and says so when a controller meant for several machines is
alone on SQLite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psycopg
from psycopg import sql

from meshtui.controller.config import LeaseConfig
from meshtui.controller.core import Controller
from meshtui.controller.turn import Turn, claimant
from meshtui.inventory import lease
from meshtui.inventory.lease import Leases
from meshtui.kinds.postgres.lab import Cluster
from tests.controller.failover import LEASE, controller_folder


def status(folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "meshtui.cli", "--state", str(folder), "status"],
        capture_output=True,
        text=True,
        check=False,
    )


def test_status_names_the_leader_its_epoch_and_the_seconds_left(
    pg_clean: Cluster, tmp_path: Path
) -> None:
    with psycopg.connect(pg_clean.admin_conninfo(), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier("lead")))
    conninfo = psycopg.conninfo.make_conninfo(pg_clean.admin_conninfo(), dbname="lead")
    folder = controller_folder(tmp_path, "ctl-b", conninfo, LEASE)
    Controller.open(folder).close()  # its (empty) inventory
    assert "no leader: no watch has taken the lead yet" in status(folder).stdout
    leases = Leases(conninfo)
    lead = Turn(leases, lease.WATCH, claimant("ctl-a"), "watch", LeaseConfig(length_s=60))
    try:
        assert lead.try_take()
        out = status(folder).stdout
        assert f"leader ctl-a (host {lead.me.host}, pid {lead.me.pid}), epoch 1, " in out
        left = float(out.split("epoch 1, ")[1].split(" s left")[0])
        assert 50 <= left <= 60
        seen = Controller.leadership(folder)
        assert (seen.holder, seen.epoch, seen.shared) == ("ctl-a", 1, True)
    finally:
        lead.release()
        leases.close()
    out = status(folder).stdout
    assert "no leader: ctl-a's lease (epoch 1) ran out" in out, out
    assert "if one runs" in out and "start meshtui watch" in out, out  # none may run at all


def test_a_controller_meant_for_several_machines_alone_on_sqlite_says_so(tmp_path: Path) -> None:
    folder = tmp_path / "ctl"
    folder.mkdir(mode=0o700)
    Controller.open(folder).close()
    assert "HA off" not in status(folder).stdout  # no [lease]: one machine, by choice
    (folder / "controller.toml").write_text('name = "ctl-a"\n[lease]\nlength_s = 15\n')
    out = status(folder).stdout
    assert "HA off: controller.toml has a [lease] table but this inventory is SQLite" in out
