"""The object-store probe against answers a healthy SeaweedFS does not give on demand: a 5xx on
either request, an answer too long to be a one-key listing, and a host name written in capitals.

The peer is a real TLS server (the standard library's HTTP server, a certificate from the lab's
CA code) on a real loopback socket, scripted to answer each path one way; it records what it
received so the test can check the signature with botocore, as the store would. It stands in
for a store that fails, not for the probe's logic, which is the code under test.
"""

from __future__ import annotations

import http.server
import socket
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from meshtui.contracts.probe_types import ProbeOptions, ProbeTarget
from meshtui.kinds.seaweedfs import probe as s3probe
from meshtui.kinds.seaweedfs.values import REGION
from meshtui.lab import certificates
from meshtui.model import Verdict

SECRET = "s3cret-0123456789abcdef0123456789abcdef"
LOGIN = "gitea_app1_3f9a2c"


def _error(code: str) -> bytes:
    return f"<?xml version='1.0'?><Error><Code>{code}</Code></Error>".encode()


@dataclass
class Peer:
    """What the server answers (by the path's first part: ``own`` or ``outside``) and what it
    received (method, path, headers) for each request."""

    port: int
    ca: Path
    answers: dict[str, tuple[int, bytes]] = field(default_factory=dict)
    seen: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)


@pytest.fixture
def peer(tmp_path: Path) -> Iterator[Peer]:
    certificates.authority(tmp_path, "ca", "probe answers CA")
    certificates.certificate(tmp_path, "server", "ca", "DNS:localhost,IP:127.0.0.1", "serverAuth")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tmp_path / "server.pem", tmp_path / "server.key")
    state = Peer(0, tmp_path / "ca.pem")

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: the probe's requests share one connection

        def do_GET(self) -> None:
            state.seen.append((self.command, self.path, dict(self.headers.items())))
            bucket = self.path.lstrip("/").split("?")[0]
            key = "outside" if bucket.startswith("meshtui-outside-") else "own"
            status, body = state.answers[key]
            if key == "own" and "Authorization" not in self.headers:
                status, body = 403, _error("AccessDenied")  # unsigned: authentication is on
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    state.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


def _probe(peer: Peer, host: str = "127.0.0.1", control: bool = False) -> s3probe.ProbeResult:
    target = ProbeTarget(
        host, peer.port, LOGIN, SECRET, "gitea-lfs", kind="seaweedfs", ca=str(peer.ca)
    )
    return s3probe.probe(target, ProbeOptions(allow_loopback=True, control=control))


LISTING = b"<ListBucketResult><Name>gitea-lfs</Name></ListBucketResult>"


def test_a_store_that_fails_is_unknown_never_refused_nor_accepted(peer: Peer) -> None:
    peer.answers = {"own": (503, _error("ServiceUnavailable")), "outside": (403, b"")}
    starting = _probe(peer).login
    assert starting.verdict is Verdict.UNKNOWN, starting.reason
    assert "ServiceUnavailable (HTTP 503)" in starting.reason
    peer.answers = {"own": (200, LISTING), "outside": (500, _error("InternalError"))}
    failing = _probe(peer).login
    assert failing.verdict is Verdict.UNKNOWN, failing.reason
    assert "InternalError (HTTP 500)" in failing.reason and "not proven" in failing.reason
    # a refusal's code behind a 5xx is the store failing, not a refusal (S3 refuses with 403)
    peer.answers = {"own": (500, _error("SignatureDoesNotMatch")), "outside": (403, b"")}
    assert _probe(peer).login.verdict is Verdict.UNKNOWN
    peer.answers = {"own": (403, _error("SignatureDoesNotMatch")), "outside": (403, b"")}
    assert _probe(peer).login.verdict is Verdict.REFUSED
    peer.answers = {"own": (200, LISTING), "outside": (200, LISTING)}
    wide = _probe(peer).login
    assert wide.verdict is Verdict.UNKNOWN and "wider than declared" in wide.reason, wide.reason


def test_an_answer_too_long_for_a_listing_of_one_key_is_unknown(peer: Peer) -> None:
    peer.answers = {"own": (200, b"x" * (s3probe.MAX_BODY + 1)), "outside": (403, b"")}
    long = _probe(peer).login
    assert long.verdict is Verdict.UNKNOWN, long.reason
    assert f"more than {s3probe.MAX_BODY} bytes" in long.reason
    peer.answers = {"own": (200, LISTING), "outside": (403, _error("AccessDenied"))}
    assert _probe(peer).login.verdict is Verdict.ACCEPTED


def test_the_host_header_is_signed_as_it_is_sent(peer: Peer) -> None:
    """botocore signs a host name lowercased; a client that sent it as written would be
    answered SignatureDoesNotMatch by the store: a false refusal. Each request is checked here
    as the store checks it: the signature recomputed by botocore over what arrived."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    peer.answers = {"own": (200, LISTING), "outside": (403, _error("AccessDenied"))}
    result = _probe(peer, host="LocalHost")
    assert result.login.verdict is Verdict.ACCEPTED, result.login.reason
    assert len(peer.seen) == 2  # its own bucket, then one outside its rights
    auth = S3SigV4Auth(Credentials(LOGIN, SECRET), "s3", REGION)
    for method, path, headers in peer.seen:
        assert headers["Host"] == f"LocalHost:{peer.port}"
        arrived = AWSRequest(
            method=method, url=f"https://{headers['Host']}{path}", headers={"Host": headers["Host"]}
        )
        arrived.context["timestamp"] = headers["X-Amz-Date"]
        auth._modify_request_before_signing(arrived)
        to_sign = auth.string_to_sign(arrived, auth.canonical_request(arrived))
        expected = auth.signature(to_sign, arrived)
        assert headers["Authorization"].endswith(f"Signature={expected}"), (path, headers)


def test_the_host_is_resolved_once_and_the_checked_address_is_the_one_connected(
    peer: Peer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A name is checked (loopback, this host's own address) on one resolution: resolving it
    again to connect could land elsewhere. The certificate is still verified for the name."""
    peer.answers.update(own=(200, LISTING), outside=(403, _error("AccessDenied")))
    asked: list[object] = []
    real = socket.getaddrinfo

    def counted(host: object, *args: object, **kwargs: object) -> object:
        asked.append(host)
        return real(host, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(socket, "getaddrinfo", counted)
    result = _probe(peer, host="localhost")
    assert result.login.verdict is Verdict.ACCEPTED, result.login.reason
    assert asked.count("localhost") == 1  # the check's; the connection asks for its address
    assert set(asked) == {"localhost", "127.0.0.1"}
    assert peer.seen[0][2]["Host"] == f"localhost:{peer.port}"
