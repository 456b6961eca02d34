"""The manual's Redis TLS recipe (docs/real-mesh.md, step 5) starts Debian's Redis 7.0 as
written (without ``tls-ca-cert-file`` it refuses to start), and an admin URL of the form the
walk writes logs in over it.

The recipe's lines are read from the page itself; only the paths and the address are this
test's (loopback, a free port, the lab's certificates), plus where the server keeps its log."""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

import redis

from meshtui.kinds.redis import lab as lab_redis
from tests.kinds.redis.conftest import free_port

WALK = (Path(__file__).parents[3] / "docs" / "real-mesh.md").read_text()


def recipe() -> list[str]:
    found = re.search(r"cat >> /etc/redis/redis.conf <<'EOF'\n(.*?)^EOF$", WALK, flags=re.S | re.M)
    assert found, "docs/real-mesh.md lost its Redis recipe"
    return [line.strip() for line in found[1].splitlines() if line.strip()]


def test_the_walks_recipe_starts_redis_and_the_admin_logs_in() -> None:
    port = free_port()
    # under a folder the server's own user may pass through (it runs as meshtui_redis as root)
    base = Path(tempfile.mkdtemp(prefix="meshtui-recipe-"))
    base.chmod(0o711)
    server = lab_redis.create(base / "srv", address="127.0.0.1", port=port)
    ours = {
        "bind": "127.0.0.1",
        "tls-port": str(port),
        "tls-cert-file": str(server.folder / "server.pem"),
        "tls-key-file": str(server.folder / "server.key"),
        "tls-ca-cert-file": str(server.ca),
        "aclfile": str(server.aclfile),
    }
    lines = []
    for line in recipe():
        key = line.split()[0]
        lines.append(f"{key} {ours[key]}" if key in ours else line)
    assert {ln.split()[0] for ln in lines} >= {"port", "tls-auth-clients", "protected-mode"}
    lines += [f"dir {server.folder}", f"logfile {server.log}", f"pidfile {server.pidfile}"]
    (server.folder / "redis.conf").write_text("\n".join(lines) + "\n")
    server.start()
    try:
        url = server.admin_file.read_text().strip()
        with redis.Redis.from_url(url) as admin:
            assert admin.ping()
            assert admin.acl_whoami() == "meshtui-admin"
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)
