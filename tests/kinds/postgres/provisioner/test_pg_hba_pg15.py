"""The pin tests again, against Debian's PostgreSQL 15 (no ``include`` in pg_hba.conf, an older
pg_hba_file_rules): the same marker block must work there too."""

from __future__ import annotations

import inspect
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from meshtui.kinds.postgres.lab import Cluster, create_cluster
from tests.fix_pg import free_port, reset_cluster
from tests.kinds.postgres.provisioner.test_pg_hba_cluster import (  # noqa: F401  (collected here on 15)
    cluster_version,
    hba,
    test_a_broken_pg_hba_conf_changes_nothing_and_is_reported,
    test_a_rotation_leaves_pg_hba_conf_alone,
    test_pg_hba_file_rules_sees_our_lines_on_this_server,
    test_pin_allows_the_consumers_address_only,
    test_pin_turned_off_takes_the_block_away,
    test_removal_takes_the_line_away,
)
from tests.provisioner.conftest import Mesh

PG15_BIN = Path("/usr/lib/postgresql/15/bin")


@pytest.fixture(scope="module")
def pg15() -> Iterator[Cluster]:
    """A started PostgreSQL 15 cluster for this module, from Debian's binaries."""
    if not (PG15_BIN / "postgres").exists():
        pytest.skip(
            f"Debian's PostgreSQL 15 is not installed ({PG15_BIN}; apt-get install postgresql-15)"
        )
    if "bindir" not in inspect.signature(create_cluster).parameters:
        pytest.skip(
            "meshtui.kinds.postgres.lab.create_cluster has no bindir option yet (another branch)"
        )
    base = Path(tempfile.mkdtemp(prefix="meshtui-pg15-"))
    base.chmod(0o711)
    cluster = create_cluster(base / "data", port=free_port(), bindir=PG15_BIN)  # type: ignore[call-arg]
    try:
        cluster.start()
        assert cluster_version(cluster) == 15
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def mesh(pg15: Cluster, tmp_path: Path) -> Iterator[Mesh]:
    """The conftest's provider folder, beside PostgreSQL 15 instead of the embedded server."""
    reset_cluster(pg15)
    folder = tmp_path / "db1" / "postgres"
    folder.mkdir(parents=True)
    admin = pg15.write_admin_file(tmp_path / "admin.conninfo")
    yield Mesh(folder=folder, cluster=pg15, admin=admin)
    reset_cluster(pg15)


def test_it_is_version_15(mesh: Mesh) -> None:
    with psycopg.connect(mesh.cluster.admin_conninfo()) as conn:
        row = conn.execute("SHOW server_version_num").fetchone()
    assert row is not None and int(row[0]) // 10000 == 15
