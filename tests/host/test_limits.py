"""What an agent reads before it knows who is asking: a bounded body, a bounded number of
requests at once, and flat memory under a flood of unsigned oversize posts (real agent process,
real Unix socket, resident memory read from /proc)."""

from __future__ import annotations

import json
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path

import httpx
import pytest

from meshtui import crypto
from meshtui.controller.core import Controller, init_keys
from meshtui.controller.plan.planner import Planner
from meshtui.host.server import serve
from meshtui.host.state import identity
from meshtui.protocol import wire
from tests.fix_agents import write_declaration

MiB = 1024 * 1024
FLOOD = 60 * MiB  # each attacking post claims (and tries to send) this much
RSS_GROWTH_LIMIT = 80 * MiB


@pytest.fixture
def mesh(mesh_with_agents):
    return mesh_with_agents(
        consumers={"app1": ["gitea"]}, port=5432, admin=None, provisioner=["true"]
    )


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


def raw_post(path: Path, headers: str, body_size: int, chunked: bool) -> str:
    """Send a request by hand (the body as fast as the agent reads it); its status line."""
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(20)
        sock.connect(str(path))
        sock.sendall(f"POST /v1 HTTP/1.1\r\nHost: agent\r\n{headers}\r\n".encode())
        block = b"{" * MiB
        sent = 0
        try:
            while sent < body_size:
                if chunked:
                    sock.sendall(b"%x\r\n" % len(block) + block + b"\r\n")
                else:
                    sock.sendall(block[: body_size - sent])
                sent += len(block)
            if chunked:
                sock.sendall(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            pass  # the agent stopped reading: its answer is already waiting
        try:
            answer = sock.recv(4096).decode(errors="replace")
        except (ConnectionResetError, TimeoutError):
            return "no answer"
    return answer.split("\r\n", 1)[0]


def post(mesh, node: str, envelope: dict) -> httpx.Response:
    transport = httpx.HTTPTransport(uds=str(mesh.sockets[node]))
    with httpx.Client(transport=transport, base_url="http://agent", timeout=30) as client:
        return client.post("/v1", json=envelope)


def state_request(mesh, pad: int = 0) -> dict:
    keys = crypto.load_private(mesh.state / "controller.key")
    # padded inside a real field: an unknown one is refused (meshtui.protocol.messages)
    spec = {"provider": "app1/x", "provision": "database", "receives": "/" + "x" * pad}
    payload = {"inspect": [{**spec, "admin": None, "provisioner": ["true"]}]} if pad else {}
    env, _ = wire.envelope(wire.STATE, payload, sender="controller", to="app1", keys=keys)
    return env


def test_a_flood_of_unsigned_oversize_posts_gets_413_and_memory_stays_flat(mesh):
    with mesh.controller() as ctl:
        assert ctl.push().ok  # everything the agent does is imported and warm
    pid = mesh.procs["app1"].pid
    baseline = rss(pid)
    peak = [baseline]
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], rss(pid))
            time.sleep(0.02)

    sock = mesh.sockets["app1"]
    attacks = [
        (f"Content-Length: {FLOOD}\r\n", FLOOD, False),
        ("Transfer-Encoding: chunked\r\n", FLOOD, True),
        # just under the cap: these are read, one large body at a time
        (f"Content-Length: {serve.MAX_BODY - 4096}\r\n", serve.MAX_BODY - 4096, False),
    ] * 6
    answers: list[str] = []

    def attack(headers: str, size: int, chunked: bool) -> None:
        answers.append(raw_post(sock, headers, size, chunked))

    watcher = threading.Thread(target=watch)
    watcher.start()
    threads = [threading.Thread(target=attack, args=a) for a in attacks]
    for t in threads:
        t.start()
    # a legitimate request in the middle of the flood still gets through (maybe after a 503)
    for _ in range(50):
        resp = post(mesh, "app1", state_request(mesh))
        if resp.status_code != 503:
            break
        time.sleep(0.1)
    legit = resp.status_code
    for t in threads:
        t.join()
    done.set()
    watcher.join()

    growth = peak[0] - baseline
    print(f"agent RSS {baseline / MiB:.0f} MiB, peak {peak[0] / MiB:.0f} MiB under the flood")
    assert growth < RSS_GROWTH_LIMIT, f"agent grew {growth / MiB:.0f} MiB under the flood"
    assert legit == 200
    assert len(answers) == len(attacks)
    assert sum(a.startswith("HTTP/1.1 413") for a in answers) >= 12, answers
    assert all(a.split()[1] in {"413", "400", "403", "503"} for a in answers if a != "no answer")
    assert post(mesh, "app1", state_request(mesh)).status_code == 200
    assert "Traceback" not in mesh.agent_logs()


def test_too_many_requests_at_once_get_503_quickly(mesh):
    """Connections that send headers and then stall: a large body holds its (one) large slot and
    the next large one is told at once; small bodies hold no slot (read before a slot
    is taken), so a request behind 16 of them is still answered."""
    sock_path = str(mesh.sockets["app1"])
    held = []
    try:
        for n in range(16):  # more than the agent handles at once
            s = socket.socket(socket.AF_UNIX)
            s.connect(sock_path)
            size = 2 * MiB if n == 0 else 100
            s.sendall(
                f"POST /v1 HTTP/1.1\r\nHost: agent\r\nContent-Length: {size}\r\n\r\n{{".encode()
            )
            held.append(s)
        time.sleep(0.5)
        started = time.monotonic()
        status = raw_post(mesh.sockets["app1"], f"Content-Length: {2 * MiB}\r\n", 2 * MiB, False)
        assert status.startswith("HTTP/1.1 503"), status
        assert time.monotonic() - started < 2
        started = time.monotonic()
        status = raw_post(mesh.sockets["app1"], "Content-Length: 2\r\n", 2, False)
        assert not status.startswith("HTTP/1.1 503"), status  # read, then refused unsigned
        assert time.monotonic() - started < 2
    finally:
        for s in held:
            s.close()
    for _ in range(50):
        resp = post(mesh, "app1", state_request(mesh))
        if resp.status_code != 503:
            break
        time.sleep(0.1)
    assert resp.status_code == 200
    assert "Traceback" not in mesh.agent_logs()


def test_a_legitimate_request_over_a_mebibyte_is_accepted(mesh):
    resp = post(mesh, "app1", state_request(mesh, pad=3 * MiB))
    assert resp.status_code == 200


def test_the_largest_real_delivery_fits_under_the_cap():
    """A provider delivery of 10,000 pairs, built by the real controller code, is well under
    the agent's body cap (it measured 5.2 MiB when the cap was set to 16 MiB)."""
    root = Path(tempfile.mkdtemp(prefix="meshtui-10k-"))
    try:
        size, pairs = _delivery_size(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert pairs == 10_000
    assert 2 * size < serve.MAX_BODY, f"10,000 pairs take {size} bytes"


def _delivery_size(root: Path) -> tuple[int, int]:
    state = root / "state"
    pub, _ = init_keys(state)
    consumers = {f"app{n:03d}": [f"module{m:03d}" for m in range(100)] for n in range(100)}
    for node in ["db1", *consumers]:
        identity.init(node, root / "nodes" / node, pub)
    decl = write_declaration(root, port=5432, admin=root / "admin.conninfo", consumers=consumers)
    with Controller.open(state) as ctl:
        ctl.declare(decl)
        sets = Planner(ctl.inventory).provider_sets([("db1/postgres", "database")], {})
        env, _ = wire.envelope(
            wire.DELIVER, {"provider": sets["db1"]}, sender="controller", to="db1", keys=ctl.keys()
        )
    return len(json.dumps(env).encode()), len(sets["db1"][0]["consumers"])
