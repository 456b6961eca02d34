"""The lab's Redis end to end, in real namespaces: push, probe from the consumers' namespaces over
verified TLS, a drill (old refused with WRONGPASS), withdrawal revoked, status shows the kind."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from meshtui.controller.core import Controller
from meshtui.kinds.redis import lab as lab_redis
from meshtui.lab import mesh as lab_mesh
from tests.fix_lab import cli, running_lab

GITEA = "cache:app1/gitea->db1/redis"
WIKI = "cache:app2/wiki->db1/redis"

pytestmark = [pytest.mark.root, pytest.mark.slow]


@pytest.fixture(scope="module")
def lab() -> Iterator[tuple[Path, Any]]:
    # its own kind only (tests/lab/test_lab.py runs the whole lab)
    with running_lab("meshtui-rlab-", kinds={"openbao": False, "seaweedfs": False}) as found:
        yield found


def test_the_lab_redis_is_locked_down(lab: tuple[Path, Any]) -> None:
    state, built = lab
    server = lab_redis.existing(state / "lab" / "redis")
    assert server is not None and server.running()
    conf = (server.folder / "redis.conf").read_text()
    assert (
        "protected-mode yes" in conf
        and "port 0" in conf
        and f"bind {built.addresses['db1']}" in conf
    )
    assert "user default off" in server.aclfile.read_text()
    for name in ("ca.key", "admin.url", "lab.url"):
        assert (server.folder / name).stat().st_mode & 0o777 == 0o600, name
    assert server.aclfile.stat().st_mode & 0o777 == 0o600
    key = (server.folder / "server.key").stat()  # its own user reads it through its group
    assert key.st_uid == 0 and key.st_mode & 0o777 == 0o640
    assert lab_mesh.status(state)["redis"] is True


def test_probe_from_the_consumers_namespaces(lab: tuple[Path, Any]) -> None:
    state, built = lab
    result = cli(state, "probe", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    by_pair = {o["pair"]: o for o in json.loads(result.stdout)}
    for pair, node in ((GITEA, "app1"), (WIKI, "app2")):
        assert by_pair[pair]["verdict"] == "accepted", by_pair[pair]
        assert not by_pair[pair]["loopback"]
        assert "certificate verified" in by_pair[pair]["reason"]
        assert f"from {built.addresses[node]}" in by_pair[pair]["reason"]
    rows = json.loads(cli(state, "status", "--json").stdout)
    kinds = {r["pair"]: r["kind"] for r in rows}
    assert kinds[GITEA] == "redis" and kinds["database:app1/gitea->db1/postgres"] == "postgres"
    assert {r["state"] for r in rows} == {"working"}


def test_drill_on_a_redis_pair(lab: tuple[Path, Any]) -> None:
    state, _built = lab
    with Controller.open(state) as ctl:
        (report,) = ctl.drill([GITEA])
    assert report.ok, report
    evidence = json.dumps(report.to_json())
    assert "WRONGPASS" in evidence


def test_withdrawal_revokes(lab: tuple[Path, Any]) -> None:
    state, built = lab
    text = built.declaration.read_text()
    wiki_cache = text[text.index('[modules."app2/wiki"]') :].split("\n\n", 1)[0]
    entry = wiki_cache[wiki_cache.index(', { name = "cache"') : wiki_cache.rindex("]")]
    smaller = state / "without-wiki-cache.toml"
    smaller.write_text(text.replace(entry, ""))
    with Controller.open(state) as ctl:
        ctl.declare(smaller)
        assert ctl.push().ok
        rows = {r.pair: r for r in ctl.status()}
    assert rows[WIKI].state.value == "revoked", rows[WIKI].reason
    assert "WRONGPASS" in rows[WIKI].reason
    assert rows[GITEA].state.value in ("working", "unknown")
