"""Slow or idle clients cannot keep the controller's signed requests out of an agent.

The reviewer's attack: 64 TCP connections that each sent a partial request head and then one
byte every few seconds filled uvicorn's connection cap, and the agent answered 503 to every
request, the controller's included, for as long as they stayed. Here a real agent process on a
loopback TCP port is held by real sockets trickling bytes (from another address, then from the
controller's own), or by slow bodies, and a signed ``state`` request must still be answered.
The agent serves with uvicorn's ``httptools`` protocol, guarded (:mod:`meshtui.host.server.connections`).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from meshtui import crypto
from meshtui.host.server import connections
from meshtui.protocol import wire

pytestmark = pytest.mark.slow

ATTACKER = "127.0.0.2"  # another host on the agent's network (all of 127/8 is loopback)
CONTROLLER = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((CONTROLLER, 0))
        return int(s.getsockname()[1])


@dataclass
class TcpAgent:
    port: int
    state: Path
    proc: subprocess.Popen[bytes]

    def signed_state(self) -> httpx.Response:
        keys = crypto.load_private(self.state / "controller.key")
        env, _ = wire.envelope(wire.STATE, {}, sender="controller", to="app1", keys=keys)
        transport = httpx.HTTPTransport(local_address=CONTROLLER)
        with httpx.Client(transport=transport, timeout=10) as client:
            return client.post(f"http://{CONTROLLER}:{self.port}/v1", json=env)


@pytest.fixture
def agent(mesh_with_agents: Any) -> Iterator[TcpAgent]:
    mesh = mesh_with_agents(
        consumers={"app1": ["gitea"]}, port=5432, admin=None, provisioner=["true"], start=False
    )
    port = free_port()
    log = open(mesh.root / "app1.tcp.log", "ab")  # noqa: SIM115 - handed to the child
    argv = [sys.executable, "-m", "meshtui.cli", "host", "serve", "--state"]
    argv += [str(mesh.nodes["app1"]), "--listen", f"{CONTROLLER}:{port}", "--allow-loopback"]
    proc = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    log.close()
    try:
        for _ in range(200):
            try:
                httpx.get(f"http://{CONTROLLER}:{port}/health", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.05)
        yield TcpAgent(port, mesh.state, proc)
    finally:
        proc.terminate()
        proc.wait(10)


@dataclass
class Trickle:
    """``n`` connections from ``source`` that send ``head`` and then one byte every ``every`` s."""

    port: int
    source: str
    n: int
    head: bytes = b"POST /v1 HTTP/1.1\r\nHost: x\r\nX-a: "
    every: float = 0.5
    socks: list[socket.socket] = field(default_factory=list)
    cut: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> Trickle:
        for _ in range(self.n):
            s = socket.socket()
            s.bind((self.source, 0))
            s.connect((CONTROLLER, self.port))
            s.sendall(self.head)
            self.socks.append(s)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def _run(self) -> None:
        while not self.stop.wait(self.every):
            for s in list(self.socks):
                try:
                    s.sendall(b"a")
                except OSError:
                    self.socks.remove(s)
                    self.cut += 1

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        for s in self.socks:
            s.close()


def answered_within(agent: TcpAgent, seconds: float) -> tuple[int, float]:
    """Ask until a signed answer comes (or ``seconds`` pass); its status and when."""
    start = time.monotonic()
    status = 0
    while time.monotonic() - start < seconds:
        try:
            status = agent.signed_state().status_code
        except httpx.TransportError:
            status = -1
        if status == 200:
            break
        time.sleep(0.2)
    return status, time.monotonic() - start


def test_64_trickling_connections_from_another_host_leave_the_controller_in(
    agent: TcpAgent,
) -> None:
    with Trickle(agent.port, ATTACKER, 64) as trickle:
        time.sleep(1.0)
        status, took = answered_within(agent, 2.0)
        assert status == 200, f"the controller got {status} while 64 slow clients hang"
        assert took < 2.0
        assert trickle.cut >= 64 - connections.MAX_PEER_CONNECTIONS  # closed on arrival


def test_trickling_heads_are_cut_at_the_deadline_even_from_the_controllers_address(
    agent: TcpAgent,
) -> None:
    with Trickle(agent.port, CONTROLLER, 64) as trickle:
        time.sleep(connections.HEAD_TIMEOUT_S + 1.5)
        assert trickle.cut == 64 and not trickle.socks, "slow heads still connected"
        status, _ = answered_within(agent, 3.0)
        assert status == 200


def test_slow_bodies_from_one_host_leave_the_controller_a_slot(agent: TcpAgent) -> None:
    head = b"POST /v1 HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    head += b"Content-Length: 100000\r\n\r\n{"
    with Trickle(agent.port, ATTACKER, 8, head=head):
        time.sleep(1.0)
        status, _ = answered_within(agent, 2.0)
        assert status == 200, f"the controller got {status} while 8 slow bodies hang"


@dataclass
class Holding:
    """``n`` connections from ``source`` that each send a partial head and, the moment one is
    closed, open another: an unprivileged user on the controller's machine (or a host behind
    the same NAT) keeping the per-address cap full."""

    port: int
    source: str
    n: int
    head: bytes = b"POST /v1 HTTP/1.1\r\nHost: x\r\nX-a: "
    opened: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> Holding:
        self.threads = [threading.Thread(target=self._hold, daemon=True) for _ in range(self.n)]
        for t in self.threads:
            t.start()
        return self

    def _hold(self) -> None:
        while not self.stop.is_set():
            with socket.socket() as s:
                try:
                    s.bind((self.source, 0))
                    s.connect((CONTROLLER, self.port))
                    s.sendall(self.head)
                    self.opened += 1
                    s.settimeout(0.2)
                    while not self.stop.is_set():
                        try:
                            if not s.recv(1):
                                break  # cut: open another at once
                        except TimeoutError:
                            continue
                except OSError:
                    continue

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join()


def test_connections_held_from_the_controllers_own_address_do_not_keep_it_out(
    agent: TcpAgent,
) -> None:
    # A per-address cap that refused newcomers let 8 connections from the controller's
    # address, reopened as they are cut, keep the controller out (only the instants between a
    # cut and a reopen let it in). A newcomer replaces that address's longest-waiting
    # connection that has not sent a whole request head.
    with Holding(agent.port, CONTROLLER, connections.MAX_PEER_CONNECTIONS) as held:
        time.sleep(1.0)
        assert held.opened >= connections.MAX_PEER_CONNECTIONS
        status, _ = answered_within(agent, 3.0)  # before any head deadline cuts them
        assert status == 200, f"the controller got {status} while its address's slots are held"


SLOW_BODY = b"POST /v1 HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
SLOW_BODY += b"Content-Length: 100000\r\n\r\n{"


def test_slow_bodies_from_two_hosts_leave_the_controller_in(agent: TcpAgent) -> None:
    # A body being read must not hold one of the agent's 8 request slots for up to 30 s, 4 per
    # address: two hosts (two addresses: any IPv6 host has plenty) would hold all 8, re-opening
    # as they were cut, and the controller get 503 busy. A small body is read before it takes
    # a slot (memory stays bounded by the connections one address may hold).
    with (
        Holding(agent.port, ATTACKER, 4, head=SLOW_BODY),
        Holding(agent.port, "127.0.0.3", 4, head=SLOW_BODY),
    ):
        time.sleep(1.0)
        status, _ = answered_within(agent, 3.0)
        assert status == 200, f"the controller got {status} while 8 slow bodies hang"


def test_slow_bodies_from_the_controllers_own_address_do_not_keep_it_out(
    agent: TcpAgent,
) -> None:
    # the same with the bodies sent from the controller's address: a connection whose request
    # has not fully arrived (head or body) is the one a newcomer replaces
    with Holding(agent.port, CONTROLLER, connections.MAX_PEER_CONNECTIONS, head=SLOW_BODY):
        time.sleep(1.0)
        status, _ = answered_within(agent, 3.0)
        assert status == 200, f"the controller got {status} while its address's bodies hang"


def test_the_next_head_on_a_kept_connection_has_its_deadline_too(agent: TcpAgent) -> None:
    # after an answer the connection stays open for the next request: its head is due within
    # the deadline from the moment the answer was sent, trickled or not
    with socket.create_connection((CONTROLLER, agent.port)) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert s.recv(4096).startswith(b"HTTP/1.1 200")
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-a: ")
        s.settimeout(0.5)
        start, closed = time.monotonic(), False
        while time.monotonic() - start < connections.HEAD_TIMEOUT_S + 3:
            try:
                s.sendall(b"a")
                if s.recv(1) == b"":
                    closed = True
                    break
            except TimeoutError:
                continue
            except OSError:
                closed = True
                break
        assert closed, "a trickled second head kept its connection past the deadline"
        assert time.monotonic() - start > connections.HEAD_TIMEOUT_S - 1


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


@pytest.mark.parametrize(
    "start",
    [b"GET /", b"POST /v1 HTTP/1.1\r\nx-pad: ", b"GET /health HTTP/1.1\r\n"],
    ids=["endless-target", "endless-header-value", "endless-header-lines"],
)
def test_a_head_without_end_is_cut_off_long_before_its_deadline(
    agent: TcpAgent, start: bytes
) -> None:
    # h11 refused a head over 16 KiB; uvicorn's httptools protocol keeps every byte of the
    # request target and headers until the head ends (concatenating them: quadratic), so for
    # the 5 s head deadline each connection of the per-peer cap grew the agent by tens of MiB
    line = b"x-pad: " + b"a" * 100 + b"\r\n"
    chunk = (line * 600) if start.endswith(b"\r\n") else b"a" * 65536
    before = _rss_kib(agent.proc.pid)
    sock = socket.create_connection((CONTROLLER, agent.port), source_address=(ATTACKER, 0))
    sock.settimeout(1.0)
    sent, started, cut = 0, time.monotonic(), None
    try:
        sock.sendall(start)
        while time.monotonic() - started < connections.HEAD_TIMEOUT_S - 1.5:
            sock.sendall(chunk)
            sent += len(chunk)
    except OSError:  # reset by the agent (or its buffers full while it sends the refusal)
        cut = time.monotonic() - started
    grown = _rss_kib(agent.proc.pid) - before
    try:
        answer = sock.recv(4096)
    except OSError:
        answer = b""
    sock.close()
    assert cut is not None, f"the agent took {sent >> 20} MiB of one head (grew {grown} KiB)"
    assert grown < 16 * 1024, f"the agent grew {grown} KiB for one head"
    assert answer in (b"",) or answer.startswith(b"HTTP/1.1 431")
    status, _ = answered_within(agent, 3.0)
    assert status == 200
