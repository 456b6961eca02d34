"""What a Redis consumer's connection file holds: its ACL user, host, port, database, CA and a
``rediss://USER@HOST:PORT/0`` URL with no password in it. Core: pure."""

from __future__ import annotations

from urllib.parse import quote

from meshtui.kinds.kind import Connection, ConnectionFacts


def connection(facts: ConnectionFacts) -> Connection:
    """username, host, port, db, tls, ca and the URL (the password stays in its own file)."""
    db = "0"  # ACL users are not per database: the first one, which every client opens
    scheme = "rediss" if facts.tls else "redis"
    host = f"[{facts.host}]" if ":" in facts.host else facts.host
    url = f"{scheme}://{quote(facts.login, safe='')}@{host}:{facts.port}/{db}"
    if facts.tls and facts.ca:
        url += f"?ssl_ca_certs={quote(facts.ca, safe='/')}"
    fields = {
        "username": facts.login,
        "host": facts.host,
        "port": str(facts.port),
        "db": db,
        "tls": "true" if facts.tls else "false",
    }
    if facts.ca:
        fields["ca"] = facts.ca
    fields |= {"url": url, "password_file": facts.password_file}
    env = {f"REDIS_{k.upper()}": v for k, v in fields.items()}
    return Connection(fields=fields, env=env, dsn=url)
