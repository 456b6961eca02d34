"""The provisioner's read-only inspection (what a provider agent's ``state`` answers from):
per login, does the server still hold what the secret file says? It writes nothing."""

from __future__ import annotations

from meshtui.provisioner.harness import inspect

from .conftest import Mesh


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
