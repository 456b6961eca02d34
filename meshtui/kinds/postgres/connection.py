"""What a PostgreSQL consumer's connection file holds: libpq's own names (``PGHOST`` ...,
a ``host=... dbname=...`` conninfo), so an app or ``psql`` reads it as it is. Core: pure."""

from __future__ import annotations

import re

from meshtui.kinds.kind import Connection, ConnectionFacts

_PLAIN = re.compile(r"[^\s'\\]+")


def _conninfo_value(value: str) -> str:
    """A libpq conninfo value, quoted when it must be."""
    if _PLAIN.fullmatch(value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def connection(facts: ConnectionFacts) -> Connection:
    """user, host, port, dbname, and with a CA sslmode=verify-full and sslrootcert."""
    fields = {
        "user": facts.login,
        "host": facts.host,
        "port": str(facts.port),
        "dbname": facts.values.get("database") or "postgres",
    }
    if facts.ca:
        fields |= {"sslmode": "verify-full", "sslrootcert": facts.ca}
    dsn = " ".join(f"{k}={_conninfo_value(v)}" for k, v in fields.items())
    env = {f"PG{k.upper()}": v for k, v in fields.items()}
    env["PGDATABASE"] = env.pop("PGDBNAME")
    fields["password_file"] = facts.password_file
    env["PGPASSWORD_FILE"] = facts.password_file
    return Connection(fields=fields, env=env, dsn=dsn)
