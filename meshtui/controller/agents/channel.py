"""Kept HTTP/1.1 connections to a node's agent, for its signed requests.

A rotation's window holds one agent answer read and one request sent; through httpx each cost
about a quarter of a millisecond of Python on this machine (its request and response models,
httpcore's pool, the ``h11`` parser), more than the agent's own parse. A :class:`Channel` sends
a request made whole ahead (:func:`request_bytes`, one write) on a connection kept open
between requests (one request at a time on each), and reads the answer with the ``httptools`` C parser the agent serves with.
It speaks to ``unix:/path``, ``http://`` and ``https://`` agents (TLS verified with the
system's CA bundle, as the httpx client was).

A kept connection the agent has closed meanwhile (its keep-alive or head deadline ended) is
noticed before the request is written and opened anew; one that fails while the request is
being written is opened again and the request written once more, nothing of an answer having
come: the agent takes a request number once, so a request it did act on is refused as used,
never done twice.
"""

from __future__ import annotations

import json
import select
import socket
import ssl
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httptools

from meshtui.errors import ChannelError
from meshtui.protocol.agent_url import one_token

MAX_ANSWER = 64 * 1024 * 1024
"""The largest answer read: a node that sends more is cut off, not held in memory (its body is
one buffer grown in place, this at most). A node's state answer is ~250 bytes a pair it holds (a few
MiB at 10,000, ~13 MiB at 50,000 on one node), and four times what an agent reads of a request
(16 MiB)."""
MAX_HEAD = 64 * 1024
"""The largest answer head (status line and headers; an agent's take about 200 bytes): a
longer one is cut off, not joined piece by piece until :data:`MAX_ANSWER`."""
CHUNK = 256 * 1024
"""Bytes read from the socket at once."""
KEPT = 4
"""Idle connections kept per agent; one more is closed after its answer."""
KEPT_IDLE_S = 4.0
"""Longest a connection is kept idle: the agent ends one idle for 5 s (its head deadline,
uvicorn's keep-alive), and a request written just as it does is lost with the connection:
an error for a delivery that was never read (httpx kept one 5 s, racing the agent)."""


def request_bytes(host: str, target: str, body: bytes | None) -> bytes:
    """A whole ``POST`` of a JSON ``body`` to ``target``, head and body in one buffer; a ``GET``
    of ``target`` when ``body`` is None."""
    if body is None:
        return f"GET {target} HTTP/1.1\r\nhost: {host}\r\n\r\n".encode("ascii")
    head = (
        f"POST {target} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    )
    return head.encode("ascii") + body


def json_body(data: Mapping[str, object]) -> bytes:
    """``data`` as the compact JSON a request carries."""
    return json.dumps(data, separators=(",", ":")).encode()


@dataclass
class Answer:
    """An agent's HTTP answer: status, headers (names in lower case) and body.

    The body is bytes as they came, never parsed here: an agent's answer is read only by the
    envelope's exact type (:func:`meshtui.protocol.wire.open_envelope`), so a hostile one builds nothing
    before its signature is checked."""

    status_code: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    body: bytearray = field(default_factory=bytearray)


class _Reading:
    """The ``httptools`` callbacks filling one :class:`Answer` from the first answer alone:
    anything after it (an answer nobody asked for, in the same read) is not mixed into it, and
    marks the connection as not to be kept."""

    def __init__(self) -> None:
        self.answer = Answer()
        self.done = False
        self.headed = False
        self.extra = False
        self.keep = False
        self.parser = httptools.HttpResponseParser(self)

    def on_message_begin(self) -> None:
        if self.done:
            self.extra = True

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self.done:
            self.answer.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self.headed = True
        if not self.done:
            self.answer.status_code = self.parser.get_status_code()
            self.keep = self.parser.get_http_version() == "1.1"

    def on_body(self, body: bytes) -> None:
        if not self.done:  # one buffer grown in place: no second copy to join the parts
            self.answer.body += body

    def on_message_complete(self) -> None:
        self.done = True


class Channel:
    """Kept connections to the agent at ``agent`` (``unix:/path`` or an ``http(s)://`` URL),
    opened when first needed: one request at a time on each, so threads asking the same node
    at once (a rotation's prepare to a node that is also a provider) each get their own."""

    def __init__(self, agent: str, tls: ssl.SSLContext) -> None:
        self.agent = agent
        self._idle: list[socket.socket] = []
        self._since: dict[socket.socket, float] = {}  # when each idle one was kept
        self._lock = threading.Lock()
        self._tls: ssl.SSLContext | None = None
        self._uds: str | None = None
        if agent.startswith("unix:"):
            self._uds, self.host, self.prefix = agent[len("unix:") :], "agent", ""
            return
        url = urlsplit(agent)
        if not one_token(agent):
            raise ValueError(
                f"agent address {agent!r}: a space, control or non-ASCII character would not "
                "make one request line (urlsplit drops CR and LF); percent-encode it"
            )
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"agent address {agent!r}: use http(s)://HOST:PORT or unix:PATH")
        try:  # what the connect would do, failing there with a UnicodeError (not an OSError)
            url.hostname.encode("idna")
        except UnicodeError:
            raise ValueError(
                f"agent address {agent!r}: its host name has an empty or too long label"
            ) from None
        self._tls = tls if url.scheme == "https" else None
        self._address = (url.hostname, url.port or (443 if self._tls else 80))
        self.host = url.netloc.rpartition("@")[2]
        self.prefix = url.path.rstrip("/")

    def target(self, path: str) -> str:
        """The request target of ``path`` at this agent (its URL's path, if any, before it)."""
        return self.prefix + path

    def close(self) -> None:
        """Close the kept connections (the next request opens another)."""
        with self._lock:
            idle, self._idle = self._idle, []
            self._since.clear()
        for sock in idle:
            sock.close()

    def exchange(self, request: bytes, timeout: float) -> Answer:
        """Write ``request`` (from :func:`request_bytes`) and read its answer; ``timeout`` bounds
        the connect, each write, and the whole answer from the request's write to its last byte
        (an agent dripping it a byte at a time is cut off there, as one that never answers).
        TimeoutError, or OSError when unreachable or the answer is not readable."""
        sock = self._take()
        kept = sock is not None
        if sock is None:
            sock = self._connect(timeout)
        try:
            try:
                sock.settimeout(timeout)
                sock.sendall(request)
            except TimeoutError:
                raise
            except OSError:
                if not kept:
                    raise
                sock.close()
                sock = self._connect(timeout)  # closed as it was reused: once more, new
                sock.settimeout(timeout)
                sock.sendall(request)
            answer, again = self._read(sock, time.monotonic() + timeout)
        except BaseException:
            sock.close()
            raise
        if again:
            self._give(sock)
        else:
            sock.close()  # the agent ends the connection after this answer
        return answer

    def _take(self) -> socket.socket | None:
        """The most recently used kept connection, idle at most :data:`KEPT_IDLE_S` and not
        closed by the agent meanwhile, if any (each is used by one request at a time: several
        threads may ask one node at once)."""
        while True:
            with self._lock:
                if not self._idle:
                    return None
                sock = self._idle.pop()
                since = self._since.pop(sock, 0.0)
            if time.monotonic() - since <= KEPT_IDLE_S and not _closed_meanwhile(sock):
                return sock
            sock.close()

    def _give(self, sock: socket.socket) -> None:
        """Keep ``sock`` for the next request (at most :data:`KEPT` are kept)."""
        with self._lock:
            if len(self._idle) < KEPT:
                self._idle.append(sock)
                self._since[sock] = time.monotonic()
                return
        sock.close()

    def _read(self, sock: socket.socket, deadline: float) -> tuple[Answer, bool]:
        """The answer, whole by ``deadline`` (monotonic), and whether the connection may carry
        the next request."""
        reading = _Reading()
        parser = reading.parser
        size = 0
        while not reading.done:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the agent's answer did not end in time")
            sock.settimeout(left)
            data = sock.recv(CHUNK)
            if not data:
                raise ChannelError("the agent closed the connection before its answer ended")
            size += len(data)
            if size > MAX_ANSWER:
                raise ChannelError(f"the agent's answer is larger than {MAX_ANSWER} bytes")
            try:
                parser.feed_data(data)
            except httptools.HttpParserUpgrade:  # (not an HttpParserError)
                raise ChannelError(_SWITCH) from None
            except httptools.HttpParserError as exc:
                raise ChannelError(f"the agent's answer is not HTTP: {exc}") from None
            if size > MAX_HEAD and not reading.headed:  # (checked once fed: a read may hold
                # a short head and much of the body)
                raise ChannelError(f"the agent's answer head is larger than {MAX_HEAD} bytes")
        if parser.should_upgrade():  # its parse stopped at the head: the body is not read
            raise ChannelError(_SWITCH)
        answer = reading.answer
        closing = "close" in answer.headers.get("connection", "").lower()
        return answer, reading.keep and not closing and not reading.extra

    def _connect(self, timeout: float) -> socket.socket:
        if self._uds is not None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.settimeout(timeout)
                sock.connect(self._uds)
            except BaseException:
                sock.close()
                raise
            return sock
        sock = socket.create_connection(self._address, timeout=timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._tls is not None:
                return self._tls.wrap_socket(sock, server_hostname=self._address[0])
        except BaseException:
            sock.close()
            raise
        return sock


_SWITCH = "the agent's answer asks to switch protocols (an agent never does)"


def _closed_meanwhile(sock: socket.socket) -> bool:
    """True when a kept connection has something to read before a request was written: the
    agent closed it (or sent what nobody asked for); either way it is not reused."""
    poller = select.poll()  # (select.select stops at descriptor 1024)
    poller.register(sock, select.POLLIN)
    try:
        return bool(poller.poll(0))
    except OSError:
        return True
