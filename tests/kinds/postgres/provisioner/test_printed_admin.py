"""The admin role ``meshtui kind config postgres`` prints: made by its very SQL on a real server
(each version the suite runs), ``doctor`` finds nothing it lacks (pin included), the provisioner
makes, rotates and removes logins with it, and it is no superuser: it cannot read ``pg_authid``,
``ALTER SYSTEM``, or make a superuser."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from meshtui.kinds.postgres import server_config
from meshtui.kinds.postgres.doctor import admin_rights
from tests.provisioner.conftest import Mesh, outcomes

ROLE = "meshprinted"
PASSWORD = "printed-admin-pw-1"


@pytest.fixture
def printed(mesh: Mesh) -> Mesh:
    """The mesh, provisioned by the printed admin role over TCP."""
    text = server_config.admin_sql(ROLE)
    with mesh.admin_conn() as conn:
        for statement in text.split(";"):
            lines = [ln for ln in statement.splitlines() if not ln.startswith("--")]
            if "".join(lines).strip():
                conn.execute("\n".join(lines))
        conn.execute(f"ALTER ROLE {ROLE} PASSWORD '{PASSWORD}'")
    mesh.admin.write_text(
        f"host=127.0.0.1 port={mesh.cluster.port} user={ROLE} password={PASSWORD} dbname=postgres\n"
    )
    return mesh


def test_the_printed_admin_lacks_nothing_and_provisions(printed: Mesh, tmp_path: Path) -> None:
    mesh = printed
    item = {"provider": "db1/postgres", "admin": str(mesh.admin), "builtin": True,
            "databases": True, "pin": True}  # fmt: skip
    assert admin_rights(item, mesh.admin, 10.0) == []  # type: ignore[arg-type]
    mesh.add("app1", "gitea", database="gitea")
    assert outcomes(mesh.reconcile()) == {"gitea_app1_x": "created"}
    first = mesh.password("app1", "gitea")
    assert mesh.can_login("gitea_app1_x", first, "gitea")
    mesh.rotate("app1", "gitea")
    mesh.reconcile()
    assert mesh.can_login("gitea_app1_x", mesh.password("app1", "gitea"), "gitea")
    assert not mesh.can_login("gitea_app1_x", first, "gitea")
    mesh.drop("app1", "gitea")
    assert outcomes(mesh.reconcile())["gitea_app1_x"] == "removed"


def test_the_printed_admin_is_no_superuser(printed: Mesh) -> None:
    conninfo = printed.admin.read_text().strip()
    with psycopg.connect(conninfo, autocommit=True) as conn:
        assert conn.execute("SHOW hba_file").fetchone()  # what pin = true reads
        assert conn.execute("SELECT count(*) FROM pg_hba_file_rules").fetchone()
        for refused in (
            "SELECT rolpassword FROM pg_authid",
            "ALTER SYSTEM SET log_statement = 'all'",
            "CREATE ROLE would_be_root SUPERUSER",
            "SELECT pg_read_file('postgresql.conf')",
            "COPY (SELECT 1) TO PROGRAM 'true'",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(refused)
