"""PostgreSQL's fixture object for the contract suite: the embedded PostgreSQL 18, scram only, on
loopback, logging every statement (``log_statement = all``) so that what the provisioner sends is
in the log for the suite to read."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from meshtui.kinds import registry
from meshtui.kinds.kind import Kind
from meshtui.kinds.postgres.lab import Cluster
from tests.fix_pg import reset_cluster, start_cluster


@dataclass
class PostgresServer:
    """The contract suite's :class:`~tests.kinds.contract.Server` for PostgreSQL."""

    cluster: Cluster
    admin: Path
    kind: Kind = registry.KINDS["postgres"]
    host: str = "127.0.0.1"
    ca: str | None = None
    tls: bool = False

    @property
    def port(self) -> int:
        return self.cluster.port

    def _admin(self, dbname: str = "postgres") -> psycopg.Connection[Any]:
        return psycopg.connect(self.cluster.admin_conninfo(), dbname=dbname, autocommit=True)

    def _as(self, login: str, password: str, dbname: str) -> psycopg.Connection[Any]:
        return psycopg.connect(
            host=self.host,
            port=self.port,
            user=login,
            password=password,
            dbname=dbname,
            require_auth="scram-sha-256",
            connect_timeout=5,
            autocommit=True,
        )

    def reset(self) -> None:
        reset_cluster(self.cluster)

    def values(self, login: str) -> dict[str, str]:
        return {"database": login}  # its own database: somewhere to keep its data

    def unholdable(self) -> str:
        return "a" * 64  # 64 bytes: PostgreSQL would truncate it to 63

    def can_login(self, login: str, password: str) -> bool:
        try:
            self._as(login, password, "postgres").close()
        except psycopg.OperationalError as exc:
            if "password authentication failed" in str(exc):
                return False
            raise
        return True

    def make_foreign(self, login: str, password: str) -> None:
        with self._admin() as conn:
            conn.execute(
                sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                    sql.Identifier(login), sql.Literal(password)
                )
            )

    def drift(self, login: str) -> None:
        with self._admin() as conn:
            conn.execute(
                sql.SQL("ALTER ROLE {} PASSWORD 'typed-by-hand'").format(sql.Identifier(login))
            )

    def put_data(self, login: str, password: str) -> None:
        with self._as(login, password, login) as conn:
            conn.execute("CREATE TABLE kept (x text)")
            conn.execute("INSERT INTO kept VALUES ('keep me')")

    def data_kept(self, login: str) -> bool:
        with self._admin(login) as conn:
            return conn.execute("SELECT x FROM kept").fetchall() == [("keep me",)]

    def open_session(self, login: str, password: str) -> Any:
        return self._as(login, password, login)

    def session_alive(self, session: Any) -> bool:
        try:
            session.execute("SELECT 1")
        except psycopg.OperationalError:
            return False
        return True

    def close_session(self, session: Any) -> None:
        session.close()

    def footprint(self) -> object:
        with self._admin() as conn:
            roles = conn.execute(
                "SELECT rolname, xmin::text, rolpassword, rolcanlogin FROM pg_authid ORDER BY 1"
            ).fetchall()
            xid = conn.execute("SELECT pg_snapshot_xmax(pg_current_snapshot())::text").fetchone()
        return roles, xid

    def log_mark(self) -> object:
        return self.cluster.log_path.stat().st_size

    def log_since(self, mark: object) -> str:
        assert isinstance(mark, int)
        with self.cluster.log_path.open("rb") as fh:
            fh.seek(mark)
            return fh.read().decode("utf-8", "replace")

    def stored(self, login: str) -> list[str]:
        with self._admin() as conn:
            row = conn.execute(
                "SELECT rolpassword FROM pg_authid WHERE rolname = %s", [login]
            ).fetchone()
        return [str(row[0])] if row and row[0] else []

    def restart(self) -> None:
        self.cluster.stop()
        self.cluster.start()

    @contextmanager
    def down(self) -> Iterator[None]:
        self.cluster.stop()
        try:
            yield
        finally:
            self.cluster.start()


@contextmanager
def serve(tmp: Path) -> Iterator[PostgresServer]:
    """A cluster of its own, logging every statement, stopped and removed after."""
    cluster, base = start_cluster("18", log_statement="all")
    try:
        yield PostgresServer(cluster, cluster.write_admin_file(tmp / "admin.conninfo"))
    finally:
        try:
            cluster.stop()
        finally:
            shutil.rmtree(base, ignore_errors=True)
