"""An on-path attacker cannot make a request look refused by the node, in the node's words.

The reviewer's attack: a keyless proxy between controller and agent dropped the controller's
request, sent the real agent ``{"body": "AAAA", "sig": "AAAA"}`` instead and relayed its answer:
a 403 signed by the node ("not signed by controller's key"), which the controller accepted as
the node's refusal because a 403 was not required to quote the request's nonce. Here the same
proxy runs on a real Unix socket in front of a real agent.
"""

from __future__ import annotations

import http.server
import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from meshtui import crypto
from meshtui.controller.agents.client import AgentClient
from meshtui.errors import AgentError
from meshtui.protocol import messages


@pytest.fixture
def mesh(mesh_with_agents: Any) -> Any:
    return mesh_with_agents(
        consumers={"app1": ["gitea"]}, port=5432, admin=None, provisioner=["true"]
    )


class _UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


@contextmanager
def _proxy(listen: Path, agent: Path) -> Iterator[None]:
    """A keyless on-path attacker: swaps every request for garbage, relays the agent's answer."""

    class Swap(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            self.rfile.read(int(self.headers["content-length"]))
            transport = httpx.HTTPTransport(uds=str(agent))
            with httpx.Client(transport=transport, base_url="http://agent") as client:
                got = client.post("/v1", json={"body": "AAAA", "sig": "AAAA"})
            self.send_response(got.status_code)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(got.content)))
            self.end_headers()
            self.wfile.write(got.content)

        def log_message(self, *args: object) -> None:
            pass

        def address_string(self) -> str:
            return "proxy"

    server = _UnixHTTPServer(str(listen), Swap)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()


def test_a_swapped_request_is_not_reported_as_the_nodes_refusal(mesh: Any) -> None:
    keys = crypto.load_private(mesh.state / "controller.key")
    with mesh.controller(read_only=True) as ctl:
        row = dict(ctl.inventory.nodes()["app1"])
    assert AgentClient(row, keys).call(messages.STATE, {"holdings": False})["node"] == "app1"
    listen = mesh.root / "run" / "proxy.sock"
    with _proxy(listen, mesh.sockets["app1"]):
        row["agent"] = f"unix:{listen}"
        with pytest.raises(AgentError) as said:
            AgentClient(row, keys).call(messages.STATE, {"holdings": False})
    text = str(said.value)
    assert "not signed by controller" not in text, f"the forged refusal was believed: {text}"
    assert "403" in text


def test_the_agent_signs_no_answer_to_an_unauthenticated_request(mesh: Any) -> None:
    transport = httpx.HTTPTransport(uds=str(mesh.sockets["app1"]))
    with httpx.Client(transport=transport, base_url="http://agent") as client:
        got = client.post("/v1", json={"body": "AAAA", "sig": "AAAA"})
    assert got.status_code == 403
    answer = got.json()
    assert "sig" not in answer and "body" not in answer, answer
    assert set(answer) == {"error"}
