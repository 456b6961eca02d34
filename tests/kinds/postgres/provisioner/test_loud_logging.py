"""No password and no SCRAM verifier reaches the server log or pg_stat_statements,
with every logging setting a DBA may turn on, all at once (auto_explain and pg_stat_statements
preloaded, so this test has a cluster of its own per server version)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from psycopg import sql

from meshtui.kinds.postgres.lab import Cluster
from meshtui.kinds.postgres.quiet import LOWER
from tests.fix_pg import BINARIES, reset_cluster, start_cluster
from tests.provisioner.conftest import Mesh, outcomes, server_version

LOUD: dict[str, str] = {
    "log_statement": "all",
    "log_min_duration_statement": "0",
    "log_parameter_max_length": "-1",
    "log_parameter_max_length_on_error": "-1",
    "log_min_error_statement": "debug5",
    "log_duration": "on",
    "auto_explain.log_min_duration": "0",
    "auto_explain.log_analyze": "on",
    "auto_explain.log_verbose": "on",
    "auto_explain.log_nested_statements": "on",
    "pg_stat_statements.track": "all",
    "pg_stat_statements.track_utility": "on",
}
SINCE_16 = {"auto_explain.log_parameter_max_length": "-1"}  # the setting is new in 16


@pytest.fixture(scope="module", params=sorted(BINARIES, reverse=True))
def loud(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """A cluster of its own with auto_explain and pg_stat_statements preloaded, all logging on."""
    cluster, base = start_cluster(str(request.param))
    try:
        with Mesh.admin_of(cluster) as conn:
            conn.execute(
                "ALTER SYSTEM SET shared_preload_libraries = 'auto_explain', 'pg_stat_statements'"
            )
        cluster.stop()
        cluster.start()  # shared_preload_libraries is read at server start only
        settings = dict(LOUD)
        if server_version(cluster) >= 160000:
            settings.update(SINCE_16)
        cluster.set_config(**settings)
        with Mesh.admin_of(cluster) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def loud_mesh(loud: Cluster, tmp_path: Path) -> Iterator[Mesh]:
    reset_cluster(loud)
    folder = tmp_path / "db1" / "postgres"
    folder.mkdir(parents=True)
    yield Mesh(folder=folder, cluster=loud, admin=loud.write_admin_file(tmp_path / "admin"))
    reset_cluster(loud)


def test_every_logging_setting_on_leaks_no_verifier_and_no_password(loud_mesh: Mesh) -> None:
    mesh = loud_mesh
    log = mesh.cluster.log_path
    offset = log.stat().st_size
    with mesh.admin_conn() as conn:
        conn.execute("SELECT pg_stat_statements_reset()")
        shown = conn.execute("SHOW auto_explain.log_min_duration").fetchone()
        assert shown == ("0",)  # the extension is really loaded and loud
    passwords: list[str] = []
    mesh.add("app1", "gitea", database="gitea")
    mesh.add("app2", "wiki")
    assert outcomes(mesh.reconcile()) == {"gitea_app1_x": "created", "wiki_app2_x": "created"}
    passwords += [mesh.password("app1", "gitea"), mesh.password("app2", "wiki")]
    mesh.rotate("app1", "gitea")
    assert outcomes(mesh.reconcile())["gitea_app1_x"] == "updated"
    passwords.append(mesh.password("app1", "gitea"))
    with mesh.admin_conn() as conn:  # drift: the next run rewrites (and reads back) a verifier
        conn.execute("ALTER ROLE wiki_app2_x PASSWORD 'typed-by-hand'")
    assert outcomes(mesh.reconcile())["wiki_app2_x"] == "updated"
    # a failure inside the transaction that carries the verifier
    try:
        mesh.cluster.set_config(default_transaction_read_only="on")
        mesh.rotate("app1", "gitea")
        passwords.append(mesh.password("app1", "gitea"))
        assert outcomes(mesh.reconcile())["gitea_app1_x"] == "failed"
    finally:
        mesh.cluster.set_config(default_transaction_read_only=None)
    assert outcomes(mesh.reconcile())["gitea_app1_x"] == "updated"
    for node, module, db in (("app1", "gitea", "gitea"), ("app2", "wiki", "postgres")):
        assert mesh.can_login(mesh.login_of(node, module), mesh.password(node, module), db)
    mesh.drop("app2", "wiki")
    assert outcomes(mesh.reconcile())["wiki_app2_x"] == "removed"

    with log.open("rb") as fh:
        fh.seek(offset)
        text = fh.read().decode("utf-8", "replace")
    with mesh.admin_conn() as conn:
        statements = "\n".join(
            str(r[0]) for r in conn.execute("SELECT query FROM pg_stat_statements").fetchall()
        )
    # the settings were really on: statements, plans and the failure are all there ...
    assert "statement: " in text and "Query Text:" in text and "duration:" in text
    assert "read-only transaction" in text
    assert "pg_authid" in statements
    # ... and no verifier, no password, no statement of ours that sets one, anywhere
    for where in (text, statements):
        assert "SCRAM-SHA-256$" not in where
        assert "LOGIN PASSWORD '" not in where.upper()  # the DBA's own ALTER ROLE is there
        for password in passwords:
            assert password not in where


def test_a_managed_admin_under_every_logging_setting(loud_mesh: Mesh) -> None:
    """An admin that is not a superuser cannot lower these settings: it sets no password and
    names them; granted SET on them, it sets passwords and nothing is recorded."""
    mesh = loud_mesh
    log = mesh.cluster.log_path
    with mesh.admin_conn() as conn:
        conn.execute("CREATE ROLE meshadmin LOGIN CREATEROLE CREATEDB PASSWORD 'managed-pw-1'")
        conn.execute("SELECT pg_stat_statements_reset()")
    mesh.admin.write_text(
        f"host=127.0.0.1 port={mesh.cluster.port} user=meshadmin password=managed-pw-1"
        " dbname=postgres\n"
    )
    offset = log.stat().st_size
    mesh.add("app1", "gitea", database="gitea")
    (refused,) = mesh.reconcile().outcomes
    assert refused.outcome == "refused"
    for name in ("log_statement=all", "auto_explain.log_min_duration=0"):
        assert name in refused.reason
    assert "GRANT SET ON PARAMETER" in refused.reason
    with mesh.admin_conn() as conn:
        names = [
            str(r[0])
            for r in conn.execute(
                "SELECT name FROM pg_settings WHERE name = ANY(%s) AND context <> 'user'",
                [[name for name, _ in LOWER]],
            ).fetchall()
        ]
        for name in names:
            conn.execute(
                sql.SQL("GRANT SET ON PARAMETER {} TO meshadmin").format(sql.Identifier(name))
            )
    try:
        assert outcomes(mesh.reconcile()) == {"gitea_app1_x": "created"}
        mesh.rotate("app1", "gitea")
        assert outcomes(mesh.reconcile()) == {"gitea_app1_x": "updated"}
        assert mesh.can_login("gitea_app1_x", mesh.password("app1", "gitea"), "gitea")
    finally:
        with mesh.admin_conn() as conn:
            for name in names:
                conn.execute(
                    sql.SQL("REVOKE SET ON PARAMETER {} FROM meshadmin").format(
                        sql.Identifier(name)
                    )
                )
    text = log.read_bytes()[offset:].decode("utf-8", "replace")
    with mesh.admin_conn() as conn:
        statements = "\n".join(
            str(r[0]) for r in conn.execute("SELECT query FROM pg_stat_statements").fetchall()
        )
    assert "statement: " in text and "meshtui_password" in text
    for where in (text, statements):
        assert "SCRAM-SHA-256$" not in where
        assert mesh.password("app1", "gitea") not in where
