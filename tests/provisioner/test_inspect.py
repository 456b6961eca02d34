"""The provisioner's read-only inspection (what a provider agent's ``state`` answers from):
per login, does the server still hold what the secret file says? It writes nothing."""

from __future__ import annotations

from meshtui.contracts.adapter import Scope
from meshtui.kinds.postgres.adapter import PostgresAdapter
from meshtui.kinds.postgres.catalog import held_name
from meshtui.provisioner.harness import inspect, read_admin_file

from .conftest import PROVIDER, Mesh


def _verdicts(mesh: Mesh) -> dict[str, str]:
    return {f.login: f.verdict for f in inspect(mesh.manifest, mesh.admin)}


def test_inspection_finds_changes_made_outside_meshtui_and_writes_nothing(mesh: Mesh) -> None:
    mesh.add("app1", "gitea", database="gitea")
    mesh.add("app2", "wiki")
    mesh.add("app3", "api")
    mesh.reconcile()
    mesh.add("app4", "late", write_secret=False)
    mesh.write()
    xid = mesh.next_xid()
    assert _verdicts(mesh) == {
        "gitea_app1_x": "matches",
        "wiki_app2_x": "matches",
        "api_app3_x": "matches",
        "late_app4_x": "waiting",
    }
    with mesh.admin_conn() as conn:
        conn.execute("ALTER ROLE gitea_app1_x PASSWORD 'typed-by-hand'")
        conn.execute("DROP ROLE api_app3_x")
    after_dba = mesh.next_xid()
    found = {f.login: f for f in inspect(mesh.manifest, mesh.admin)}
    assert found["gitea_app1_x"].verdict == "changed"
    assert "password" in found["gitea_app1_x"].reason
    assert found["wiki_app2_x"].verdict == "matches"
    assert found["api_app3_x"].verdict == "missing"
    assert mesh.next_xid() == after_dba > xid  # only the DBA wrote; inspecting wrote nothing
    mesh.reconcile()
    assert set(_verdicts(mesh).values()) == {"matches", "waiting"}


def test_inspection_by_an_admin_that_cannot_read_pg_authid_says_unknown(mesh: Mesh) -> None:
    mesh.add("app1", "gitea")
    mesh.reconcile()
    with mesh.admin_conn() as conn:
        conn.execute("CREATE ROLE meshadmin LOGIN CREATEROLE PASSWORD 'managed-admin-pw-1'")
    mesh.admin.write_text(
        f"host=127.0.0.1 port={mesh.cluster.port} user=meshadmin"
        " password=managed-admin-pw-1 dbname=postgres\n"
    )
    # made by the superuser: marked by a superuser's grant, so still ours, but unverifiable
    assert _verdicts(mesh) == {"gitea_app1_x": "unknown"}


def test_a_scoped_inspection_reads_only_its_logins_and_agrees_with_the_whole_one(
    mesh: Mesh,
) -> None:
    """A delta's inspection asks PostgreSQL for the named roles (and their holding roles) only;
    for those logins it holds exactly what the whole inspection holds, and nothing else."""
    mesh.add("app1", "gitea", database="gitea")
    mesh.add("app2", "wiki")
    mesh.add("app3", "api", database="apidb")
    mesh.reconcile()
    mesh.drop("app3", "api")
    mesh.reconcile()  # api owned its database: a holding role keeps it
    with mesh.admin_conn() as conn:
        conn.execute("CREATE ROLE intruder LOGIN")
        assert conn.execute(
            "SELECT count(*) FROM pg_roles WHERE rolname = %s", [held_name("api_app3_x")]
        ).fetchone() == (1,)
    mesh.add("app3", "api", database="apidb")  # asked for again: its objects are held
    with mesh.admin_conn() as conn:
        conn.execute("CREATE ROLE api_app3_x LOGIN")  # and someone made the name meanwhile
    wanted = {
        "gitea_app1_x": {"database": "gitea"},
        "wiki_app2_x": {},
        "api_app3_x": {"database": "apidb"},
        "intruder": {},
        "nobody": {},
    }
    scope = frozenset({"gitea_app1_x", "api_app3_x", "intruder", "nobody"})
    with PostgresAdapter(read_admin_file(mesh.admin), Scope(PROVIDER, "database")) as adapter:
        whole = adapter.inspect(wanted)
        only = adapter.inspect_only(wanted, scope)
    assert {"gitea_app1_x", "wiki_app2_x", "api_app3_x", "intruder"} <= set(whole)
    assert only == {k: v for k, v in whole.items() if k in scope}
    assert set(only) == {"gitea_app1_x", "api_app3_x", "intruder"}
    assert only["gitea_app1_x"].ours and only["gitea_app1_x"].in_place
    assert not only["intruder"].ours and not only["api_app3_x"].ours
