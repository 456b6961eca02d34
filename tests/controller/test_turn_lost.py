"""A controller whose delivering turn ends mid-rotation (paused past its renew deadline) sends
nothing more: the rotation stops before its next request, the consumer keeps its old working
credential, and the next holder of the turn finishes or rolls the journaled rotation back."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from meshtui.atomic import write_private
from meshtui.errors import LeaseLostError
from tests.controller.test_rotate import GITEA, can_login, login_of, mesh  # noqa: F401

DB = "meshtui_turn_lost"


def share_lease(state: Path, pg) -> None:
    """Point the controller at a PostgreSQL for its lease (and its inventory, controller.toml)."""
    with psycopg.connect(pg.admin_conninfo(), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(DB)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DB)))
    info = psycopg.conninfo.make_conninfo(pg.admin_conninfo(), dbname=DB)
    write_private(state / "lease.conninfo", info.encode())
    (state / "controller.toml").write_text(
        'name = "ctl-a"\n[inventory]\npostgres = "lease.conninfo"\n'
    )


def test_a_turn_lost_mid_rotation_sends_nothing_more(mesh, pg) -> None:  # noqa: F811
    share_lease(mesh.state, pg)
    with mesh.controller() as ctl:  # on PostgreSQL: the inventory there, declared and delivered
        ctl.declare(mesh.decl)
        assert ctl.push().ok
    old = mesh.secret("srv/app1/gitea/db.password")
    login = login_of(mesh, GITEA)
    with mesh.controller() as ctl:

        def pause() -> None:  # a pause (GC, SIGSTOP, a frozen VM) past the renew deadline
            assert ctl.turn is not None and ctl.fence.epoch == ctl.turn.epoch > 0
            ctl.turn.renewed_at -= ctl.turn.numbers.deadline_s + 1

        ctl.faults["after-providers:to"] = pause
        with pytest.raises(LeaseLostError, match="ctl-a no longer holds the deliver turn"):
            ctl.rotate([GITEA])
        assert ctl.turn is None and ctl.fence.epoch == 0  # the turn was given up
        assert ctl.inventory.open_rotations()  # journaled: the next holder finishes it
    assert mesh.secret("srv/app1/gitea/db.password") == old  # the consumer was sent nothing
    result = mesh.cli("push")
    assert result.returncode == 0, result.stdout + result.stderr
    with mesh.controller() as ctl:
        assert not ctl.inventory.open_rotations()
        row = {r.pair: r for r in ctl.status()}[GITEA]
        assert row.consumer_generation == row.provider_generation == row.generation
    assert can_login(pg, login, mesh.secret("srv/app1/gitea/db.password"), "gitea_app1") is True
