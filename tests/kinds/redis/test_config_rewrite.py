"""No value a consumer declares can keep a config-file Redis from starting again.

A Redis started from a config file with no aclfile persists its users with ``CONFIG REWRITE``,
which writes each user's rules into ``redis.conf`` as they are; at the next start that file is
read back with ``sdssplitargs``, where an unbalanced ``"`` or ``'`` is a fatal error. The
reviewer declared ``keys = 'jobs:* sess"x'``: meshtui reported success and the restart failed
("Unbalanced quotes in configuration line"). Here a real redis-server with a config file takes
a consumer with each such value through the real adapter, is restarted, and must start.
"""

from __future__ import annotations

import secrets
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from meshtui.contracts.adapter import Refused, Scope
from meshtui.controller.plan import declaration
from meshtui.errors import DeclarationError
from meshtui.kinds.redis.acl import ValuesError, name_problem, rules_for
from meshtui.kinds.redis.adapter import RedisAdapter
from tests.fix_mesh import Mesh

from .conftest import PROVIDER, PROVISION, free_port
from .test_declaration import redis_spec

UNROUNDTRIPPABLE = ['sess"x', "sess'x", "a\\b", 'x"']


@pytest.mark.parametrize("pattern", UNROUNDTRIPPABLE)
@pytest.mark.parametrize("key", ["keys", "channels"])
def test_a_quote_or_backslash_in_a_pattern_is_refused(key: str, pattern: str) -> None:
    with pytest.raises(ValuesError, match=key):
        rules_for("w", {key: f"jobs:* {pattern}"})


@pytest.mark.parametrize("name", ['a"b', "a'b", "a\\b"])
def test_a_quote_or_backslash_in_a_user_name_is_refused(name: str) -> None:
    assert name_problem(name) is not None


class ConfigRedis:
    """A redis-server started from a config file with no aclfile (it persists by CONFIG REWRITE)."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.port = folder, free_port()
        self.password = secrets.token_urlsafe(24)
        self.conf = folder / "redis.conf"
        self.conf.write_text(
            f'port {self.port}\nbind 127.0.0.1\nsave ""\nappendonly no\ndir {folder}\n'
            "user default off resetkeys resetchannels -@all\n"
            f"user boss on >{self.password} ~* &* +@all\n"
        )
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> bool:
        """Start it; False when it exited instead (its log says why)."""
        log = open(self.folder / "redis.log", "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(
            ["redis-server", str(self.conf)], stdout=log, stderr=log, stdin=subprocess.DEVNULL
        )
        log.close()
        for _ in range(200):
            if self.proc.poll() is not None:
                return False
            try:
                self.client().ping()
                return True
            except redis.ConnectionError:
                time.sleep(0.05)
        return False

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, username="boss", password=self.password)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)

    def url(self) -> str:
        return f"redis://boss:{self.password}@127.0.0.1:{self.port}/0"


@pytest.fixture
def config_redis(tmp_path: Path) -> Iterator[ConfigRedis]:
    server = ConfigRedis(tmp_path)
    assert server.start(), (tmp_path / "redis.log").read_text()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.parametrize("key", ["keys", "channels"])
def test_a_quoted_pattern_cannot_keep_redis_from_restarting(
    config_redis: ConfigRedis, key: str
) -> None:
    adapter = RedisAdapter(config_redis.url(), Scope(PROVIDER, PROVISION))
    try:
        good = adapter.create("good_app1_x", secrets.token_urlsafe(32), {"keys": "good:*"})
        assert good.outcome == "created"
        try:
            adapter.create("worker_app1_x", secrets.token_urlsafe(32), {key: 'jobs:* sess"x'})
        except Refused as refused:
            assert key in str(refused)
    finally:
        adapter.close()  # persists: CONFIG REWRITE
    assert "good_app1_x" in config_redis.conf.read_text()
    config_redis.stop()
    restarted = config_redis.start()
    log = (config_redis.folder / "redis.log").read_text()
    assert restarted, f"Redis does not start again after CONFIG REWRITE:\n{log[-600:]}"
    assert "worker_app1_x" not in config_redis.client().acl_users()
    assert "good_app1_x" in config_redis.client().acl_users()


def test_a_quoted_pattern_is_refused_at_declare(mesh: Mesh) -> None:
    spec = redis_spec(mesh)
    spec["modules"]["app2/wiki"]["requires"][0]["values"] = {"keys": 'wiki:* sess"x'}
    with pytest.raises(DeclarationError) as info:
        declaration.load(mesh.write(spec))
    assert "app2/wiki" in str(info.value) and "quote" in str(info.value)
