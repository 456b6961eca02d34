"""PostgreSQL fixtures: one real, scram-only server per test session, from the embedded wheel.

``pg`` is the started :class:`~meshtui.lab.postgres.Cluster` (127.0.0.1, a free port, a data
folder under /tmp the server user can enter); ``pg_admin_file`` is its admin conninfo in a 0600
file; ``pg_clean`` gives a test a cluster with no roles or databases left by earlier tests.
"""

from __future__ import annotations

import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from meshtui.lab.postgres import Cluster, create_cluster


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def pg() -> Iterator[Cluster]:
    """A started cluster for the whole session, stopped and deleted at the end."""
    # pytest's own tmp folders are 0700 under /tmp/pytest-of-root, which the server user
    # cannot enter; a folder of our own under /tmp, opened for traversal only, can be.
    base = Path(tempfile.mkdtemp(prefix="meshtui-pg-"))
    base.chmod(0o711)
    cluster = create_cluster(base / "data", port=free_port())
    try:
        cluster.start()
        # tests prove "nothing was written" by transaction ids; autovacuum's ANALYZE of the
        # catalogs would take some of its own at random moments
        cluster.set_config(autovacuum="off")
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def pg_admin_file(pg: Cluster, tmp_path: Path) -> Path:
    """The session cluster's admin conninfo, in a 0600 file."""
    return pg.write_admin_file(tmp_path / "admin.conninfo")


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
