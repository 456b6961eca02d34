"""The controller's kept connection to an agent (meshtui/controller/agents/channel.py).

Against real agents (a Unix socket; TCP with TLS in front of uvicorn, as an operator serves
one), and against a socket that misbehaves on purpose where a real agent never would: an answer
that is not HTTP, cut short, or larger than the bound; a kept connection that breaks as it is
reused.
"""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from meshtui.controller.agents import channel as channel_module
from meshtui.controller.agents.channel import Channel, request_bytes
from meshtui.controller.agents.client import read_anchor_answer
from meshtui.crypto import b64
from meshtui.errors import AgentError, ChannelError
from meshtui.lab import certificates
from meshtui.protocol import messages

pytestmark = pytest.mark.slow


@pytest.fixture
def mesh(mesh_with_agents: Any) -> Any:
    return mesh_with_agents(
        consumers={"app1": ["gitea"]}, port=5432, admin=None, provisioner=["true"]
    )


def test_requests_share_one_kept_connection_reopened_when_the_agent_closed_it(mesh: Any) -> None:
    with mesh.controller() as ctl, ctl.agents() as agents:
        client = agents.client("app1")
        client.call(messages.STATE, {})
        (kept,) = client._channel._idle
        for _ in range(3):
            client.call(messages.STATE, {})
        assert client._channel._idle == [kept]
        mesh.start("app1")  # a restart closes every connection it had
        client.call(messages.STATE, {})
        (again,) = client._channel._idle
        assert again is not kept and kept.fileno() == -1


def test_threads_asking_one_node_at_once_each_get_their_own_connection(mesh: Any) -> None:
    # a rotation's prepare (on the agents' threads) and a provider delivery (this thread) can
    # go to the same node at once: one socket shared would interleave their bytes
    with mesh.controller() as ctl, ctl.agents() as agents:
        client = agents.client("app1")
        start = threading.Barrier(6)

        def ask() -> list[str]:
            start.wait()
            return [client.call(messages.STATE, {})["node"] for _ in range(10)]

        with ThreadPoolExecutor(6) as pool:
            answers = list(pool.map(lambda _: ask(), range(6)))
        assert answers == [["app1"] * 10] * 6
        assert 1 <= len(client._channel._idle) <= channel_module.KEPT


def test_an_answer_larger_than_the_bound_is_cut_off(
    mesh: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(channel_module, "MAX_ANSWER", 64)
    with mesh.controller() as ctl, ctl.agents() as agents:
        client = agents.client("app1")
        with pytest.raises(AgentError, match=r"unreachable \(ChannelError\)"):
            client.call(messages.STATE, {})
        assert client._channel._idle == []  # not reused: the rest of it is unread


class Rogue:
    """A Unix socket whose ``n``-th accepted connection answers its requests with the items of
    ``conns[n]`` in turn (bytes; None: closed there without an answer), then is closed."""

    def __init__(self, path: Path, conns: list[list[bytes | None]]) -> None:
        self.path, self.conns, self.accepted = path, conns, 0
        self.server = socket.socket(socket.AF_UNIX)
        self.server.bind(str(path))
        self.server.listen()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        for answers in self.conns:
            try:
                conn, _ = self.server.accept()
            except OSError:  # closed at the test's end: a connection nobody made
                return
            self.accepted += 1
            with conn:
                for answer in answers:
                    if not conn.recv(65536) or answer is None:
                        break
                    conn.sendall(answer)

    def close(self) -> None:
        self.server.close()


class Endless:
    """A Unix socket whose one connection, once asked, sends ``head`` and then ``piece`` again
    and again (every ``every`` seconds) until closed: an answer that never ends."""

    def __init__(self, path: Path, head: bytes, piece: bytes, *, every: float = 0.0) -> None:
        self.path, self.head, self.piece, self.every = path, head, piece, every
        self.stop = threading.Event()
        self.server = socket.socket(socket.AF_UNIX)
        self.server.bind(str(path))
        self.server.listen()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        try:
            conn, _ = self.server.accept()
        except OSError:  # closed at the test's end: a connection nobody made
            return
        with conn:
            conn.recv(65536)
            conn.sendall(self.head)
            while not self.stop.wait(self.every):
                try:
                    conn.sendall(self.piece)
                except OSError:
                    return

    def close(self) -> None:
        self.stop.set()
        self.server.close()


OK = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-type: application/json\r\n\r\n{}"
ASK = request_bytes("agent", "/v1", b"{}")


@pytest.fixture
def rogue(tmp_path: Path) -> Iterator[Any]:
    made: list[Rogue] = []

    def make(conns: list[list[bytes | None]]) -> Rogue:
        made.append(Rogue(tmp_path / "rogue.sock", conns))
        return made[-1]

    yield make
    for r in made:
        r.close()


def channel_to(server: Rogue) -> Channel:
    return Channel(f"unix:{server.path}", ssl.create_default_context())


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (b"SSH-2.0-OpenSSH_9.2\r\n\r\n", "not HTTP"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{", "closed the connection before"),
        (None, "closed the connection before"),
    ],
    ids=["not-http", "cut-short", "no-answer"],
)
def test_an_answer_that_is_not_whole_http_is_an_error_never_a_second_send(
    rogue: Any, answer: bytes | None, why: str
) -> None:
    # the request was read: the agent may have acted on it, so it is not written again
    server = rogue([[OK, answer], [OK]])
    channel = channel_to(server)
    assert json.loads(channel.exchange(ASK, 5.0).body) == {}
    with pytest.raises(ChannelError, match=why):
        channel.exchange(ASK, 5.0)
    assert channel._idle == [] and server.accepted == 1


@pytest.mark.parametrize("noticed", [True, False], ids=["close-seen", "close-unseen"])
def test_a_kept_connection_the_agent_closed_is_opened_again(
    rogue: Any, monkeypatch: pytest.MonkeyPatch, noticed: bool
) -> None:
    # seen: the close is readable before the request is written; unseen (it came as the
    # request was being written): the write fails, and the request goes once more on a new one
    server = rogue([[OK], [OK]])
    channel = channel_to(server)
    assert json.loads(channel.exchange(ASK, 5.0).body) == {}
    time.sleep(0.2)  # the first connection is closed by now
    if not noticed:
        monkeypatch.setattr(channel_module, "_closed_meanwhile", lambda sock: False)
    assert json.loads(channel.exchange(ASK, 5.0).body) == {}
    assert server.accepted == 2


def test_a_fresh_connection_that_fails_is_not_tried_again(tmp_path: Path) -> None:
    channel = Channel(f"unix:{tmp_path / 'nobody.sock'}", ssl.create_default_context())
    with pytest.raises(FileNotFoundError):
        channel.exchange(ASK, 1.0)


TLS_AGENT = """
import sys
from pathlib import Path
from meshtui.host.server.routes import Agent
from meshtui.host.state import identity
from meshtui.host.server.serve import _Server, build_app, uvicorn_config
agent = Agent(identity.load(Path(sys.argv[1])), allow_loopback=True)
config = uvicorn_config(build_app(agent), sys.argv[2])
config.ssl_certfile, config.ssl_keyfile = sys.argv[3], sys.argv[4]
_Server(config).run()
"""
"""The agent served over TLS by uvicorn itself (an operator may put TLS in front otherwise)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_https_agent_is_verified_and_kept(mesh_with_agents: Any, tmp_path: Path) -> None:
    mesh = mesh_with_agents(
        consumers={"app1": ["gitea"]}, port=5432, admin=None, provisioner=["true"], start=False
    )
    certificates.make_certificates(tmp_path, "127.0.0.1", server="agent")
    certificates.authority(tmp_path, "other", "another CA")
    port = free_port()
    argv = [sys.executable, "-c", TLS_AGENT, str(mesh.nodes["app1"]), f"127.0.0.1:{port}"]
    argv += [str(tmp_path / "server.pem"), str(tmp_path / "server.key")]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
    try:
        trusted = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
        channel = Channel(f"https://127.0.0.1:{port}", trusted)
        health = request_bytes("x", "/health", b"").replace(b"POST", b"GET", 1)
        for _ in range(200):
            try:
                answer = channel.exchange(health, 5.0)
                break
            except ConnectionRefusedError:
                time.sleep(0.05)
        assert answer.status_code == 200 and json.loads(answer.body) == {"node": "app1"}
        (kept,) = channel._idle
        assert channel.exchange(health, 5.0).status_code == 200 and channel._idle == [kept]
        channel.close()
        stranger = ssl.create_default_context(cafile=str(tmp_path / "other.pem"))
        with pytest.raises(ssl.SSLCertVerificationError):
            Channel(f"https://127.0.0.1:{port}", stranger).exchange(health, 5.0)
    finally:
        proc.terminate()
        proc.wait(10)


# --- attack26: a hostile or broken agent / network peer -----------------------------------


def test_a_slow_drip_answer_is_cut_off_at_the_timeout(tmp_path: Path) -> None:
    # an agent (or anyone on the path of a plain http:// agent) that sends its answer a byte at
    # a time, each well inside the timeout, held the controller for as long as it liked: the
    # timeout bounded each read, not the answer
    head = b"HTTP/1.1 200 OK\r\ncontent-length: 1000000\r\n\r\n"
    server = Endless(tmp_path / "drip.sock", head, b" ", every=0.1)
    channel = Channel(f"unix:{server.path}", ssl.create_default_context())
    outcome: list[BaseException | None] = []

    def ask() -> None:
        try:
            channel.exchange(ASK, 1.0)
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 (recorded for the assertion below)
            outcome.append(exc)

    asker = threading.Thread(target=ask, daemon=True)
    started = time.monotonic()
    asker.start()
    asker.join(6.0)
    server.close()
    assert not asker.is_alive(), "a dripping answer held the controller past its timeout"
    assert isinstance(outcome[0], TimeoutError)
    assert time.monotonic() - started < 3.0
    assert channel._idle == []


FORGED = b"HTTP/1.1 503 Busy\r\nretry-after: 1\r\ncontent-length: 2\r\n\r\n[]"


def test_bytes_after_the_answer_are_not_mixed_into_it_nor_left_for_the_next(rogue: Any) -> None:
    # a second answer nobody asked for, in the same write as the first: it was parsed into
    # the same Answer (its status 503 and retry-after over the first's 200, its body after the
    # first's), so the controller acted on the forged status (a busy agent: the same request
    # sent again); the connection is not kept either, since what follows is not an answer
    server = rogue([[OK + FORGED], [OK]])
    channel = channel_to(server)
    answer = channel.exchange(ASK, 5.0)
    assert (answer.status_code, answer.body) == (200, b"{}")
    assert "retry-after" not in answer.headers
    assert channel._idle == []
    assert json.loads(channel.exchange(ASK, 5.0).body) == {}
    assert server.accepted == 2


@pytest.mark.parametrize(
    "agent",
    [
        "http://127.0.0.1:1/a b",
        "http://127.0.0.1:1/a\u00e9",
        "http://127.0.0.1:1/a\x00",
        "http://127.0.0.1:1/v1\r\nx-forged: 1",
        "http://127.0.0.1 x:1/",
        "http://agent..example:1/",
        f"http://{'a' * 64}.example:1/",
    ],
    ids=["space", "non-ascii", "nul", "crlf", "space-in-host", "empty-label", "long-label"],
)
def test_an_agent_address_that_would_not_make_one_request_line_is_refused(agent: str) -> None:
    # the agent URL reaches the request line and the host header as it is: a space splits
    # the request line, a non-ASCII character failed with a bare UnicodeEncodeError at the
    # first request, and CR/LF were silently dropped by urlsplit (another URL than declared)
    with pytest.raises(ValueError, match="agent address"):
        Channel(agent, ssl.create_default_context())


def test_an_answer_head_without_end_is_cut_off_at_its_bound(tmp_path: Path) -> None:
    # the answer's head (status line and headers) was bounded only by MAX_ANSWER (256 MiB):
    # httptools joins a header's pieces as they come, so a hostile agent's endless header held
    # the controller copying hundreds of MiB until the timeout
    server = Endless(tmp_path / "head.sock", b"HTTP/1.1 200 OK\r\nx-pad: ", b"a" * 65536)
    channel = Channel(f"unix:{server.path}", ssl.create_default_context())
    try:
        with pytest.raises(ChannelError, match="head"):
            channel.exchange(ASK, 3.0)
    finally:
        server.close()
    assert channel._idle == []


def test_a_short_head_before_a_long_body_in_one_read_is_not_taken_for_a_long_head(
    rogue: Any,
) -> None:
    body = b"[" + b"0," * (1 << 19) + b"0]"
    server = rogue([[b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body) + body]])
    assert channel_to(server).exchange(ASK, 5.0).body == body


def test_a_connection_idle_near_the_agents_deadline_is_not_reused(
    rogue: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the agent ends a connection idle for 5 s (its head deadline): a request written as it
    # does is lost with it (an error, the delivery never read), so one idle that long is not
    # written on; this rogue would still answer on the first connection
    monkeypatch.setattr(channel_module, "KEPT_IDLE_S", 0.3, raising=False)
    server = rogue([[OK, OK], [OK]])
    channel = channel_to(server)
    assert json.loads(channel.exchange(ASK, 5.0).body) == {}
    time.sleep(0.5)
    assert json.loads(channel.exchange(ASK, 5.0).body) == {}
    assert server.accepted == 2


def test_an_answer_that_switches_protocols_is_an_error_of_the_channel(rogue: Any) -> None:
    # httptools raises HttpParserUpgrade (not an HttpParserError, not an OSError) on a 101:
    # it left the client as neither AgentError nor a connection's failure (a 200 naming an
    # upgrade is parsed whole as a 200: llhttp switches only on a 101)
    answer = b"HTTP/1.1 101 Switching Protocols\r\nupgrade: x\r\nconnection: upgrade\r\n\r\n"
    server = rogue([[answer]])
    channel = channel_to(server)
    with pytest.raises(ChannelError, match="switch"):
        channel.exchange(ASK, 5.0)
    assert channel._idle == []


def test_an_anchor_read_is_bounded_like_every_request_to_an_agent(tmp_path: Path) -> None:
    # the unsigned read of a node's audit head (restore, doctor) went through httpx, whose
    # timeout bounded each read: an agent dripping its answer held the controller for as long
    # as it liked; it now goes through the channel, bounded from the write to the last byte
    head = b"HTTP/1.1 200 OK\r\ncontent-length: 1000000\r\n\r\n"
    server = Endless(tmp_path / "anchor.sock", head, b" ", every=0.1)
    node: Any = {"name": "db1", "agent": f"unix:{server.path}", "verify_key": b64(bytes(32))}
    started = time.monotonic()
    try:
        with pytest.raises(AgentError, match="did not answer in time"):
            read_anchor_answer(node, timeout=1.0)
    finally:
        server.close()
    assert time.monotonic() - started < 3.0
