"""How long and how many: the agent's connections, bounded before anyone is known.

uvicorn cancels its keep-alive timer on every byte it receives and has no deadline for a
request's head, so a client that trickles one header byte every few seconds holds its
connection for ever, and 64 of them made uvicorn answer 503 to everyone, the controller
included. :class:`Guard` adds two bounds to uvicorn's HTTP protocols:

- a deadline for every request head (the request line and headers): :data:`HEAD_TIMEOUT_S`
  from the moment the connection opens or the previous answer was sent; a head that is late
  ends the connection, however many bytes trickle in;
- at most :data:`MAX_HEAD_BYTES` for a request head (:class:`GuardedHttpTools`): uvicorn's
  ``httptools`` protocol keeps every byte of a head's target and headers until it ends, so
  for its deadline a head at a network's speed grew the agent by hundreds of MiB a
  connection; a longer head is answered 431 and its connection ended;
- at most :data:`MAX_PEER_CONNECTIONS` open connections per peer address (TCP; a Unix socket
  is 0600 and reachable by the controller's user only), so one host cannot fill uvicorn's cap.
  At the cap a newcomer replaces that address's longest-waiting connection whose request has
  not fully arrived (head or body) (refusing the newcomer let anyone sharing the controller's address — a
  user on its machine, a host behind the same NAT — keep the controller out with 8 sockets);
  only when every one of them is being answered is the newcomer closed.

The agent serves with :class:`GuardedHttpTools`: uvicorn's protocol on the ``httptools`` C
parser (a request costs a fraction of the pure-Python ``h11``'s, which sat in every rotation's
window twice) with the guard mixed in (:class:`Guard`, kept apart from the parser's hooks).

The body has its own deadline and the requests being handled are capped per peer too
(:mod:`meshtui.host.server.serve`).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

HEAD_TIMEOUT_S = 5.0
"""Seconds a request head may take to arrive (the controller sends it in one write)."""
MAX_HEAD_BYTES = 64 * 1024
"""Bytes a request head may take (the controller's take about 150; ``h11`` stopped at 16 KiB)."""
HEAD_TOO_LARGE = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n"
    b"connection: close\r\n\r\n"
)
"""The answer to a head longer than :data:`MAX_HEAD_BYTES` (its connection then ends)."""
MAX_PEER_CONNECTIONS = 8
"""Open connections one peer address may hold at once; more are closed on arrival."""

_open: Counter[str] = Counter()
"""Open connections per peer address (one event loop, no lock)."""
_waiting: dict[str, dict[Guard, None]] = {}
"""Per peer address, its connections waiting for a request (head or body), oldest first."""


def peer_of(client: Any) -> str | None:
    """The peer's address from uvicorn's ``(host, port)``; None on a Unix socket."""
    if isinstance(client, tuple | list) and client and client[0]:
        return str(client[0])
    return None


class Guard(asyncio.Protocol):
    """The deadline on each request head and the cap per peer address, for a uvicorn HTTP
    protocol: mixed in before it (:class:`GuardedHttpTools`), which calls :meth:`_head_arrived`
    and :meth:`_body_arrived` as its parser gets that far."""

    _head_timer: asyncio.TimerHandle | None = None
    _timed_cycle: Any = None
    _counted: str | None = None
    # given by the protocol it is mixed into
    client: Any
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    cycle: Any

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        peer = peer_of(self.client)
        if peer is not None:
            if _open[peer] >= MAX_PEER_CONNECTIONS:
                oldest = next(iter(_waiting.get(peer, {})), None)
                if oldest is None:  # every one is being answered: the newcomer waits its turn
                    transport.abort()  # connection_lost follows; nothing was counted for it
                    return
                oldest._uncount()
                oldest.transport.abort()
            _open[peer] += 1
            self._counted = peer
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._uncount()
        super().connection_lost(exc)

    def _uncount(self) -> None:
        """Stop counting this connection against its peer address (once)."""
        self._disarm()
        if self._counted is not None:
            _open[self._counted] -= 1
            if _open[self._counted] <= 0:
                del _open[self._counted]
            self._counted = None

    def _head_arrived(self) -> None:
        """A request's head is parsed (``self.cycle`` is its cycle): its deadline is met."""
        cycle = self.cycle
        if cycle is not None and cycle is not self._timed_cycle:
            self._disarm()  # a whole head arrived: the body has its own deadline
            self._timed_cycle = cycle
            if cycle.more_body:
                self._wait()  # its body still coming: a newcomer may replace it

    def _body_arrived(self) -> None:
        """The current request's body is whole: no longer among those a newcomer replaces."""
        cycle = self.cycle
        if cycle is not None and self._head_timer is None and not cycle.more_body:
            self._unwait()  # (no next head is being waited for)

    def _arm(self) -> None:
        self._disarm()
        self._head_timer = self.loop.call_later(HEAD_TIMEOUT_S, self._head_late)
        self._wait()

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        self._unwait()

    def _wait(self) -> None:
        """Count this connection among its address's ones whose request has not arrived."""
        if self._counted is not None:
            _waiting.setdefault(self._counted, {})[self] = None

    def _unwait(self) -> None:
        """No longer among them (its request arrived, or it is gone)."""
        if self._counted is not None:
            waiting = _waiting.get(self._counted)
            if waiting is not None:
                waiting.pop(self, None)
                if not waiting:
                    del _waiting[self._counted]

    def _head_late(self) -> None:
        self._head_timer = None
        if not self.transport.is_closing():
            self.transport.abort()


class GuardedHttpTools(Guard, HttpToolsProtocol):
    """uvicorn's ``httptools`` protocol with the :class:`Guard`, and each head's bytes counted
    from its first (:data:`MAX_HEAD_BYTES`): what the agent serves with."""

    _heading = False
    _head_bytes = 0

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._heading:  # a head begun and not ended: this read counts whole (a head that
            self._head_bytes += len(data)  # began after a body's end in it is over-counted)
            if self._head_bytes > MAX_HEAD_BYTES and not self.transport.is_closing():
                self.transport.write(HEAD_TOO_LARGE)
                self.transport.close()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._heading, self._head_bytes = True, 0

    def on_headers_complete(self) -> None:
        self._heading = False
        super().on_headers_complete()
        self._head_arrived()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._body_arrived()

    def on_response_complete(self) -> None:
        queued = bool(self.pipeline)  # a next request whose head already arrived: started now
        super().on_response_complete()
        if not queued:
            self._arm()  # the next head, if any, is due within HEAD_TIMEOUT_S from now
