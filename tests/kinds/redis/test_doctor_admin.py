"""doctor logs in with a Redis provider's admin URL (a wrong password must fail doctor, not the first
rotation) and names what is wrong with a command that fixes it. Real Redis."""

from __future__ import annotations

import hashlib
import secrets
from pathlib import Path
from urllib.parse import quote

from meshtui.atomic import write_private
from meshtui.kinds import registry
from meshtui.kinds.redis import lab as lab_redis
from meshtui.protocol.messages import CheckProvider
from tests.kinds.redis.conftest import admin_client

ITEM = CheckProvider(
    provider="db1/redis", admin=None, builtin=True, databases=False, pin=False, kind="redis"
)


def check(path: Path) -> list[tuple[str, str]]:
    kind = registry.kind_of("redis")
    assert kind.doctor is not None
    return list(kind.doctor.load()(ITEM, path, 5.0))


def url_for(server: lab_redis.RedisServer, user: str, password: str) -> str:
    return (
        f"rediss://{user}:{quote(password, safe='')}@{server.address}:{server.port}/0"
        f"?ssl_ca_certs={quote(str(server.ca), safe='/')}"
    )


def test_a_good_admin_passes(redis_server: lab_redis.RedisServer) -> None:
    assert check(redis_server.admin_file) == []


def test_a_wrong_password_is_named_with_the_fix(
    redis_server: lab_redis.RedisServer, tmp_path: Path
) -> None:
    admin = tmp_path / "admin.url"
    write_private(admin, url_for(redis_server, "meshtui-admin", "not-the-password").encode())
    ((problem, fix),) = check(admin)
    assert "the admin meshtui-admin cannot use Redis" in problem
    assert "not-the-password" not in problem + fix
    assert str(admin) in fix


def test_an_admin_without_acl_rights_gets_a_grant(
    redis_server: lab_redis.RedisServer, tmp_path: Path
) -> None:
    password = secrets.token_urlsafe(16)
    digest = hashlib.sha256(password.encode()).hexdigest()
    with admin_client(redis_server) as admin:
        admin.execute_command("ACL", "SETUSER", "weak-admin", "on", f"#{digest}", "~*", "+@read")
    try:
        path = tmp_path / "weak.url"
        write_private(path, url_for(redis_server, "weak-admin", password).encode())
        ((problem, fix),) = check(path)
        assert "weak-admin" in problem or "NOPERM" in problem, problem
        assert fix.startswith("ACL SETUSER ") and "+acl" in fix
    finally:
        with admin_client(redis_server) as admin:
            admin.execute_command("ACL", "DELUSER", "weak-admin")
