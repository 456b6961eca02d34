"""A consumer's connection file: what the app needs besides its password (login with
its suffix, host, port, database, where the password is), written beside the credential with the
same access, in a format apps read, and kept in step by push. Real agents, real PostgreSQL: the
app's side is a psycopg login made only from what the two files hold."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import psycopg
import pytest

from meshtui.errors import DeclarationError

GITEA = "database:app1/gitea->db1/postgres"
NEEDLE = 'file = "srv/app1/gitea/db.password" }'


@pytest.fixture
def mesh(mesh_with_agents, pg, pg_clean, pg_admin_file):
    return mesh_with_agents(consumers={"app1": ["gitea"]}, port=pg.port, admin=pg_admin_file)


def declare_connection(mesh, shape: str, name: str = "db.conn") -> None:
    plain = PLAIN.setdefault(mesh.decl, mesh.decl.read_text())
    entry = (
        NEEDLE[:-1] + f', connection = {{ file = "srv/app1/gitea/{name}", format = "{shape}" }} }}'
    )
    mesh.decl.write_text(plain.replace(NEEDLE, entry))
    with mesh.controller() as ctl:
        ctl.declare(mesh.decl)


PLAIN: dict[object, str] = {}
"""Each mesh's declaration as written, before a connection file was added to it."""


def env_of(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line)


def test_an_env_file_is_enough_for_the_app_to_log_in_and_follows_rotation(mesh, pg):
    declare_connection(mesh, "env")
    with mesh.controller() as ctl:
        assert ctl.push().ok
        login = {r.pair: r for r in ctl.status()}[GITEA].login
    conn_file = mesh.root / "srv/app1/gitea/db.conn"
    cred_file = mesh.root / "srv/app1/gitea/db.password"
    env = env_of(conn_file.read_text())
    assert env["PGUSER"] == login and env["PGDATABASE"] == "gitea_app1"
    assert env["PGPORT"] == str(pg.port) and env["PGPASSWORD_FILE"] == str(cred_file)
    assert cred_file.read_text() not in conn_file.read_text()  # never the password
    assert stat.S_IMODE(conn_file.stat().st_mode) == stat.S_IMODE(cred_file.stat().st_mode)

    def app_login() -> str:
        e = env_of(conn_file.read_text())
        password = Path(e["PGPASSWORD_FILE"]).read_text()
        with psycopg.connect(
            host=e["PGHOST"], port=e["PGPORT"], dbname=e["PGDATABASE"], user=e["PGUSER"],
            password=password,
        ) as conn:  # fmt: skip
            return str(conn.execute("SELECT current_user").fetchone()[0])

    assert app_login() == login
    with mesh.controller() as ctl:
        assert ctl.rotate([GITEA]).ok
        again = ctl.push()
        assert again.ok and not again.delivered  # the file is already in step
    assert app_login() == login


def test_a_changed_format_is_written_again_by_push(mesh, pg):
    declare_connection(mesh, "env")
    with mesh.controller() as ctl:
        assert ctl.push().ok
    declare_connection(mesh, "json")
    conn_file = mesh.root / "srv/app1/gitea/db.conn"
    with mesh.controller() as ctl:
        report = ctl.push()
        assert report.ok and [o.pair for o in report.delivered] == [GITEA]
        login = {r.pair: r for r in ctl.status()}[GITEA].login
    facts = json.loads(conn_file.read_text())
    assert facts["user"] == login and facts["port"] == str(pg.port)
    declare_connection(mesh, "dsn")
    with mesh.controller() as ctl:
        assert ctl.push().ok
    dsn = conn_file.read_text().strip()
    password = (mesh.root / "srv/app1/gitea/db.password").read_text()
    with psycopg.connect(dsn, password=password) as conn:
        assert conn.execute("SELECT current_user").fetchone()[0] == login


def test_a_bad_connection_table_is_refused_naming_the_key(mesh):
    text = mesh.decl.read_text()
    bad = NEEDLE[:-1] + ', connection = { file = "srv/app1/gitea/db.conn", format = "yaml" } }'
    mesh.decl.write_text(text.replace(NEEDLE, bad))
    with mesh.controller() as ctl, pytest.raises(DeclarationError) as caught:
        ctl.declare(mesh.decl)
    assert "requires[0].connection.format" in str(caught.value)
    assert '"env" or "json" or "dsn"' in str(caught.value)


def test_a_withdrawn_pair_leaves_neither_file(mesh):
    declare_connection(mesh, "env")
    with mesh.controller() as ctl:
        assert ctl.push().ok
    conn_file = mesh.root / "srv/app1/gitea/db.conn"
    cred_file = mesh.root / "srv/app1/gitea/db.password"
    assert conn_file.exists() and cred_file.exists()
    text = mesh.decl.read_text()
    start = text.index('[modules."app1/gitea"]')
    mesh.decl.write_text(text[:start])
    with mesh.controller() as ctl:
        ctl.declare(mesh.decl)
        report = ctl.push()
        assert [o.pair for o in report.withdrawn] == [GITEA] and report.withdrawn[0].ok
    assert not cred_file.exists() and not conn_file.exists()


def test_a_connection_file_deleted_or_edited_is_written_again_by_push(mesh):
    declare_connection(mesh, "env")
    with mesh.controller() as ctl:
        assert ctl.push().ok
    conn_file = mesh.root / "srv/app1/gitea/db.conn"
    want = conn_file.read_text()
    conn_file.unlink()
    with mesh.controller() as ctl:
        report = ctl.push()
        assert report.ok and [o.pair for o in report.delivered] == [GITEA]
    assert conn_file.read_text() == want
    conn_file.write_text("PGHOST=elsewhere\n")
    with mesh.controller() as ctl:
        assert ctl.push().ok
        assert not ctl.push().delivered
    assert conn_file.read_text() == want
