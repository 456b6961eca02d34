"""What ``meshtui kind config seaweedfs`` prints is what the lab's store runs: the ``weed server``
argv (every listener placed), ``security.toml`` and the static identity, and the agent's admin
file, which holds no secret. (That only S3 is in a consumer's reach, and gRPC demands a client
certificate, is test_store.py's.)"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from meshtui.contracts.server_config import PLACEHOLDERS, SECRET_KEY
from meshtui.kinds.seaweedfs import server_config
from tests.kinds.seaweedfs.conftest import Store

pytestmark = [pytest.mark.root, pytest.mark.slow]


def test_the_store_runs_what_is_printed(store: Store) -> None:
    server = store.server
    place = dataclasses.replace(server.place, admin_file=str(server.admin_file))
    printed = server_config.build(place)
    pid = server.pid()
    assert pid is not None
    running = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]
    wanted = server_config.argv(running[0], place, server.ports, volumes=64)
    assert [w for w in running if w.split("=")[0] not in ("-master.volumeSizeLimitMB",
            "-volume.preStopSeconds")] == wanted  # fmt: skip
    assert (server.conf / "security.toml").read_text() == printed.file("security.toml").text
    for role in server_config.ROLES:
        assert f"[grpc.{role}]" in printed.file("security.toml").text
    held = json.loads((server.conf / "identities.json").read_text())["identities"]
    shown = json.loads(printed.file("identities.json").text)["identities"]
    assert [i["actions"] for i in held] == [i["actions"] for i in shown]
    assert shown[0]["credentials"][0]["secretKey"] == SECRET_KEY
    admin = printed.file("admin.toml").text
    usual = server_config.Ports(9333, 8080, 8888, place.port)
    assert admin == server_config.admin_text(usual, place.conf, place.admin)
    lab_admin = server_config.admin_text(server.ports, place.conf, place.admin)
    assert server.admin_file.read_text() == lab_admin
    assert not any(p in admin for p in PLACEHOLDERS) and "secret" not in admin.lower()
