"""What ``meshtui kind config redis`` prints starts Debian's Redis 7.0 as written (TLS only,
the aclfile), and its admin can do what the provisioner does and nothing the manual says it
cannot: no key, no ``FLUSHALL``, no ``CONFIG SET``.

The printed files are the kind's ``server_config``; only the paths and the address are this
test's (loopback, a free port, the lab's certificates), plus where the server keeps its log."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import secrets
import shutil
import tempfile
from pathlib import Path

import pytest
import redis

from meshtui.contracts.adapter import Scope
from meshtui.contracts.server_config import PASSWORD, PASSWORD_SHA256
from meshtui.kinds.redis import lab as lab_redis
from meshtui.kinds.redis import server_config
from meshtui.kinds.redis.adapter import RedisAdapter
from meshtui.lab.foreign import ForeignDir
from tests.kinds.redis.conftest import free_port


def test_the_printed_config_starts_redis_and_its_admin_has_the_acl_alone() -> None:
    port = free_port()
    # under a folder the server's own user may pass through (it runs as meshtui_redis as root)
    base = Path(tempfile.mkdtemp(prefix="meshtui-recipe-"))
    base.chmod(0o711)
    server = lab_redis.create(base / "srv", address="127.0.0.1", port=port)
    place = dataclasses.replace(
        server_config.DEFAULT,
        address="127.0.0.1",
        port=port,
        cert=str(server.folder / "server.pem"),
        key=str(server.folder / "server.key"),
        ca=str(server.ca),
        conf=str(server.data),
        admin_file=str(server.folder / "printed-admin.url"),
    )
    printed = server_config.build(place)
    password = secrets.token_urlsafe(32)
    digest = hashlib.sha256(password.encode()).hexdigest()
    acl = printed.file("users.acl").text.replace(PASSWORD_SHA256, digest)
    owner = server.user
    with ForeignDir(server.data, owner=owner.uid if owner else os.geteuid()) as data:
        data.write(
            "users.acl",
            acl.encode(),
            uid=owner.uid if owner else None,
            gid=owner.gid if owner else None,
        )
    conf = printed.file("meshtui.conf").text
    assert f"aclfile {server.aclfile}\n" in conf and "port 0\n" in conf
    lab_only = f"dir {server.data}\nlogfile {server.log}\npidfile {server.pidfile}\n"
    (server.folder / "redis.conf").write_text(conf + lab_only)
    url = printed.file("admin.url").text.strip().replace(PASSWORD, password)
    server.start()
    try:
        with redis.Redis.from_url(url, decode_responses=True, protocol=2) as admin:
            assert admin.acl_whoami() == place.admin
            admin.acl_setuser("probe_user", enabled=True, passwords=["+x-pw-1"], keys=["p:*"])
            assert "probe_user" in admin.acl_users()
            admin.acl_save()
            admin.acl_deluser("probe_user")
            for refused in (
                ("FLUSHALL",),
                ("CONFIG", "SET", "save", "60 1"),
                ("SET", "any-key", "1"),
                ("GET", "any-key"),
                ("KEYS", "*"),
                ("SHUTDOWN",),
            ):
                with pytest.raises(redis.exceptions.NoPermissionError):
                    admin.execute_command(*refused)
        # the provisioner's own session opens with it (where to persist: the aclfile)
        adapter = RedisAdapter(url, Scope("db1/redis", "cache"))
        try:
            assert adapter.persist == ("ACL", "SAVE")
        finally:
            adapter.close()
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)
