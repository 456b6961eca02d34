"""What an agent builds from a body before it knows who sent it: nothing but the envelope's two
strings. A real agent process on a real Unix socket; its peak resident memory (``VmHWM``) read
from /proc before and after each hostile body, and its log read for a traceback."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from meshtui.host.server import serve

MiB = 1024 * 1024
HWM_GROWTH_LIMIT = 64 * MiB
"""How far the agent's peak may rise for one hostile body: the 16 MiB body itself and its
envelope's strings, never the objects a parse of its content would make (~400 MiB)."""


@pytest.fixture
def mesh(mesh_with_agents):
    return mesh_with_agents(
        consumers={"app1": ["gitea"]}, port=5432, admin=None, provisioner=["true"]
    )


def peak_memory(pid: int) -> int:
    """The process's peak resident memory so far, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for {pid}")


def post_body(path: Path, body: bytes) -> tuple[str, bytes]:
    """POST ``body`` to ``/v1`` by hand; the status line and the answer's body."""
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(60)
        sock.connect(str(path))
        head = f"POST /v1 HTTP/1.1\r\nHost: agent\r\nContent-Length: {len(body)}\r\n\r\n"
        sock.sendall(head.encode() + body)
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.endswith(b"}"):
            got = sock.recv(65536)
            if not got:
                break
            answer += got
    status, _, rest = answer.partition(b"\r\n")
    return status.decode(errors="replace"), rest.partition(b"\r\n\r\n")[2]


def many_objects(size: int) -> bytes:
    """``[{},{},…]`` of exactly ``size`` bytes: 3 bytes on the wire, ~70 as Python objects."""
    count = (size - 1) // 3
    body = b"[" + b"{}," * (count - 1) + b"{}]"
    return body + b" " * (size - len(body))


HOSTILE = {
    "many-objects": many_objects(serve.MAX_BODY - 1),
    "deep-arrays": b"[" * 1_000_000,
    "deep-in-body": b'{"body":' + b"[" * 1_000_000,
    "deep-unknown-field": b'{"x":' + b"[" * 500_000 + b"]" * 500_000 + b',"body":"","sig":""}',
    "long-body-string": b'{"body":"' + b"A" * (serve.MAX_BODY - 64) + b'","sig":"A"}',
}


@pytest.mark.parametrize("body", list(HOSTILE.values()), ids=list(HOSTILE))
def test_a_hostile_unsigned_body_is_refused_unsigned_with_flat_memory(mesh, body: bytes) -> None:
    with mesh.controller() as ctl:
        assert ctl.push().ok  # everything the agent does is imported and warm
    pid = mesh.procs["app1"].pid
    plain_status, plain_answer = post_body(mesh.sockets["app1"], b"{}")
    before = peak_memory(pid)

    status, answer = post_body(mesh.sockets["app1"], body)

    growth = peak_memory(pid) - before
    assert growth < HWM_GROWTH_LIMIT, f"the agent's peak grew {growth / MiB:.0f} MiB"
    assert status == plain_status == "HTTP/1.1 403 Forbidden", (status, answer)
    # unsigned, as for any body that is not an envelope: the node signs nothing for nobody
    assert json.loads(answer).keys() == {"error"}, answer
    assert "not a meshtui envelope" in json.loads(answer)["error"]
    assert "not a meshtui envelope" in json.loads(plain_answer)["error"]
    assert "Traceback" not in mesh.agent_logs()
    assert "RecursionError" not in mesh.agent_logs()
    with mesh.controller() as ctl:
        assert ctl.push().ok  # and the agent still serves the controller
