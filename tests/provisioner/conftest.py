"""A provider folder (manifest + secret files) beside the session's real PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from meshtui.kinds.postgres.lab import Cluster
from meshtui.provisioner.harness import Report, reconcile
from tests.fix_manifest import ManifestFolder
from tests.fix_pg import BINARIES, Clusters

PROVIDER = "db1/postgres"


@pytest.fixture(scope="session", params=sorted(BINARIES, reverse=True))
def pg(request: pytest.FixtureRequest, pg_clusters: Clusters) -> Cluster:
    """Every provisioner test runs against each server version (embedded 18, Debian's 15)."""
    return pg_clusters.get(str(request.param))


def server_version(cluster: Cluster) -> int:
    """``server_version_num`` of a running cluster, e.g. 150020 or 180006."""
    with psycopg.connect(cluster.admin_conninfo(), autocommit=True) as conn:
        row = conn.execute("SELECT current_setting('server_version_num')::int").fetchone()
    assert row is not None
    return int(row[0])


@dataclass
class Mesh(ManifestFolder):
    """Writes manifests and secrets like the provider's agent would, and looks at PostgreSQL."""

    cluster: Cluster
    admin: Path

    # -- the provider's files ----------------------------------------------------------------

    def add(
        self,
        node: str,
        module: str,
        login: str | None = None,
        *,
        database: str | None = None,
        secret: bytes | None = None,
        write_secret: bool = True,
        values: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """Add (or replace) a consumer with a fresh secret, written beside the manifest."""
        return self.consumer(
            node,
            module,
            f"{module}_{node}_x" if login is None else login,
            values=values or ({"database": database} if database else {}),
            secret=secret,
            write_secret=write_secret,
        )

    def write(self, *, provider: str = PROVIDER, provision: str = "database") -> Path:
        return self.write_manifest(kind=None, provider=provider, provision=provision)

    def reconcile(self, **kwargs: Any) -> Report:
        self.write()
        return reconcile(self.manifest, self.admin, **kwargs)

    # -- PostgreSQL ----------------------------------------------------------------------------

    def admin_conn(self, dbname: str = "postgres") -> psycopg.Connection[Any]:
        return self.admin_of(self.cluster, dbname)

    @staticmethod
    def admin_of(cluster: Cluster, dbname: str = "postgres") -> psycopg.Connection[Any]:
        """A superuser session on ``cluster`` (autocommit)."""
        return psycopg.connect(cluster.admin_conninfo(), dbname=dbname, autocommit=True)

    def connect_as(
        self, login: str, password: str, dbname: str = "postgres"
    ) -> psycopg.Connection[Any]:
        """A consumer's login over TCP; the server must demand the password (SCRAM)."""
        conn = psycopg.connect(
            host="127.0.0.1",
            port=self.cluster.port,
            user=login,
            password=password,
            dbname=dbname,
            require_auth="scram-sha-256",
            connect_timeout=5,
        )
        assert conn.pgconn.used_password
        return conn

    def can_login(self, login: str, password: str, dbname: str = "postgres") -> bool:
        """True when the login works; False only on an authentication refusal."""
        try:
            self.connect_as(login, password, dbname).close()
        except psycopg.OperationalError as exc:
            text = str(exc)
            assert "password authentication failed" in text, text
            return False
        return True

    def authid(self) -> dict[str, tuple[str, str | None, bool]]:
        """Every role: (xmin, rolpassword, rolcanlogin)."""
        with self.admin_conn() as conn:
            rows = conn.execute(
                "SELECT rolname, xmin::text, rolpassword, rolcanlogin FROM pg_authid"
            ).fetchall()
        return {r[0]: (r[1], r[2], r[3]) for r in rows}

    def next_xid(self) -> int:
        """The next transaction id; unchanged means nobody wrote anything."""
        with self.admin_conn() as conn:
            row = conn.execute("SELECT pg_snapshot_xmax(pg_current_snapshot())::text").fetchone()
        assert row is not None
        return int(row[0])

    def db_owner(self, dbname: str) -> str | None:
        with self.admin_conn() as conn:
            row = conn.execute(
                "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = %s", [dbname]
            ).fetchone()
        return None if row is None else str(row[0])


def outcomes(report: Report) -> dict[str, str]:
    """login -> outcome."""
    return {o.login: o.outcome for o in report.outcomes}


@pytest.fixture
def mesh(pg_clean: Cluster, tmp_path: Path) -> Iterator[Mesh]:
    folder = tmp_path / "db1" / "postgres"
    folder.mkdir(parents=True)
    admin = pg_clean.write_admin_file(tmp_path / "admin.conninfo")
    yield Mesh(folder=folder, cluster=pg_clean, admin=admin)
