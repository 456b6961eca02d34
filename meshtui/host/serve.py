"""``meshtui host serve``: the agent's Starlette app under uvicorn, on TCP or a Unix socket.

One endpoint takes signed envelopes; the blocking work (files, provisioner, probes) runs in a
thread so the event loop keeps answering. Access logs are off: nothing about a request is logged.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from meshtui.errors import InputError
from meshtui.host import files, identity
from meshtui.host.agent import Agent

MAX_BODY = 64 * 1024 * 1024


def build_app(agent: Agent) -> Starlette:
    """The agent's HTTP surface: ``POST /v1`` (signed envelopes) and ``GET /health``."""

    async def message(request: Request) -> Response:
        declared = request.headers.get("content-length", "")
        if not declared.isdigit() or int(declared) > MAX_BODY:
            return JSONResponse({"error": "request too large or without a length"}, status_code=413)
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_BODY:
                return JSONResponse({"error": "request too large"}, status_code=413)
            chunks.append(chunk)
        body = b"".join(chunks)
        try:
            data = json.loads(body)
        except ValueError:
            return JSONResponse({"error": "not JSON"}, status_code=400)
        status, envelope = await run_in_threadpool(agent.handle, data)
        return JSONResponse(envelope, status_code=status)

    async def health(request: Request) -> Response:
        return JSONResponse({"node": agent.identity.name})

    return Starlette(
        routes=[Route("/v1", message, methods=["POST"]), Route("/health", health, methods=["GET"])]
    )


def uvicorn_config(app: Starlette, listen: str) -> uvicorn.Config:
    """A uvicorn config for ``HOST:PORT`` or ``unix:PATH``, quiet and without access logs."""
    common = {
        "log_level": "warning",
        "access_log": False,
        "lifespan": "off",
        "timeout_graceful_shutdown": 5,
    }
    if listen.startswith("unix:"):
        path = Path(listen[len("unix:") :]).absolute()
        # the socket is chmod-ed by path after bind: only in a folder nobody else can write
        folder = files.open_folder(path.parent, create=0o755)
        if folder is not None:
            folder.close()
        if path.exists():
            path.unlink()
        return uvicorn.Config(app, uds=str(path), **common)  # type: ignore[arg-type]
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        raise InputError(f"--listen {listen!r}: use HOST:PORT or unix:PATH")
    return uvicorn.Config(app, host=host.strip("[]"), port=int(port), **common)  # type: ignore[arg-type]


def serve(state_dir: Path, listen: str, *, allow_loopback: bool = False) -> int:
    """Run the agent until SIGTERM/SIGINT."""
    agent = Agent(identity.load(state_dir), allow_loopback=allow_loopback)
    server = _Server(uvicorn_config(build_app(agent), listen))
    server.run()
    return 0


class _Server(uvicorn.Server):
    """uvicorn makes a Unix socket 0666; only this user (the controller's) may connect."""

    async def startup(self, sockets: list[Any] | None = None) -> None:
        await super().startup(sockets)
        if self.config.uds:
            os.chmod(self.config.uds, 0o600)
