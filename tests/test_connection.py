"""What each kind writes into a connection file, in each format: no password, and names the
client reads (libpq's PG* variables and conninfo, a Redis URL with the user and no password)."""

from __future__ import annotations

import json

from meshtui.controller.plan.connection_file import render
from meshtui.kinds import registry
from meshtui.kinds.kind import ConnectionFacts


def facts(**kw: object) -> ConnectionFacts:
    base: dict[str, object] = {
        "login": "gitea_app1_3f9a2c", "host": "10.0.0.2", "port": 5432,
        "values": {"database": "gitea"}, "ca": None, "tls": False,
        "password_file": "/etc/gitea/db.password",
    } | kw  # fmt: skip
    return ConnectionFacts(**base)  # type: ignore[arg-type]


def test_postgres_in_every_format() -> None:
    kind = registry.kind_of("postgres")
    assert kind.connection is not None
    c = kind.connection(facts(ca="/etc/ssl/pg ca.pem"))
    env = render(c, "env").decode()
    assert "PGUSER=gitea_app1_3f9a2c\n" in env and "PGDATABASE=gitea\n" in env
    assert 'PGSSLROOTCERT="/etc/ssl/pg ca.pem"\n' in env and "PGSSLMODE=verify-full" in env
    assert render(c, "dsn").decode() == (
        "user=gitea_app1_3f9a2c host=10.0.0.2 port=5432 dbname=gitea sslmode=verify-full "
        "sslrootcert='/etc/ssl/pg ca.pem'\n"
    )
    assert json.loads(render(c, "json"))["password_file"] == "/etc/gitea/db.password"


def test_redis_url_names_the_user_and_no_password() -> None:
    kind = registry.kind_of("redis")
    assert kind.connection is not None
    c = kind.connection(facts(port=6379, values={}, ca="/etc/meshtui/redis-ca.pem", tls=True))
    assert render(c, "dsn").decode() == (
        "rediss://gitea_app1_3f9a2c@10.0.0.2:6379/0?ssl_ca_certs=/etc/meshtui/redis-ca.pem\n"
    )
    env = render(c, "env").decode()
    assert (
        "REDIS_USERNAME=gitea_app1_3f9a2c\n" in env and "REDIS_CA=/etc/meshtui/redis-ca.pem" in env
    )
