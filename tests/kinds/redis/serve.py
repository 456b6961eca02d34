"""Redis's fixture object for the contract suite: Debian's redis-server with TLS and an aclfile
(the lab's), on loopback, logging at debug level with every command in SLOWLOG, so that what
the provisioner sends would show in what the suite reads."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from meshtui.kinds import registry
from meshtui.kinds.kind import Kind
from meshtui.kinds.redis import lab as lab_redis

ACL_WRITES = ("setuser", "deluser", "save", "load", "dryrun")
"""The ACL subcommands that change users (``footprint`` counts their calls)."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class RedisServer:
    """The contract suite's :class:`~tests.kinds.contract.Server` for Redis."""

    server: lab_redis.RedisServer
    kind: Kind = registry.KINDS["redis"]
    host: str = "127.0.0.1"
    tls: bool = True

    @property
    def admin(self) -> Path:
        return self.server.admin_file

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def ca(self) -> str | None:
        return str(self.server.ca)

    def _admin(self) -> redis.Redis:
        url = self.server.lab_file.read_text()  # the lab user: every right (flush, config)
        return redis.Redis.from_url(url, decode_responses=True, protocol=2)

    def _as(self, login: str, password: str) -> redis.Redis:
        return redis.Redis(
            host=self.host,
            port=self.port,
            username=login,
            password=password,
            ssl=True,
            ssl_ca_certs=self.ca,
            decode_responses=True,
            protocol=2,
            socket_timeout=5,
            retry=Retry(NoBackoff(), 0),
            single_connection_client=True,
        )

    def _loud(self) -> None:
        with self._admin() as admin:
            admin.config_set("slowlog-log-slower-than", 0)  # every command goes to SLOWLOG
            admin.config_set("loglevel", "debug")

    def reset(self) -> None:
        with self._admin() as admin:
            for user in admin.acl_users():
                if user not in ("default", lab_redis.ADMIN_USER, lab_redis.LAB_USER):
                    admin.acl_deluser(user)
            admin.flushall()
            admin.acl_log_reset()
            admin.slowlog_reset()
            admin.acl_save()

    def values(self, login: str) -> dict[str, str]:
        return {}  # keys <login>:* by default: room for its data

    def unholdable(self) -> str:
        return "has space"  # an ACL user name cannot hold a space

    def can_login(self, login: str, password: str) -> bool:
        try:
            client = self._as(login, password)  # one connection, AUTH on connect
        except redis.AuthenticationError as exc:
            if "WRONGPASS" in str(exc) or "invalid username-password pair" in str(exc):
                return False
            raise
        client.close()
        return True

    def make_foreign(self, login: str, password: str) -> None:
        with self._admin() as admin:
            admin.execute_command(
                "ACL", "SETUSER", login, "on", f">{password}", "~*", "+@all", "-@dangerous"
            )

    def drift(self, login: str) -> None:
        with self._admin() as admin:
            admin.execute_command("ACL", "SETUSER", login, "resetpass", ">typed-by-hand")

    def put_data(self, login: str, password: str) -> None:
        with self._as(login, password) as client:
            client.set(f"{login}:kept", "keep me")

    def data_kept(self, login: str) -> bool:
        with self._admin() as admin:
            return bool(admin.get(f"{login}:kept") == "keep me")

    def open_session(self, login: str, password: str) -> Any:
        client = self._as(login, password)
        client.ping()
        return client

    def session_alive(self, session: Any) -> bool:
        try:
            session.ping()
        except redis.RedisError:
            return False
        return True

    def close_session(self, session: Any) -> None:
        session.close()

    def footprint(self) -> object:
        with self._admin() as admin:
            stats = admin.info("commandstats")
            users = admin.acl_list()
        writes = {k: stats.get(f"cmdstat_acl|{k}", {}).get("calls") for k in ACL_WRITES}
        return self.server.aclfile.read_bytes(), users, writes

    def log_mark(self) -> object:
        with self._admin() as admin:
            admin.slowlog_reset()
            admin.acl_log_reset()
        return self.server.log.stat().st_size

    def log_since(self, mark: object) -> str:
        assert isinstance(mark, int)
        with self.server.log.open("rb") as fh:
            fh.seek(mark)
            text = fh.read().decode("utf-8", "replace")
        with self._admin() as admin:
            acl_log = repr(admin.execute_command("ACL", "LOG"))
            slowlog = repr(admin.execute_command("SLOWLOG", "GET", "-1"))
        return "\n".join((text, acl_log, slowlog))

    def stored(self, login: str) -> list[str]:
        with self._admin() as admin:
            user = admin.acl_getuser(login) or {}
        return [str(p) for p in user.get("passwords", [])]

    def restart(self) -> None:
        self.server.stop()
        self.server.start()  # loads its aclfile
        self._loud()

    @contextmanager
    def down(self) -> Iterator[None]:
        self.server.stop()
        try:
            yield
        finally:
            self.server.start()
            self._loud()


@contextmanager
def serve(tmp: Path) -> Iterator[RedisServer]:
    """A lab Redis of its own on loopback, stopped after."""
    if not lab_redis.available():
        pytest.skip("redis-server or openssl is not installed (apt-get install redis-server)")
    server = lab_redis.create(tmp / "redis", address="127.0.0.1", port=_free_port())
    server.start()
    try:
        fixture = RedisServer(server)
        fixture._loud()
        yield fixture
    finally:
        server.stop()
