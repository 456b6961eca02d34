"""A real Redis 7 (Debian's redis-server) on loopback with TLS and an aclfile, and a provider
folder (manifest + secret files) beside it, written as the provider's agent would.

One server per module (``redis_server``); ``rmesh`` empties its users and keys between tests.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from meshtui.kinds.redis import lab as lab_redis
from meshtui.provisioner.harness import Report, reconcile
from tests.fix_manifest import ManifestFolder

PROVIDER = "db1/redis"
PROVISION = "cache"

if shutil.which("redis-server") is None:
    pytest.skip(
        "redis-server is not installed (apt-get install redis-server)", allow_module_level=True
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def admin_url(server: lab_redis.RedisServer) -> str:
    return server.admin_file.read_text()


def admin_client(server: lab_redis.RedisServer) -> redis.Redis:
    """A client of the lab user, with every right (the provisioner's admin has the ACL alone)."""
    return redis.Redis.from_url(server.lab_file.read_text(), decode_responses=True, protocol=2)


def client_as(server: lab_redis.RedisServer, login: str, password: str) -> redis.Redis:
    """A consumer's connection over TLS, verifying the lab CA; AUTH happens on connect."""
    client = redis.Redis(
        host=server.address,
        port=server.port,
        username=login,
        password=password,
        ssl=True,
        ssl_ca_certs=str(server.ca),
        decode_responses=True,
        protocol=2,
        socket_timeout=5,
        retry=Retry(NoBackoff(), 0),
    )
    return client


def can_auth(server: lab_redis.RedisServer, login: str, password: str) -> bool:
    """True when AUTH works; False only on WRONGPASS (anything else fails the test)."""
    client = client_as(server, login, password)
    try:
        client.ping()
    except redis.AuthenticationError as exc:
        assert "invalid username-password pair" in str(exc) or "WRONGPASS" in str(exc), str(exc)
        return False
    finally:
        client.close()
    return True


@pytest.fixture(scope="module")
def redis_server() -> Iterator[lab_redis.RedisServer]:
    # under a folder the server's own user may pass through (it runs as meshtui_redis as root)
    base = Path(tempfile.mkdtemp(prefix="meshtui-redis-"))
    base.chmod(0o711)
    server = lab_redis.create(base / "srv", address="127.0.0.1", port=free_port())
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


@dataclass
class RMesh(ManifestFolder):
    """Writes a Redis manifest and secrets like the provider's agent, and looks at Redis."""

    server: lab_redis.RedisServer
    admin: Path

    def add(
        self,
        node: str,
        module: str,
        login: str | None = None,
        *,
        values: dict[str, str] | None = None,
        write_secret: bool = True,
    ) -> dict[str, Any]:
        login = f"{module}_{node}_x" if login is None else login
        return self.consumer(node, module, login, values=values, write_secret=write_secret)

    def write(self, *, provider: str = PROVIDER, provision: str = PROVISION) -> Path:
        return self.write_manifest(kind="redis", provider=provider, provision=provision)

    def reconcile(self, **kwargs: Any) -> Report:
        self.write(**kwargs)
        return reconcile(self.manifest, self.admin)

    def can_auth(self, node: str, module: str, password: str | None = None) -> bool:
        login = self.login_of(node, module)
        return can_auth(self.server, login, password or self.password(node, module))

    def redis(self) -> redis.Redis:
        """An admin client (close it)."""
        return admin_client(self.server)


def outcomes(report: Report) -> dict[str, str]:
    return {o.login: o.outcome for o in report.outcomes}


def reset_server(server: lab_redis.RedisServer) -> None:
    """Every user but default and the admin deleted, every key flushed, logs emptied."""
    with admin_client(server) as admin:
        for user in admin.acl_users():
            if user not in ("default", lab_redis.ADMIN_USER, lab_redis.LAB_USER):
                admin.acl_deluser(user)
        admin.flushall()
        admin.acl_log_reset()
        admin.slowlog_reset()
        admin.acl_save()


@pytest.fixture
def rmesh(redis_server: lab_redis.RedisServer, tmp_path: Path) -> Iterator[RMesh]:
    reset_server(redis_server)
    folder = tmp_path / "db1" / "redis"
    folder.mkdir(parents=True)
    yield RMesh(folder=folder, server=redis_server, admin=redis_server.admin_file)


def run_redis(folder: Path, *args: str) -> subprocess.Popen[bytes]:
    """A bare redis-server on loopback with the given arguments (for servers built wrong)."""
    return subprocess.Popen(
        ["redis-server", *args, "--dir", str(folder), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=folder,
    )
