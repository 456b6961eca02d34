"""reconcile() on a real scram-only PostgreSQL: create, rotate, remove, refuse, idle, drift."""

from __future__ import annotations

import json

import psycopg
import pytest
from psycopg import sql

from meshtui.errors import ManifestError, ProvisionError
from meshtui.kinds.postgres.catalog import MARKER, held_name
from meshtui.kinds.postgres.scram import scram_matches
from meshtui.provisioner.harness import reconcile

from .conftest import Mesh, outcomes


def test_create_makes_a_working_login_with_its_database(mesh: Mesh) -> None:
    mesh.add("app1", "gitea", "gitea_app1_3f9a2c", database="gitea")
    mesh.add("app2", "web", "web_app2_77aa01")
    report = mesh.reconcile()
    assert outcomes(report) == {"gitea_app1_3f9a2c": "created", "web_app2_77aa01": "created"}
    assert report.ok
    assert mesh.db_owner("gitea") == "gitea_app1_3f9a2c"
    with mesh.connect_as("gitea_app1_3f9a2c", mesh.password("app1", "gitea"), "gitea") as conn:
        assert conn.execute("SELECT current_user, current_database()").fetchone() == (
            "gitea_app1_3f9a2c",
            "gitea",
        )
        conn.execute("CREATE TABLE t (x int)")  # it owns its database
    assert mesh.can_login("web_app2_77aa01", mesh.password("app2", "web"))
    assert not mesh.can_login("web_app2_77aa01", mesh.password("app1", "gitea"))
    roles = mesh.authid()
    stored = roles["web_app2_77aa01"][1]
    assert stored is not None and stored.startswith("SCRAM-SHA-256$4096:")
    assert scram_matches(stored, mesh.password("app2", "web"))
    with mesh.admin_conn() as conn:
        marked = conn.execute(
            "SELECT count(*) FROM pg_auth_members m JOIN pg_roles r ON r.oid = m.roleid"
            " WHERE r.rolname = %s",
            [MARKER],
        ).fetchone()
    assert marked == (2,)


def test_remove_ends_sessions_refuses_login_keeps_data(mesh: Mesh) -> None:
    mesh.add("app1", "gitea", database="gitea")
    mesh.add("app2", "web")
    mesh.reconcile()
    login, password = mesh.login_of("app1", "gitea"), mesh.password("app1", "gitea")
    session = mesh.connect_as(login, password, "gitea")
    session.execute("CREATE TABLE issues (id int PRIMARY KEY, title text)")
    session.execute("INSERT INTO issues VALUES (1, 'keep me'), (2, 'me too')")
    session.commit()

    mesh.drop("app1", "gitea")
    report = mesh.reconcile()
    assert outcomes(report) == {"web_app2_x": "unchanged", login: "removed"}
    assert report.ok

    with pytest.raises(psycopg.OperationalError):
        session.execute("SELECT 1")  # its open session was terminated
    session.close()
    assert not mesh.can_login(login, password, "gitea")
    assert login not in mesh.authid()
    keeper = held_name(login)
    assert mesh.db_owner("gitea") == keeper
    with mesh.admin_conn("gitea") as conn:
        rows = conn.execute("SELECT id, title FROM issues ORDER BY id").fetchall()
        owner = conn.execute(
            "SELECT tableowner FROM pg_tables WHERE tablename = 'issues'"
        ).fetchone()
    assert rows == [(1, "keep me"), (2, "me too")]
    assert owner == (keeper,)
    assert not mesh.authid()[keeper][2]  # the holding role cannot log in


def test_a_returning_login_gets_its_data_back(mesh: Mesh) -> None:
    mesh.add("app1", "gitea", database="gitea")
    mesh.reconcile()
    login = mesh.login_of("app1", "gitea")
    with mesh.connect_as(login, mesh.password("app1", "gitea"), "gitea") as conn:
        conn.execute("CREATE TABLE t AS SELECT 42 AS answer")
    mesh.drop("app1", "gitea")
    mesh.reconcile()
    mesh.add("app1", "gitea", database="gitea")
    report = mesh.reconcile()
    assert outcomes(report) == {login: "created"}
    assert mesh.db_owner("gitea") == login
    assert held_name(login) not in mesh.authid()
    with mesh.connect_as(login, mesh.password("app1", "gitea"), "gitea") as conn:
        assert conn.execute("SELECT answer FROM t").fetchone() == (42,)


def test_unmarked_role_is_never_touched(mesh: Mesh) -> None:
    with mesh.admin_conn() as conn:
        conn.execute("CREATE ROLE gitea_app1_x LOGIN PASSWORD 'hand-made-1'")
        conn.execute("CREATE ROLE legacy_app LOGIN PASSWORD 'hand-made-2'")
    before = mesh.authid()
    mesh.add("app1", "gitea", "gitea_app1_x")
    report = mesh.reconcile()
    (item,) = report.outcomes
    assert item.outcome == "refused" and "did not make" in item.reason
    assert not report.ok
    after = mesh.authid()
    assert after["gitea_app1_x"] == before["gitea_app1_x"]
    assert after["legacy_app"] == before["legacy_app"]
    assert mesh.can_login("gitea_app1_x", "hand-made-1")
    # and nobody asked for: still not removed
    mesh.drop("app1", "gitea")
    report = mesh.reconcile()
    assert report.outcomes == ()
    assert mesh.authid()["gitea_app1_x"] == before["gitea_app1_x"]
    assert mesh.can_login("legacy_app", "hand-made-2")


def test_a_role_made_for_another_provider_is_not_ours(mesh: Mesh) -> None:
    mesh.add("app1", "gitea", "shared_name")
    mesh.write(provider="db2/postgres")
    assert outcomes(reconcile(mesh.manifest, mesh.admin)) == {"shared_name": "created"}
    before = mesh.authid()["shared_name"]
    report = mesh.reconcile()  # the same login asked for by db1/postgres
    assert report.outcomes[0].outcome == "refused"
    assert "another provision or provider" in report.outcomes[0].reason or "db2" in (
        report.outcomes[0].reason
    )
    mesh.drop("app1", "gitea")
    assert mesh.reconcile().outcomes == ()  # db1's empty manifest does not remove db2's login
    assert mesh.authid()["shared_name"] == before


BROKEN = {
    "truncated": lambda text: text[: len(text) // 2],
    "empty": lambda text: "",
    "not json": lambda text: "version = 1\n",
    "wrong version": lambda text: text.replace('"version": 1', '"version": 2'),
    "no consumers key": lambda text: json.dumps(
        {k: v for k, v in json.loads(text).items() if k != "consumers"}
    ),
    "consumers null": lambda text: text.replace('"consumers": [', '"consumers": null, "x": ['),
    "duplicate key": lambda text: text.replace('"serial":', '"serial": 99, "serial":'),
}


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_broken_manifest_changes_nothing(mesh: Mesh, kind: str) -> None:
    mesh.add("app1", "gitea", database="gitea")
    mesh.add("app2", "web")
    mesh.reconcile()
    before, xid = mesh.authid(), mesh.next_xid()
    text = mesh.manifest.read_text()
    json.loads(text)
    mesh.manifest.write_text(BROKEN[kind](text))
    with pytest.raises(ManifestError) as err:
        reconcile(mesh.manifest, mesh.admin)
    assert str(mesh.manifest) in str(err.value)
    assert mesh.authid() == before
    assert mesh.next_xid() == xid
    assert mesh.can_login(mesh.login_of("app1", "gitea"), mesh.password("app1", "gitea"))


def test_missing_manifest_changes_nothing(mesh: Mesh) -> None:
    mesh.add("app1", "gitea")
    mesh.reconcile()
    before = mesh.authid()
    mesh.manifest.unlink()
    with pytest.raises(ManifestError, match="cannot be read"):
        reconcile(mesh.manifest, mesh.admin)
    assert mesh.authid() == before


def test_nobody_asked_for_removes_what_we_made_only(mesh: Mesh) -> None:
    with mesh.admin_conn() as conn:
        conn.execute("CREATE ROLE bystander LOGIN PASSWORD 'by-hand'")
    mesh.add("app1", "gitea", database="gitea")
    mesh.add("app2", "web")
    mesh.reconcile()
    mesh.consumers.clear()
    report = mesh.reconcile()
    assert sorted(outcomes(report).items()) == [
        ("gitea_app1_x", "removed"),
        ("web_app2_x", "removed"),
    ]
    roles = mesh.authid()
    assert "gitea_app1_x" not in roles and "web_app2_x" not in roles
    assert "bystander" in roles
    assert mesh.db_owner("gitea") == held_name("gitea_app1_x")  # the database is kept


@pytest.mark.parametrize("problem", ["missing", "empty", "mismatch"])
def test_waiting_consumer_is_left_alone(mesh: Mesh, problem: str) -> None:
    mesh.add("app1", "gitea", database="gitea")
    mesh.reconcile()
    login, password = mesh.login_of("app1", "gitea"), mesh.password("app1", "gitea")
    before, xid = mesh.authid(), mesh.next_xid()
    mesh.rotate("app1", "gitea")  # the manifest now names a digest the file must match
    secret_file = mesh.folder / mesh.consumers["app1/gitea"]["secret"]
    if problem == "missing":
        secret_file.unlink()
    elif problem == "empty":
        secret_file.write_bytes(b"")
    else:
        secret_file.write_bytes(b"not-the-delivered-secret")
    # a brand-new consumer whose secret has not arrived yet either
    mesh.add("app2", "web", write_secret=False)
    report = mesh.reconcile()
    assert outcomes(report) == {login: "waiting", "web_app2_x": "waiting"}
    assert not report.ok
    assert all(o.reason for o in report.outcomes)
    assert mesh.authid() == before
    assert mesh.next_xid() == xid
    assert mesh.can_login(login, password, "gitea")


def test_unsafe_logins_refused_before_any_sql(mesh: Mesh) -> None:
    mesh.add("app1", "long", "a" * 64)
    mesh.add("app2", "multibyte", "é" * 32)  # 64 bytes, 32 characters
    mesh.add("app3", "nul", "bad\x00name")
    mesh.add("app4", "empty", "")
    xid = mesh.next_xid()
    report = mesh.reconcile()
    assert {o.outcome for o in report.outcomes} == {"refused"}
    assert "64 bytes" in report.outcomes[0].reason
    assert mesh.next_xid() == xid  # nothing was written, not even the marker role
    names = set(mesh.authid())
    assert not any(n.startswith(("a" * 60, "é")) for n in names)


def test_longest_allowed_login_works(mesh: Mesh) -> None:
    login = "b" * 63
    mesh.add("app1", "max", login)
    assert outcomes(mesh.reconcile()) == {login: "created"}
    assert mesh.can_login(login, mesh.password("app1", "max"))


def test_quotes_and_unicode_are_safe(mesh: Mesh) -> None:
    tricky = "o'brien\"; DROP ROLE postgres; --"
    uni = "grüße_données_日本"
    mesh.add("app1", "q", tricky, database="db'; DROP DATABASE postgres; --")
    mesh.add("app2", "u", uni, database="données")
    report = mesh.reconcile()
    assert outcomes(report) == {tricky: "created", uni: "created"}
    assert mesh.can_login(tricky, mesh.password("app1", "q"), "db'; DROP DATABASE postgres; --")
    assert mesh.can_login(uni, mesh.password("app2", "u"), "données")
    assert "postgres" in mesh.authid()
    assert mesh.db_owner("postgres") == "postgres"
    assert outcomes(mesh.reconcile()) == {tricky: "unchanged", uni: "unchanged"}


def test_non_ascii_secret_uses_saslprep_and_logs_in(mesh: Mesh) -> None:
    mesh.add("app1", "u", "uni_secret", secret="pässwörd-ﬁ-\u00a0x".encode())
    assert outcomes(mesh.reconcile()) == {"uni_secret": "created"}
    assert mesh.can_login("uni_secret", mesh.password("app1", "u"))


def test_idle_run_writes_nothing(mesh: Mesh) -> None:
    for i in range(5):
        mesh.add(f"app{i}", "svc", database=f"db{i}" if i % 2 else None)
    mesh.reconcile()
    before, xid = mesh.authid(), mesh.next_xid()
    report = mesh.reconcile()
    assert set(outcomes(report).values()) == {"unchanged"}
    assert report.ok
    assert mesh.authid() == before
    assert mesh.next_xid() == xid


def test_drift_by_hand_is_corrected(mesh: Mesh) -> None:
    mesh.add("app1", "gitea", database="gitea")
    mesh.add("app2", "web")
    mesh.add("app3", "api")
    mesh.reconcile()
    with mesh.admin_conn() as conn:
        conn.execute("ALTER ROLE gitea_app1_x PASSWORD 'typed-by-hand'")
        conn.execute("ALTER ROLE web_app2_x NOLOGIN")
        conn.execute("ALTER ROLE api_app3_x VALID UNTIL '2001-01-01'")
    mesh.reconcile()  # the manifest did not change
    report = mesh.reconcile()
    assert set(outcomes(report).values()) == {"unchanged"}
    with mesh.admin_conn() as conn:
        conn.execute("ALTER ROLE gitea_app1_x PASSWORD 'typed-by-hand'")
        conn.execute("ALTER ROLE web_app2_x NOLOGIN")
        conn.execute("ALTER ROLE api_app3_x VALID UNTIL '2001-01-01'")
        conn.execute("DROP DATABASE gitea")
    report = mesh.reconcile()
    assert outcomes(report) == {
        "gitea_app1_x": "updated",
        "web_app2_x": "updated",
        "api_app3_x": "updated",
    }
    assert not mesh.can_login("gitea_app1_x", "typed-by-hand", "gitea")
    for node, module in (("app1", "gitea"), ("app2", "web"), ("app3", "api")):
        db = "gitea" if module == "gitea" else "postgres"
        assert mesh.can_login(mesh.login_of(node, module), mesh.password(node, module), db)


def test_forged_record_is_not_trusted(mesh: Mesh) -> None:
    mesh.add("app1", "gitea")
    mesh.reconcile()
    with mesh.admin_conn() as conn:
        conn.execute("ALTER ROLE gitea_app1_x PASSWORD 'typed-by-hand'")
        comment = conn.execute(
            "SELECT shobj_description(oid, 'pg_authid') FROM pg_roles WHERE rolname = %s",
            ["gitea_app1_x"],
        ).fetchone()
        assert comment is not None
        conn.execute(sql.SQL("COMMENT ON ROLE gitea_app1_x IS {}").format(sql.Literal(comment[0])))
    assert outcomes(mesh.reconcile()) == {"gitea_app1_x": "updated"}
    assert mesh.can_login("gitea_app1_x", mesh.password("app1", "gitea"))


def test_database_owned_by_someone_else_is_refused(mesh: Mesh) -> None:
    with mesh.admin_conn() as conn:
        conn.execute("CREATE DATABASE precious")
    xid = mesh.next_xid()
    mesh.add("app1", "gitea", database="precious")
    mesh.add("app2", "odd", values={"schema": "x"})
    report = mesh.reconcile()
    assert outcomes(report) == {"gitea_app1_x": "refused", "odd_app2_x": "refused"}
    assert "precious" in report.outcomes[0].reason and "postgres" in report.outcomes[0].reason
    assert "schema" in report.outcomes[1].reason
    assert mesh.db_owner("precious") == "postgres"
    assert "gitea_app1_x" not in mesh.authid()
    assert mesh.next_xid() == xid


def test_drop_pending_when_removal_cannot_finish(mesh: Mesh) -> None:
    mesh.add("app1", "gitea")
    mesh.reconcile()
    login, password = mesh.login_of("app1", "gitea"), mesh.password("app1", "gitea")
    with mesh.admin_conn() as conn:
        conn.execute("CREATE DATABASE frozen")
    with mesh.admin_conn("frozen") as conn:
        conn.execute("CREATE TABLE kept (x int)")
        conn.execute("ALTER TABLE kept OWNER TO gitea_app1_x")
    with mesh.admin_conn() as conn:
        conn.execute("ALTER DATABASE frozen ALLOW_CONNECTIONS false")
    try:
        mesh.drop("app1", "gitea")
        report = mesh.reconcile()
        (item,) = report.outcomes
        assert item.outcome == "drop pending" and "frozen" in item.reason
        assert not report.ok
        xmin, stored, can_login = mesh.authid()[login]
        assert stored is None and not can_login
        assert not mesh.can_login(login, password)
        with mesh.admin_conn() as conn:
            conn.execute("ALTER DATABASE frozen ALLOW_CONNECTIONS true")
        report = mesh.reconcile()
        assert outcomes(report) == {login: "removed"}
        assert login not in mesh.authid()
    finally:
        with mesh.admin_conn() as conn:
            conn.execute("ALTER DATABASE frozen ALLOW_CONNECTIONS true")


def test_many_consumers_in_parallel_sessions(mesh: Mesh) -> None:
    for i in range(24):
        mesh.add(f"app{i:02d}", "svc", database=f"svc{i:02d}" if i < 4 else None)
    report = mesh.reconcile(workers=2)
    assert report.counts() == {"created": 24}
    for i in (0, 3, 23):
        node = f"app{i:02d}"
        db = f"svc{i:02d}" if i < 4 else "postgres"
        assert mesh.can_login(mesh.login_of(node, "svc"), mesh.password(node, "svc"), db)
    for i in range(24):
        mesh.rotate(f"app{i:02d}", "svc")
    assert mesh.reconcile(workers=2).counts() == {"updated": 24}
    assert mesh.can_login(mesh.login_of("app07", "svc"), mesh.password("app07", "svc"))


def test_admin_file_must_be_private(mesh: Mesh) -> None:
    mesh.add("app1", "gitea")
    mesh.write()
    mesh.admin.chmod(0o644)
    with pytest.raises(ProvisionError, match="chmod 600"):
        reconcile(mesh.manifest, mesh.admin)
    assert "gitea_app1_x" not in mesh.authid()


def test_admin_must_be_superuser_or_createrole(mesh: Mesh) -> None:
    with mesh.admin_conn() as conn:
        conn.execute("CREATE ROLE weak_admin LOGIN PASSWORD 'weak-admin-pw'")
    mesh.admin.write_text(
        f"host=127.0.0.1 port={mesh.cluster.port} user=weak_admin password=weak-admin-pw"
        " dbname=postgres"
    )
    mesh.add("app1", "gitea")
    mesh.write()
    with pytest.raises(
        ProvisionError, match="neither a PostgreSQL superuser nor a role with CREATEROLE"
    ):
        reconcile(mesh.manifest, mesh.admin)


def test_report_json_and_lines(mesh: Mesh) -> None:
    mesh.add("app1", "gitea", database="gitea")
    mesh.add("app2", "web", write_secret=False)
    report = mesh.reconcile()
    doc = json.loads(report.to_json())
    assert doc["ok"] is False
    assert doc["provider"] == "db1/postgres" and doc["provision"] == "database"
    assert doc["serial"] == mesh.serial
    assert doc["counts"] == {"created": 1, "waiting": 1}
    assert [o["outcome"] for o in doc["outcomes"]] == ["created", "waiting"]
    assert {"login", "node", "module", "outcome", "reason"} <= set(doc["outcomes"][0])
    lines = report.lines()
    assert "NOT ok" in lines[0] and "1 created" in lines[0]
    assert any("waiting" in line and "app2/web" in line for line in lines[1:])
    text = report.to_json() + "\n".join(lines)
    assert mesh.password("app1", "gitea") not in text
