"""What the controller builds from an agent's answer before it trusts it: nothing but the
envelope's two strings, and, once the node's signature holds, nothing its kind's shape does
not hold. A hostile socket answers the controller's real client, run in a process of its own
whose peak resident memory (``VmHWM``) is read from /proc before and after the call."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from meshtui import crypto
from meshtui.protocol import wire
from tests.controller.test_channel import Endless

MiB = 1024 * 1024
ANSWER = 63 * MiB
"""The size of each hostile answer: just under what the channel reads (64 MiB)."""

ASKER = r"""
import json, sys
from pathlib import Path
from meshtui import crypto; from meshtui.protocol import messages
from meshtui.controller.agents.client import AgentClient
from meshtui.errors import AgentError

def peak():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024

node = {"name": "app1", "agent": "unix:" + sys.argv[1], "verify_key": sys.argv[2]}
client = AgentClient(node, crypto.PrivateKeys.generate(node=False), timeout=60)
before = peak()
try:
    client.call(messages.STATE, {})
    said = "trusted"
except AgentError as exc:
    said = str(exc)
print(json.dumps({"before": before, "after": peak(), "said": said}))
"""


def unsigned_objects(_nonce: str, _keys: crypto.PrivateKeys) -> bytes:
    """``[{},{},…]``: 3 bytes on the wire, ~70 as Python objects."""
    return b"[" + b"{}," * (ANSWER // 3 - 1) + b"{}]"


def unsigned_depth(_nonce: str, _keys: crypto.PrivateKeys) -> bytes:
    """Arrays nested as deep as the answer is long."""
    return b"[" * ANSWER


def signed_objects(nonce: str, keys: crypto.PrivateKeys) -> bytes:
    """A state answer signed with the node's own key, quoting the request, whose holdings are
    ``[{},{},…]``: what root on a node (or its agent's key) can send."""
    count = (ANSWER * 3 // 4 - 512) // 3
    body = {
        "v": wire.VERSION,
        "kind": wire.STATE,
        "from": "app1",
        "to": wire.CONTROLLER,
        "at": time.time(),
        "seq": 1,
        "nonce": "cd" * 16,
        "reply_to": nonce,
        "payload": {"node": "app1", "fingerprint": "x", "holdings": "@"},
    }
    text = json.dumps(body, separators=(",", ":"), sort_keys=True).encode()
    raw = text.replace(b'"@"', b"[" + b"{}," * (count - 1) + b"{}]")
    envelope = {"body": crypto.b64(raw), "sig": crypto.b64(keys.sign(raw))}
    return json.dumps(envelope).encode()


class Hostile(Endless):
    """A Unix socket answering one request with ``make(nonce, keys)``: the request's nonce read
    from the controller's own envelope, so a signed answer quotes it as a real node's does."""

    def __init__(self, path: Path, make, keys: crypto.PrivateKeys) -> None:  # noqa: ANN001
        self.make, self.keys = make, keys
        super().__init__(path, b"", b"")

    def _serve(self) -> None:
        try:
            conn, _ = self.server.accept()
        except OSError:
            return
        with conn:
            got = b""
            while b"\r\n\r\n" not in got:
                got += conn.recv(65536)
            head, _, body = got.partition(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            while len(body) < length:
                body += conn.recv(65536)
            signed = json.loads(crypto.unb64(json.loads(body)["body"]))
            answer = self.make(signed["nonce"], self.keys)
            conn.sendall(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\n\r\n" % len(answer) + answer
            )


@pytest.mark.parametrize(
    ("make", "said", "limit"),
    [
        # the body as it came, and nothing built from it
        (unsigned_objects, "answer not trusted: not a meshtui envelope", 1.5 * ANSWER),
        (unsigned_depth, "answer not trusted: not a meshtui envelope", 1.5 * ANSWER),
        # the signed body decoded from it (3/4 of it), and the three copies PyNaCl's check of
        # the signature makes of that body; nothing built from the payload but its first item
        (
            signed_objects,
            "answer refused: state answer: Object missing required field",
            3.5 * ANSWER,
        ),
    ],
    ids=["unsigned-objects", "unsigned-depth", "signed-objects"],
)
def test_a_hostile_answer_is_refused_before_it_is_built(
    tmp_path: Path,
    make,  # noqa: ANN001
    said: str,
    limit: float,
) -> None:
    keys = crypto.PrivateKeys.generate(node=True)
    server = Hostile(tmp_path / "hostile.sock", make, keys)
    try:
        run = subprocess.run(
            [sys.executable, "-c", ASKER, str(server.path), crypto.b64(keys.public().verify)],
            capture_output=True,
            text=True,
            timeout=240,
        )
    finally:
        server.close()
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout)
    growth = got["after"] - got["before"]
    assert said in got["said"], got["said"]
    assert growth < limit, f"the controller's peak grew {growth / MiB:.0f} MiB"
