"""The lab's Redis runs as a system user of its own, and a consumer runs no Lua by default.

The reviewer found the lab's ``redis-server`` running as root while every consumer login could
``EVAL``: any Redis bug reachable by a consumer would have been root on the host. Here a real
lab Redis is started as root; its process must belong to its own unprivileged user (in a
session of its own), and a consumer provisioned with the default rules is refused ``EVAL``.
"""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest
import redis

from meshtui.kinds.redis import lab as lab_redis

from .conftest import RMesh, client_as

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (a system user)")


def _stat_fields(pid: int) -> list[str]:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2 :].split()


def test_the_lab_redis_runs_as_its_own_user(redis_server: lab_redis.RedisServer) -> None:
    pid = redis_server.pid()
    assert pid is not None
    uid = os.stat(f"/proc/{pid}").st_uid
    assert uid != 0, "the lab's redis-server runs as root"
    assert pwd.getpwuid(uid).pw_name == lab_redis.SERVER_USER
    fields = _stat_fields(pid)
    assert int(fields[3]) == pid and int(fields[4]) == 0  # leads its own session, no tty
    # what it may write is its own folder; the rest (keys, config, admin URL) stays root's
    assert redis_server.aclfile.parent.stat().st_uid == uid
    for name in ("ca.key", "admin.url"):
        st = (redis_server.folder / name).stat()
        assert st.st_uid == 0 and st.st_mode & 0o077 == 0, name


def test_a_consumer_runs_no_lua_by_default(rmesh: RMesh) -> None:
    rmesh.add("app1", "worker")
    assert rmesh.reconcile().ok
    login = rmesh.login_of("app1", "worker")
    client = client_as(rmesh.server, login, rmesh.password("app1", "worker"))
    try:
        assert client.set(f"{login}:k", "v")
        with pytest.raises(redis.exceptions.NoPermissionError):
            client.eval("return 1", 0)
    finally:
        client.close()
