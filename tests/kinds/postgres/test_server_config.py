"""What ``meshtui kind config postgres`` prints raises Debian's PostgreSQL 15 as the walk has it:
its ``conf.d`` settings (TLS on the private address, SCRAM), its ``pg_hba.conf`` lines and its
admin SQL, then the printed admin file logs in over verified TLS; without TLS it is refused.

Only the paths and the address are this test's (loopback, a free port, a lab CA); the cluster
is the lab's (``create_cluster``: its peer line for the ``postgres`` role stays first)."""

from __future__ import annotations

import dataclasses
import secrets
import shutil
import tempfile
from pathlib import Path

import psycopg
import pytest

from meshtui.contracts.server_config import PASSWORD
from meshtui.kinds.postgres import server_config
from meshtui.kinds.postgres.lab import CONF_NAME, create_cluster
from meshtui.lab.certificates import make_certificates
from tests.fix_pg import BINARIES, free_port

DEBIAN = BINARIES["15"]


@pytest.mark.skipif(
    DEBIAN is None or not (DEBIAN / "postgres").exists(), reason="Debian's postgresql-15"
)
def test_the_printed_config_serves_tls_and_scram_and_its_admin_logs_in() -> None:
    base = Path(tempfile.mkdtemp(prefix="meshtui-pgconf-"))
    base.chmod(0o711)
    try:
        cluster = create_cluster(base / "data", port=free_port(), bindir=DEBIAN)
        tls = base / "tls"
        tls.mkdir()
        make_certificates(tls, "127.0.0.1", server="PostgreSQL")
        for name in ("server.pem", "server.key"):  # its own user's, 0600, in its own folder
            cluster._write_owned(name, (tls / name).read_text())
        place = dataclasses.replace(
            server_config.DEFAULT,
            address="127.0.0.1",
            port=cluster.port,
            cert=str(cluster.datadir / "server.pem"),
            key=str(cluster.datadir / "server.key"),
            ca=str(tls / "ca.pem"),
            networks=("127.0.0.0/8",),
        )
        printed = server_config.build(place)
        with cluster._folder() as folder:
            conf = folder.read(CONF_NAME, 1 << 20).decode()
        cluster._write_owned(CONF_NAME, conf + printed.file("meshtui.conf").text)
        hba = printed.file("pg_hba.meshtui").text
        cluster._write_owned("pg_hba.conf", "local all postgres peer map=admin\n" + hba)
        cluster.start()
        try:
            password = secrets.token_urlsafe(24)
            with psycopg.connect(cluster.admin_conninfo(), autocommit=True) as conn:
                for statement in printed.file("meshtui-admin.sql").text.split(";"):
                    lines = [ln for ln in statement.splitlines() if not ln.startswith("--")]
                    if "".join(lines).strip():
                        conn.execute("\n".join(lines))
                conn.execute(f"ALTER ROLE {place.admin} PASSWORD '{password}'")
            conninfo = printed.file("admin.conninfo").text.strip().replace(PASSWORD, password)
            with psycopg.connect(conninfo, autocommit=True) as conn:
                row = conn.execute(
                    "SELECT current_user, ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"
                ).fetchone()
                assert row == (place.admin, True)
                method = conn.execute("SHOW password_encryption").fetchone()
                assert method == ("scram-sha-256",)
            plain = conninfo.replace("sslmode=verify-full", "sslmode=disable")
            with pytest.raises(psycopg.OperationalError, match="no pg_hba.conf entry"):
                psycopg.connect(plain).close()
        finally:
            cluster.stop()
    finally:
        shutil.rmtree(base, ignore_errors=True)
