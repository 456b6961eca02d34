"""No live credential left behind: a changed ``file =`` path moves the credential,
and the file the agent wrote at the old path goes (only that file: one the operator replaced,
or a link, stays); until push, status does not say the consumer holds nothing while its file
still works. Real agents, real PostgreSQL."""

from __future__ import annotations

import os

import pytest

GITEA = "database:app1/gitea->db1/postgres"
OLD = 'file = "srv/app1/gitea/db.password"'
NEW = 'file = "srv/app1/gitea/conf/db.password"'


@pytest.fixture
def mesh(mesh_with_agents, pg, pg_clean, pg_admin_file):
    m = mesh_with_agents(consumers={"app1": ["gitea"]}, port=pg.port, admin=pg_admin_file)
    with m.controller() as ctl:
        assert ctl.push().ok
        assert [p.verdict for p in ctl.probe([GITEA])] == ["accepted"]
    return m


def move(mesh) -> None:
    (mesh.root / "srv/app1/gitea/conf").mkdir(mode=0o755)
    mesh.decl.write_text(mesh.decl.read_text().replace(OLD, NEW))
    with mesh.controller() as ctl:
        ctl.declare(mesh.decl)


def test_a_moved_file_leaves_no_credential_behind(mesh):
    old = mesh.root / "srv/app1/gitea/db.password"
    new = mesh.root / "srv/app1/gitea/conf/db.password"
    move(mesh)
    with mesh.controller() as ctl:
        report = ctl.push()
        assert report.ok, report.behind
        row = {r.pair: r for r in ctl.status()}[GITEA]
        assert row.consumer_generation == row.generation
        assert [p.verdict for p in ctl.probe([GITEA])] == ["accepted"]
    assert new.exists() and not old.exists()


def test_status_does_not_say_holds_nothing_while_the_file_works(mesh):
    """An owner that is not a user on the node: the new file cannot be written, the old one
    still logs in, and status says why push fails instead of "holds nothing"."""
    mesh.decl.write_text(mesh.decl.read_text().replace(OLD, OLD + ', owner = "nosuchuser9"'))
    with mesh.controller() as ctl:
        ctl.declare(mesh.decl)
        report = ctl.push()
        assert not report.ok and "nosuchuser9" in report.behind[GITEA]
        row = {r.pair: r for r in ctl.status()}[GITEA]
        assert "holds nothing" not in row.reason and "nosuchuser9" in row.reason, row.reason
        assert [p.verdict for p in ctl.probe([GITEA])] == ["accepted"]  # it still works
        again = ctl.push()  # tried again, still named
        assert not again.ok and "nosuchuser9" in again.behind[GITEA]


def test_a_file_the_operator_replaced_or_a_link_is_not_removed(mesh):
    old = mesh.root / "srv/app1/gitea/db.password"
    target = mesh.root / "elsewhere"
    target.write_text(old.read_text())  # what the link points to holds the credential too
    old.unlink()
    os.symlink(target, old)
    move(mesh)
    with mesh.controller() as ctl:
        ctl.push()
    assert old.is_symlink() and target.exists()  # never followed, never removed
