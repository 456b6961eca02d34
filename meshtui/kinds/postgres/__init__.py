"""PostgreSQL as a provider kind: logins are roles with a SCRAM verifier set from the client.

The package: ``adapter.py`` (the provisioner's adapter; ``scram.py`` the verifier, ``quiet.py``
logging lowered, ``hba.py`` the pin block of pg_hba.conf, ``warm.py`` admin sessions kept by an
agent), ``probe.py`` (one SCRAM login and its control), ``doctor.py`` (what the admin role
lacks), ``lab.py`` (an embedded or Debian PostgreSQL for the lab and the tests). This file holds
the record only; everything else is loaded when a layer asks for it.
"""

from __future__ import annotations

from collections.abc import Mapping

from meshtui.kinds.kind import Kind, Ref
from meshtui.kinds.postgres.connection import connection


def _dbname(login: str, values: Mapping[str, str]) -> str:
    """A probe logs in to the consumer's own database, else the server's ``postgres``."""
    return values.get("database") or "postgres"


ADMIN_EXAMPLE = (
    "host=10.0.0.2 dbname=postgres user=meshtui_admin password=… sslmode=verify-full "
    "sslrootcert=/etc/ssl/meshtui/ca.pem (meshtui kind config postgres prints it)"
)
"""One admin file's text with no real secret: the least-privilege admin over verified TLS that
``meshtui kind config postgres`` makes, never a superuser over the socket."""

FINISH_NAME = "pg_hba.conf"
"""The report line of the kind's after-run step (:func:`meshtui.kinds.postgres.hba.finish`)."""

KIND = Kind(
    name="postgres",
    title="PostgreSQL",
    port=5432,
    login_word="role",
    admin_word="admin conninfo",
    admin_fix='set admin = "/path/admin.conninfo" (a 0600 file)',
    admin_example=ADMIN_EXAMPLE,
    adapter=Ref("meshtui.kinds.postgres.adapter", "PostgresAdapter"),
    kept=Ref("meshtui.kinds.postgres.warm", "WarmSessions"),
    finish=Ref("meshtui.kinds.postgres.hba", "finish"),
    finish_name=FINISH_NAME,
    probe=Ref("meshtui.kinds.postgres.probe", "probe"),
    doctor=Ref("meshtui.kinds.postgres.doctor", "admin_rights"),
    lab=Ref("meshtui.kinds.postgres.lab", "LAB"),
    dbname=_dbname,
    connection=connection,
    units=("pg_service",),
    server_config=Ref("meshtui.kinds.postgres.server_config", "RECIPE"),
)
