"""Managed PostgreSQL. The admin is not a superuser but has CREATEROLE and CREATEDB
(on 16+ the creating role gets ADMIN OPTION; on 15 CREATEROLE alone may alter any
non-superuser role). Every rule holds: only roles it made, only verifiers, data kept on
removal, drift repaired ("set every time"), and what it cannot do is said."""

from __future__ import annotations

import psycopg
import pytest

from meshtui.contracts.adapter import Scope
from meshtui.kinds.postgres.adapter import PostgresAdapter
from meshtui.kinds.postgres.catalog import held_name
from meshtui.model import Sessions
from tests.provisioner.conftest import PROVIDER, Mesh, outcomes, server_version

ADMIN_PASSWORD = "managed-admin-pw-1"


@pytest.fixture
def managed(mesh: Mesh) -> Mesh:
    """The mesh, provisioned by ``meshadmin`` (CREATEROLE CREATEDB, no superuser) over TCP."""
    with mesh.admin_conn() as conn:
        conn.execute(f"CREATE ROLE meshadmin LOGIN CREATEROLE CREATEDB PASSWORD '{ADMIN_PASSWORD}'")
    mesh.admin.write_text(
        f"host=127.0.0.1 port={mesh.cluster.port} user=meshadmin"
        f" password={ADMIN_PASSWORD} dbname=postgres\n"
    )
    return mesh


def test_managed_admin_keeps_every_rule(managed: Mesh) -> None:
    mesh = managed
    with mesh.admin_conn() as conn:
        conn.execute("CREATE ROLE handmade LOGIN PASSWORD 'Handmade-1'")
    mesh.add("app1", "gitea", database="gitea")
    mesh.add("app2", "wiki", database="wiki")
    mesh.add("app3", "x", login="handmade")
    report = mesh.reconcile()
    assert outcomes(report) == {
        "gitea_app1_x": "created",
        "wiki_app2_x": "created",
        "handmade": "refused",
    }
    gitea, wiki = mesh.password("app1", "gitea"), mesh.password("app2", "wiki")
    assert mesh.can_login("gitea_app1_x", gitea, "gitea")
    assert mesh.can_login("handmade", "Handmade-1")  # a role it did not make: untouched
    with pytest.raises(psycopg.OperationalError, match="permission denied for database"):
        mesh.connect_as("wiki_app2_x", wiki, "gitea")
    # it cannot read pg_authid: every run sets every password again ("set every time"),
    # and the report says so
    again = mesh.reconcile()
    assert outcomes(again)["gitea_app1_x"] == "updated"
    assert any("cannot read pg_authid" in line for line in again.lines())

    # drift by a DBA is repaired by the next run
    with mesh.admin_conn() as conn:
        conn.execute("ALTER ROLE gitea_app1_x PASSWORD 'typed-by-hand'")
    assert not mesh.can_login("gitea_app1_x", gitea, "gitea")
    assert outcomes(mesh.reconcile())["gitea_app1_x"] == "updated"
    assert mesh.can_login("gitea_app1_x", gitea, "gitea")
    assert not mesh.can_login("gitea_app1_x", "typed-by-hand", "gitea")

    # rotation
    mesh.rotate("app2", "wiki")
    mesh.reconcile()
    assert mesh.can_login("wiki_app2_x", mesh.password("app2", "wiki"), "wiki")
    assert not mesh.can_login("wiki_app2_x", wiki, "wiki")

    # removal ends its sessions and keeps its data; a returning login gets it back
    session = mesh.connect_as("gitea_app1_x", gitea, "gitea")
    session.execute("CREATE TABLE issues AS SELECT 7 AS id")
    session.commit()
    mesh.drop("app1", "gitea")
    report = mesh.reconcile()
    assert outcomes(report)["gitea_app1_x"] == "removed", report.lines()
    with pytest.raises(psycopg.OperationalError):
        session.execute("SELECT 1")
    session.close()
    assert mesh.db_owner("gitea") == held_name("gitea_app1_x")
    mesh.add("app1", "gitea", login="gitea_app1_x", database="gitea")
    assert outcomes(mesh.reconcile())["gitea_app1_x"] == "created"
    with mesh.connect_as("gitea_app1_x", mesh.password("app1", "gitea"), "gitea") as conn:
        assert conn.execute("SELECT id FROM issues").fetchone() == (7,)
    assert mesh.can_login("handmade", "Handmade-1")


def test_managed_admin_says_what_it_cannot_do(managed: Mesh) -> None:
    mesh = managed
    conninfo = mesh.admin.read_text().strip()
    with PostgresAdapter(conninfo, Scope(PROVIDER, "database")) as adapter:
        assert not adapter.superuser
        assert any("cannot read pg_authid" in line for line in adapter.limits)
    # no CREATEDB: a database cannot be made, and that is the consumer's outcome
    with mesh.admin_conn() as conn:
        conn.execute("ALTER ROLE meshadmin NOCREATEDB")
    mesh.add("app1", "gitea", database="gitea")
    report = mesh.reconcile()
    (only,) = report.outcomes
    assert only.outcome == "refused" and "has no CREATEDB" in only.reason


def test_managed_admin_sends_no_verifier_a_log_would_keep(managed: Mesh) -> None:
    """log_statement=all, which this admin cannot lower: no password is set, and it says why;
    once a superuser grants it SET on that parameter, passwords are set and nothing leaks."""
    mesh = managed
    log = mesh.cluster.log_path
    offset = log.stat().st_size
    mesh.add("app1", "gitea")
    try:
        mesh.cluster.set_config(log_statement="all", log_min_error_statement="debug5")
        report = mesh.reconcile()
        (only,) = report.outcomes
        assert only.outcome == "refused"
        assert "log_statement=all" in only.reason and "GRANT SET ON PARAMETER" in only.reason
        with mesh.admin_conn() as conn:
            conn.execute("GRANT SET ON PARAMETER log_statement TO meshadmin")
        assert outcomes(mesh.reconcile()) == {"gitea_app1_x": "created"}
        # a failing write, with every error's statement logged
        mesh.cluster.set_config(default_transaction_read_only="on")
        mesh.rotate("app1", "gitea")
        report = mesh.reconcile()
        assert outcomes(report) == {"gitea_app1_x": "failed"}
    finally:
        mesh.cluster.set_config(
            log_statement=None, log_min_error_statement=None, default_transaction_read_only=None
        )
        with mesh.admin_conn() as conn:
            conn.execute("REVOKE SET ON PARAMETER log_statement FROM meshadmin")
    text = log.read_bytes()[offset:].decode("utf-8", "replace")
    assert "meshtui_password" in text  # the admin's statements were logged ...
    assert "read-only transaction" in text
    assert "SCRAM-SHA-256$" not in text  # ... and never a verifier
    assert mesh.password("app1", "gitea") not in text


def test_a_second_admin_on_the_same_server(mesh: Mesh) -> None:
    """Logins a superuser admin made, then a CREATEROLE admin: on 16+ it holds no ADMIN OPTION
    on them and says so (nothing changes); on 15, CREATEROLE alone may alter them."""
    mesh.add("app1", "gitea")
    mesh.reconcile()
    password = mesh.password("app1", "gitea")
    with mesh.admin_conn() as conn:
        conn.execute(f"CREATE ROLE meshadmin LOGIN CREATEROLE PASSWORD '{ADMIN_PASSWORD}'")
    mesh.admin.write_text(
        f"host=127.0.0.1 port={mesh.cluster.port} user=meshadmin"
        f" password={ADMIN_PASSWORD} dbname=postgres\n"
    )
    mesh.rotate("app1", "gitea")
    (only,) = mesh.reconcile().outcomes
    if server_version(mesh.cluster) >= 160000:
        assert only.outcome == "failed" and "has no ADMIN OPTION" in only.reason
        assert mesh.can_login("gitea_app1_x", password)
    else:
        assert only.outcome == "updated"
        assert mesh.can_login("gitea_app1_x", mesh.password("app1", "gitea"))


def test_managed_admin_ends_a_rotated_logins_old_sessions(managed: Mesh) -> None:
    """A CREATEROLE admin may signal only its roles' backends: it acts as the login's owner
    first, as removal does, and ends them (not the admin's own session, not another login's)."""
    mesh = managed
    mesh.add("app1", "gitea", database="gitea")
    mesh.add("app2", "wiki", database="wiki")
    mesh.reconcile()
    old = mesh.password("app1", "gitea")
    session = mesh.connect_as("gitea_app1_x", old, "gitea")
    bystander = mesh.connect_as("wiki_app2_x", mesh.password("app2", "wiki"), "wiki")
    try:
        mesh.rotate("app1", "gitea")
        report = mesh.reconcile(sessions={"gitea_app1_x": Sessions.END})
        (done,) = [o for o in report.outcomes if o.login == "gitea_app1_x"]
        assert (done.outcome, done.sessions, done.sessions_left) == ("updated", 1, 0), done
        with pytest.raises(psycopg.OperationalError):
            session.execute("SELECT 1")
        bystander.execute("SELECT 1")  # another login's session lives
    finally:
        session.close()
        bystander.close()
