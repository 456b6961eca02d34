"""``meshtui host serve``: the agent's ASGI app under uvicorn, on TCP or a Unix socket.

One endpoint takes signed envelopes; the blocking work (files, provisioner, probes) runs in a
thread so the event loop keeps answering. That endpoint, ``POST /v1``, is served by
:class:`AgentApp` itself (no router or middleware, its work handed to a thread pool of its
own: both ends of a rotation's window pass through it); the other routes by Starlette.
uvicorn runs the ``httptools`` protocol under ``uvloop`` (C parser and event loop), guarded
(:mod:`meshtui.host.server.connections`). Its access logs are off: the agent logs each request's kind
and outcome itself (:mod:`meshtui.host.log`), never its body.

Everything before the signature check is bounded, since anyone who can connect gets that far: a
body must declare its length and stay under :data:`MAX_BODY` (413 before a byte of it is read),
at most :data:`MAX_REQUESTS` are handled at once, at most :data:`MAX_PEER_REQUESTS` of them for
one peer address, and only :data:`MAX_LARGE` of them may carry a body over :data:`SMALL_BODY`
(one more gets 503 at once), and a body must arrive within :data:`BODY_TIMEOUT_S`. A small body
is read before its request takes a slot, so slow small bodies (from two addresses they held all
eight) keep nobody out; only a large one is read inside its slot. Memory under
a flood is therefore bounded by a few large bodies. A body read is never parsed as free JSON:
its envelope is decoded by its exact type (two base64 strings), so a body of anything else
builds nothing and is refused at its first byte out of place (:func:`meshtui.protocol.wire.open_envelope`). Before that, a request's head must arrive
within a deadline and one address holds only a few connections
(:mod:`meshtui.host.server.connections`), so slow or idle clients cannot keep the controller out.
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from meshtui import folders
from meshtui.errors import InputError
from meshtui.host import log
from meshtui.host.server.answers import BODY_TIMEOUT_S, BodyTooLong, Refused, Step, answering
from meshtui.host.server.connections import GuardedHttpTools, peer_of
from meshtui.host.server.routes import Agent
from meshtui.host.state import identity

MiB = 1024 * 1024
MAX_BODY = 16 * MiB
"""The largest request body read. A provider delivery of 10,000 pairs built by the controller
measured 5.2 MiB (tests/host/test_limits.py); the rest is room for long names and values."""
SMALL_BODY = 1 * MiB
"""Bodies up to this size (every state, probe and consumer delivery) need no large slot."""
MAX_REQUESTS = 8
"""Requests handled at once; the controller sends one per node at a time, a few when a
dashboard and a command run together."""
MAX_PEER_REQUESTS = 4
"""Requests handled at once for one peer address (TCP), so one host's slow bodies leave room
for the controller's."""
MAX_LARGE = 1
"""Requests with a body over SMALL_BODY handled at once (provider deliveries are serialized by
the agent anyway)."""
MAX_CONNECTIONS = 64
"""uvicorn's own cap on open connections and tasks (a backstop; it answers 503 past it)."""


class Slots:
    """How many requests (and how many large ones, and per peer address) are being handled;
    one event loop, no lock."""

    def __init__(self) -> None:
        self.busy = 0
        self.large = 0
        self.peers: Counter[str] = Counter()

    def take(self, large: bool, peer: str | None = None) -> bool:
        """Take a slot (and the large one if ``large``); False when none is free for ``peer``."""
        if self.busy >= MAX_REQUESTS or (large and self.large >= MAX_LARGE):
            return False
        if peer is not None and self.peers[peer] >= MAX_PEER_REQUESTS:
            return False
        self.busy += 1
        self.large += int(large)
        if peer is not None:
            self.peers[peer] += 1
        return True

    def give(self, large: bool, peer: str | None = None) -> None:
        """Give back what :meth:`take` took."""
        self.busy -= 1
        self.large -= int(large)
        if peer is not None:
            self.peers[peer] -= 1
            if self.peers[peer] <= 0:
                del self.peers[peer]


def _refuse(status: int, error: str, **headers: str) -> Response:
    # "Connection: close": the unread rest of the body is never read, the connection just ends
    return JSONResponse(
        {"error": error}, status_code=status, headers={"connection": "close", **headers}
    )


async def _read_body(request: Request, length: int) -> bytearray:
    """The body, at most ``length`` bytes (and never over MAX_BODY), within BODY_TIMEOUT_S."""
    body = bytearray()
    async with asyncio.timeout(BODY_TIMEOUT_S):
        async for chunk in request.stream():
            if len(body) + len(chunk) > min(length, MAX_BODY):
                raise BodyTooLong
            body += chunk
    return body


async def _read_or_refuse(request: Request, length: int) -> bytearray | Response:
    """The body, or the refusal of one that could not be read: too long, too slow, or its
    client gone (:mod:`meshtui.host.server.answers`)."""
    try:
        with answering(Step.READ):
            return await _read_body(request, length)
    except Refused as refused:
        return _refuse(refused.status, refused.error)


class AgentApp:
    """The agent's ASGI app: ``POST /v1`` answered here, any other request by ``rest``."""

    def __init__(self, message: Callable[[Request], Awaitable[Response]], rest: ASGIApp) -> None:
        self._message, self._rest = message, rest

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == "/v1" and scope["method"] == "POST":
            response = await self._message(Request(scope, receive))
            await response(scope, receive, send)  # then its background task, if any
        else:
            await self._rest(scope, receive, send)


def build_app(agent: Agent) -> AgentApp:
    """The agent's HTTP surface: ``POST /v1`` (signed envelopes), ``GET /v1/anchor`` (the audit
    head this node keeps, answered signed) and ``GET /health``."""
    slots = Slots()
    # a request's work runs only while it holds a slot: one thread a slot, made as needed
    workers = ThreadPoolExecutor(max_workers=MAX_REQUESTS, thread_name_prefix="agent-request")

    async def message(request: Request) -> Response:
        declared = request.headers.get("content-length", "")
        if "transfer-encoding" in request.headers or not declared.isdigit():
            return _refuse(413, "a request must declare its length (Content-Length, not chunked)")
        length = int(declared)
        if length > MAX_BODY:
            return _refuse(413, f"request too large (limit {MAX_BODY} bytes)")
        large = length > SMALL_BODY
        peer = peer_of(request.client)
        body = bytearray()
        if not large:  # read before a slot is taken: slow small bodies hold no slot (memory:
            # at most a MiB per connection one address may hold)
            read = await _read_or_refuse(request, length)
            if isinstance(read, Response):
                return read
            body = read
        if not slots.take(large, peer):
            return _refuse(503, "agent busy; try again", **{"retry-after": "1"})
        try:
            if large:
                read = await _read_or_refuse(request, length)
                if isinstance(read, Response):
                    return read
                body = read
            box = [body]  # handed over: the worker holds the only reference to the raw bytes
            del body
            loop = asyncio.get_running_loop()
            status, envelope, after = await loop.run_in_executor(workers, _handle, agent, box)
            # ``after`` (the audit head's readable copy) runs once the answer is sent; without
            # one, no background task (each costs a hop to a worker thread)
            later = BackgroundTask(after) if after is not None else None
            return JSONResponse(envelope, status_code=status, background=later)
        finally:
            slots.give(large, peer)

    async def health(request: Request) -> Response:
        return JSONResponse({"node": agent.identity.name})

    async def anchor(request: Request) -> Response:
        # unsigned, no body: the kept audit head, signed by this node (see Agent.read_anchor)
        peer = peer_of(request.client)
        if not slots.take(False, peer):
            return _refuse(503, "agent busy; try again", **{"retry-after": "1"})
        try:
            status, envelope = agent.read_anchor(request.query_params.get("nonce", ""))
            return JSONResponse(envelope, status_code=status)
        finally:
            slots.give(False, peer)

    rest = Starlette(
        routes=[
            Route("/v1", message, methods=["POST"]),  # (reached only by another method: 405)
            Route("/v1/anchor", anchor, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
        ]
    )
    return AgentApp(message, rest)


def _handle(
    agent: Agent, box: list[bytearray]
) -> tuple[int, dict[str, str], Callable[[], None] | None]:
    """Answer one request body (in a worker thread: verifying 16 MiB takes a while); with what
    is left to do once the answer is sent, if anything (:meth:`Agent.answer`). The body is
    never parsed here: the envelope is read by its exact type (:func:`meshtui.protocol.wire.open_envelope`)."""
    return agent.answer(box.pop())


def uvicorn_config(app: ASGIApp, listen: str) -> uvicorn.Config:
    """A uvicorn config for ``HOST:PORT`` or ``unix:PATH``, quiet and without access logs."""
    uds: str | None = None
    host, port = "127.0.0.1", 8000  # uvicorn's defaults; a Unix socket ignores them
    if listen.startswith("unix:"):
        path = Path(listen[len("unix:") :]).absolute()
        # the socket is chmod-ed by path after bind: only in a folder nobody else can write
        folder = folders.open_folder(path.parent, create=0o755)
        if folder is not None:
            folder.close()
        if path.exists():
            path.unlink()
        uds = str(path)
    else:
        given, sep, digits = listen.rpartition(":")
        if not sep or not digits.isdigit():
            raise InputError(f"--listen {listen!r}: use HOST:PORT or unix:PATH")
        host, port = given.strip("[]"), int(digits)
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        uds=uds,
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=5,
        limit_concurrency=MAX_CONNECTIONS,
        http=GuardedHttpTools,  # a deadline for each request head, a cap per peer address
        loop="uvloop",
        ws="none",  # no upgrade is ever taken
    )


def serve(state_dir: Path, listen: str, *, allow_loopback: bool = False) -> int:
    """Run the agent until SIGTERM/SIGINT."""
    agent = Agent(identity.load(state_dir), allow_loopback=allow_loopback)
    server = _Server(uvicorn_config(build_app(agent), listen))
    log.say(f"node {agent.identity.name} starting (state {state_dir}, pid {os.getpid()})")
    server.run()
    log.say(f"node {agent.identity.name} stopped")
    return 0


class _Server(uvicorn.Server):
    """uvicorn makes a Unix socket 0666; only this user (the controller's) may connect."""

    async def startup(self, sockets: list[Any] | None = None) -> None:
        await super().startup(sockets)
        if self.config.uds:
            os.chmod(self.config.uds, 0o600)
        where = (
            f"unix:{self.config.uds}"
            if self.config.uds
            else f"{self.config.host}:{self.config.port}"
        )
        if self.started:
            log.say(f"listening on {where}")
        else:
            log.say(f"cannot listen on {where} (see the line above)")
