"""Each consumer's login reaches only its own database; databases meshtui did not
create keep their rights."""

from __future__ import annotations

import psycopg
import pytest

from tests.provisioner.conftest import Mesh, outcomes


def _refused(mesh: Mesh, login: str, password: str, dbname: str) -> str:
    with pytest.raises(psycopg.OperationalError) as caught:
        mesh.connect_as(login, password, dbname).close()
    return str(caught.value)


def _acl(mesh: Mesh, dbname: str) -> str | None:
    with mesh.admin_conn() as conn:
        row = conn.execute(
            "SELECT datacl::text FROM pg_database WHERE datname = %s", [dbname]
        ).fetchone()
    assert row is not None
    return None if row[0] is None else str(row[0])


def test_a_consumer_reaches_only_its_own_database(mesh: Mesh) -> None:
    with mesh.admin_conn() as conn:
        conn.execute("CREATE DATABASE shared_by_dba")  # meshtui did not create it
    before = _acl(mesh, "shared_by_dba")
    mesh.add("app1", "gitea", database="gitea")
    mesh.add("app2", "wiki", database="wiki")
    assert outcomes(mesh.reconcile()) == {"gitea_app1_x": "created", "wiki_app2_x": "created"}
    gitea, wiki = mesh.password("app1", "gitea"), mesh.password("app2", "wiki")

    assert mesh.can_login("gitea_app1_x", gitea, "gitea")
    assert mesh.can_login("wiki_app2_x", wiki, "wiki")
    assert "permission denied for database" in _refused(mesh, "wiki_app2_x", wiki, "gitea")
    assert "permission denied for database" in _refused(mesh, "gitea_app1_x", gitea, "wiki")
    # the rights PostgreSQL gives PUBLIC by default are gone, the owner's are explicit
    with mesh.admin_conn() as conn:
        rows = conn.execute(
            "SELECT datname, has_database_privilege('public', datname, 'CONNECT'),"
            " has_database_privilege('public', datname, 'TEMP'),"
            " has_database_privilege(pg_get_userbyid(datdba), datname, 'CONNECT, TEMP')"
            " FROM pg_database WHERE datname IN ('gitea', 'wiki')"
        ).fetchall()
    assert sorted(rows) == [("gitea", False, False, True), ("wiki", False, False, True)]
    # a database meshtui did not create keeps its ACL, untouched
    assert _acl(mesh, "shared_by_dba") == before
    assert mesh.can_login("wiki_app2_x", wiki, "shared_by_dba")

    # a DBA re-opens a database meshtui made: the next run closes it again
    with mesh.admin_conn() as conn:
        conn.execute("GRANT CONNECT ON DATABASE gitea TO PUBLIC")
    report = mesh.reconcile()
    assert outcomes(report) == {"gitea_app1_x": "updated", "wiki_app2_x": "unchanged"}
    assert "permission denied for database" in _refused(mesh, "wiki_app2_x", wiki, "gitea")
    assert set(outcomes(mesh.reconcile()).values()) == {"unchanged"}


def test_a_database_handed_over_keeps_its_rights(mesh: Mesh) -> None:
    with mesh.admin_conn() as conn:
        conn.execute("CREATE DATABASE handed_over")
    before = _acl(mesh, "handed_over")
    mesh.add("app1", "gitea")
    mesh.reconcile()
    with mesh.admin_conn() as conn:
        conn.execute("ALTER DATABASE handed_over OWNER TO gitea_app1_x")
    mesh.consumers["app1/gitea"]["values"] = {"database": "handed_over"}
    assert outcomes(mesh.reconcile()) == {"gitea_app1_x": "unchanged"}
    assert mesh.can_login("gitea_app1_x", mesh.password("app1", "gitea"), "handed_over")
    assert _acl(mesh, "handed_over") == before  # ownership moved; PUBLIC's rights were not ours
