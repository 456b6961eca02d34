"""A PostgreSQL configured for the mesh (``Kind.server_config``): TLS on the private address,
SCRAM only, ``pg_hba.conf`` lines letting the admin and the consumers' network in, and the
provisioner's admin role with the least it needs.

The admin (:func:`admin_sql`) is not a superuser: ``CREATEROLE`` (make, alter and drop the
logins it manages), ``CREATEDB`` (the databases consumers ask for), ``SET`` on the logging
settings it lowers while it sets a verifier (so none is ever logged), ``pg_signal_backend`` (end
a removed login's sessions), and for ``pin = true`` reading and reloading ``pg_hba.conf``. It
cannot read ``pg_authid``: every password is set again on every run (the report says so). A
superuser works too, and lets ``push`` see drift. ``tests/kinds/postgres/provisioner`` runs the
provisioner as a role made by this very SQL.
"""

from __future__ import annotations

import re

from meshtui.contracts.server_config import (
    PASSWORD,
    ConfigFile,
    ServerConfig,
    ServerPlace,
    ServerRecipe,
)

LOGGING = (
    "log_statement",
    "log_min_duration_statement",
    "log_min_duration_sample",
    "log_transaction_sample_rate",
    "log_min_error_statement",
    "log_parameter_max_length",
)
"""The superuser-only settings that could record a verifier, which the admin lowers for its
own transaction while it sets one (``GRANT SET ON PARAMETER``, PostgreSQL 15+)."""

PIN_GRANTS = (
    "GRANT pg_read_all_settings TO {role};",
    "GRANT SELECT ON pg_hba_file_rules TO {role};",
    "GRANT EXECUTE ON FUNCTION pg_hba_file_rules() TO {role};",
    "GRANT EXECUTE ON FUNCTION pg_reload_conf() TO {role};",
)
"""What ``pin = true`` needs: find and check pg_hba.conf, then reload it."""


def role_ident(name: str) -> str:
    """``name`` as a SQL identifier; ValueError for one that is not a plain role name."""
    if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", name):
        raise ValueError(
            f"admin role {name!r} must be a plain lower-case name (letters, digits, _), "
            "at most 63 bytes"
        )
    return name


def admin_sql(role: str, *, pin: bool = True) -> str:
    """The statements making the provisioner's admin role (no password: set it with
    ``\\password``, which sends only a SCRAM verifier)."""
    r = role_ident(role)
    lines = [
        f"CREATE ROLE {r} LOGIN CREATEROLE CREATEDB;",
        f"GRANT SET ON PARAMETER {', '.join(LOGGING)} TO {r};",
        f"GRANT pg_signal_backend TO {r};",
    ]
    if pin:
        lines.append("-- for pin = true (the provisioner's own block of pg_hba.conf):")
        lines += [grant.format(role=r) for grant in PIN_GRANTS]
    return "\n".join(lines) + "\n"


def hba_lines(place: ServerPlace) -> list[str]:
    """``pg_hba.conf``'s lines for the mesh: the admin from the node itself, consumers from
    their network, SCRAM over TLS only (meshtui's pin block goes before them)."""
    lines = [f"hostssl all {place.admin} {place.address}/32 scram-sha-256"]
    lines += [f"hostssl all all {net} scram-sha-256" for net in place.networks]
    return lines


def conf_lines(place: ServerPlace) -> list[str]:
    """``postgresql.conf`` settings: listen on the private address, TLS, SCRAM verifiers."""
    return [
        f"listen_addresses = '{place.address}'",
        f"port = {place.port}",
        "ssl = on",
        f"ssl_cert_file = '{place.cert}'",
        f"ssl_key_file = '{place.key}'",
        "password_encryption = 'scram-sha-256'",
    ]


def admin_conninfo(place: ServerPlace, password: str) -> str:
    """The provisioner's admin file: one libpq conninfo line, the server verified by the CA."""
    return (
        f"host={place.address} port={place.port} dbname=postgres user={place.admin} "
        f"password={password} sslmode=verify-full sslrootcert={place.ca}"
    )


def build(place: ServerPlace) -> ServerConfig:
    """PostgreSQL's files for ``place`` (see the module docstring)."""
    sql = f"{place.conf}/meshtui-admin.sql"
    return ServerConfig(
        title="PostgreSQL",
        files=(
            ConfigFile(
                "meshtui.conf",
                "read from Debian's conf.d: listen on the private address, TLS, SCRAM",
                "\n".join(conf_lines(place)) + "\n",
                f"{place.conf}/conf.d/meshtui.conf",
                0o644,
            ),
            ConfigFile(
                "pg_hba.meshtui",
                "append to pg_hba.conf: the admin from this node, consumers from their "
                "network, SCRAM over TLS (pin = true puts its own block before every rule)",
                "\n".join(hba_lines(place)) + "\n",
                f"{place.conf}/pg_hba.meshtui",
                0o644,
            ),
            ConfigFile(
                "meshtui-admin.sql",
                "the provisioner's admin role, run once as postgres: CREATEROLE, CREATEDB, the "
                "logging settings it lowers, ending sessions, what pin = true reads and reloads; "
                "not a superuser (one works too, and lets push see drift)",
                admin_sql(place.admin),
                sql,
                0o644,
            ),
            ConfigFile(
                "admin.conninfo",
                "the provisioner's admin file (the declaration's admin): one libpq conninfo line",
                admin_conninfo(place, PASSWORD) + "\n",
                place.admin_file,
                0o600,
                f"set the role's password with runuser -u postgres -- psql -c '\\password "
                f"{place.admin}' (it asks, and sends only a SCRAM verifier), then write the same "
                f"password in {place.admin_file} (umask 077, an editor: never on a command line)",
            ),
        ),
        steps=(
            f"cat {place.conf}/pg_hba.meshtui >> {place.conf}/pg_hba.conf",
            f"chown postgres {place.key}; chmod 0600 {place.key}",
            "systemctl restart postgresql@15-main",
            f"runuser -u postgres -- psql -v ON_ERROR_STOP=1 < {sql}",
            f"runuser -u postgres -- psql -c '\\password {place.admin}'",
        ),
        expires=(
            "nothing of PostgreSQL's own expires; the server certificate does (make a new one "
            "with the same CA, then systemctl reload postgresql@15-main)",
        ),
    )


DEFAULT = ServerPlace(
    address="10.0.0.2",
    port=5432,
    cert="/etc/postgresql/15/main/server.pem",
    key="/etc/postgresql/15/main/server.key",
    ca="/etc/ssl/meshtui/ca.pem",
    conf="/etc/postgresql/15/main",
    data="/var/lib/postgresql",
    admin="meshtui_admin",
    admin_file="/var/lib/meshtui/db1/postgres/admin.conninfo",
    networks=("10.0.0.0/24",),
)
"""The walk's PostgreSQL on db1 (Debian's postgresql-15)."""

RECIPE = ServerRecipe(DEFAULT, build)
"""What ``Kind.server_config`` names."""
