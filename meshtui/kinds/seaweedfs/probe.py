"""The live login to an object store: SigV4-signed S3 requests from the consumer's node, over TLS.

Same evidence and verdicts as the PostgreSQL and Redis probes, S3-shaped, on one TLS
connection that verifies the store's certificate against the declared CA alone (host name, the
private address, included):

* a ``ListObjectsV2`` of the consumer's own bucket, **signed** (SigV4, botocore's signer,
  never hand-rolled) with the held credential: ``200`` is accepted; ``SignatureDoesNotMatch``
  or ``InvalidAccessKeyId`` (with 403) is refused; anything else (``AccessDenied`` on its own bucket,
  ``NoSuchBucket``, a 5xx while the store starts, TLS or connection errors) is unknown, never
  revoked;
* after an accepted login, a bucket outside its rights (a fresh random name) must answer
  ``AccessDenied`` (a 5xx there is unknown: the store failed). When it answers anything
  else, an **unsigned** request tells why: a store that answers it (its objects, or
  ``NoSuchBucket``: it looked past authentication) lets anyone in, as SeaweedFS with no
  identity at all does, so nothing it says can prove a revocation ("no password demanded");
  otherwise the credential's rights are wider than declared (unknown);
* the negative control (:func:`probe`) signs with a random wrong secret and must be refused.

The secret key never leaves this process: SigV4 sends only an HMAC of the request.

The requests go through the standard library's ``http.client`` on one verified TLS connection,
not httpx: a probe is a TLS handshake and two small requests, and httpx's per-request work
(~1 ms of Python a request, held under the GIL) was most of the probe's client time, while
``http.client`` spends ~0.3 ms. The ``Host`` header is set by us and signed as sent, so no
library's normalisation of a host name can turn into a ``SignatureDoesNotMatch``.
"""

from __future__ import annotations

import http.client
import re
import secrets
import socket
import ssl
import time

from meshtui import cafile
from meshtui.contracts.probe_target import NotRun, loopback_host, named_loopback, route
from meshtui.contracts.probe_types import (
    LoginResult,
    ProbeOptions,
    ProbeResult,
    ProbeTarget,
    control_password,
    scrub,
)
from meshtui.kinds.seaweedfs.values import REGION, default_bucket
from meshtui.model import Verdict

REFUSED_CODES = frozenset({"SignatureDoesNotMatch", "InvalidAccessKeyId"})
PAST_AUTH = frozenset({"OK", "NoSuchBucket", "NoSuchKey"})
"""What an unsigned request can only get from a store that asked for no signature."""
_CODE = re.compile(rb"<Code>([A-Za-z0-9.]{1,64})</Code>")
MAX_BODY = 65536
"""The most of an answer a probe reads: its own bucket lists at most one key."""


def tls_context(ca: str) -> ssl.SSLContext:
    """A client context trusting ``ca`` alone (not the system's store), the file read as root
    reads a credential file (:func:`meshtui.cafile.context`)."""
    return cafile.context(ca)


def _code(status: int, body: bytes) -> str:
    """The S3 error code of an answer (``<Code>`` of its XML), or its HTTP status."""
    found = _CODE.search(body[:4096])
    return found.group(1).decode() if found else f"HTTP {status}"


def _signed(
    method: str, url: str, access_key: str, secret_key: str, host: str | None = None
) -> dict[str, str]:
    """The SigV4 headers of ``method url`` (empty body), from botocore's S3 signer; with
    ``host``, the ``Host`` header to send, signed as it is (botocore derives it otherwise)."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    request = AWSRequest(method=method, url=url, headers={"Host": host} if host else None)
    S3SigV4Auth(Credentials(access_key, secret_key), "s3", REGION).add_auth(request)
    return {k: str(v) for k, v in request.headers.items()}


class _TooLarge(Exception):
    """An answer longer than :data:`MAX_BODY`: not what a bucket listing of one key is."""


def _get(conn: http.client.HTTPSConnection, path: str, headers: dict[str, str]) -> tuple[int, str]:
    """One ``GET`` on the connection: its status and S3 code (``OK`` for a 2xx), the answer
    read whole (so the connection can carry the next request) but never past MAX_BODY."""
    conn.request("GET", path, headers=headers)
    response = conn.getresponse()
    body = response.read(MAX_BODY + 1)
    if len(body) > MAX_BODY:
        raise _TooLarge(f"an answer of more than {MAX_BODY} bytes to GET {path}")
    status = response.status
    return status, "OK" if status < 300 else _code(status, body)


def _result(
    verdict: Verdict,
    reason: str,
    started: float | None,
    *,
    loopback: bool,
    used_password: bool | None = None,
) -> LoginResult:
    return LoginResult.after(
        verdict, reason, started, loopback=loopback, used_password=used_password
    )


class _Connection(http.client.HTTPSConnection):
    """HTTPS to the address the probe checked, the certificate verified for the host as
    declared: the name is never resolved a second time (it could answer otherwise)."""

    def __init__(
        self, host: str, address: str, port: int, *, timeout: float, context: ssl.SSLContext
    ) -> None:
        super().__init__(host, port, timeout=timeout, context=context)
        self._address = address
        self._tls = context
        self.local: str | None = None  # this end's address (S3 does not say whom it saw)

    def connect(self) -> None:
        sock = socket.create_connection((self._address, self.port), self.timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as http.client's own
        self.local = str(sock.getsockname()[0])
        self.sock = self._tls.wrap_socket(sock, server_hostname=self.host)


def _checked(target: ProbeTarget, options: ProbeOptions) -> tuple[str, bool] | LoginResult:
    """The address to connect to and whether it is loopback, or why the probe does not run."""
    loopback = loopback_host(target.host)
    named = named_loopback(target.host, allow_loopback=options.allow_loopback)
    if named is not None:
        return _result(Verdict.UNKNOWN, named.reason, None, loopback=named.loopback)
    port = target.port
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        return _result(Verdict.UNKNOWN, f"not run: bad port {port!r}", None, loopback=loopback)
    if not target.tls:
        return _result(
            Verdict.UNKNOWN,
            "not run: an object store is probed over TLS only (a signed request in clear "
            "shows every object it touches)",
            None,
            loopback=loopback,
        )
    if not target.ca:
        return _result(
            Verdict.UNKNOWN,
            "not run: no CA to verify the store's certificate (declare ca)",
            None,
            loopback=loopback,
        )
    found = route(target.host, port, allow_loopback=options.allow_loopback)
    if isinstance(found, NotRun):
        return _result(Verdict.UNKNOWN, found.reason, None, loopback=found.loopback)
    return found.address, found.loopback


def login(target: ProbeTarget, options: ProbeOptions) -> LoginResult:
    """One signed request with ``target.password`` (see the module docstring); never raises,
    never lets the secret out."""
    checked = _checked(target, options)
    if isinstance(checked, LoginResult):
        return checked
    address, loopback = checked
    host = target.host
    if not target.user or not target.password:
        return _result(Verdict.UNKNOWN, "not run: no login or secret", None, loopback=loopback)
    assert target.ca is not None
    try:
        context = tls_context(target.ca)
    except (OSError, ssl.SSLError) as exc:
        return _result(
            Verdict.UNKNOWN, f"not run: the CA file {target.ca} cannot be used: {exc}", None,
            loopback=loopback,
        )  # fmt: skip
    bracketed = f"[{host.strip('[]')}]" if ":" in host else host
    authority = f"{bracketed}:{target.port}"  # the Host header: sent and signed as it is
    bucket = target.dbname or default_bucket(target.user)
    own = f"/{bucket}?list-type=2&max-keys=1"
    outside = f"/meshtui-outside-{secrets.token_hex(6)}?list-type=2&max-keys=1"
    user, password = target.user, target.password

    def signed(path: str) -> dict[str, str]:
        return _signed("GET", f"https://{authority}{path}", user, password, authority)

    started = time.perf_counter()
    conn = _Connection(
        host.strip("[]"), address, target.port, timeout=options.timeout, context=context
    )
    try:
        status, code = _get(conn, own, signed(own))
        if status == 403 and code in REFUSED_CODES:  # S3 refuses a key or signature with 403
            return _result(
                Verdict.REFUSED, f"signed request refused ({code}) over TLS", started,
                loopback=loopback, used_password=True,
            )  # fmt: skip
        if status != 200:
            return _result(
                Verdict.UNKNOWN,
                f"bucket {bucket}: {code} (HTTP {status}), neither accepted nor a refusal "
                "of the key",
                started, loopback=loopback, used_password=True,
            )  # fmt: skip
        wide_status, wide = _get(conn, outside, signed(outside))
        if wide == "AccessDenied":
            return LoginResult.after(
                Verdict.ACCEPTED,
                f"signed request accepted on {bucket} over TLS (certificate verified) from "
                f"{conn.local or 'an unread address'}; a bucket outside its rights was refused",
                started, loopback=loopback, used_password=True, client_addr=conn.local,
            )  # fmt: skip
        if wide_status >= 500:  # the store failed: not a word about the key's rights
            return _result(
                Verdict.UNKNOWN,
                f"signed request accepted on {bucket}, but a bucket outside its rights "
                f"answered {wide} (HTTP {wide_status}): its confinement is not proven",
                started, loopback=loopback, used_password=True,
            )  # fmt: skip
        # only now: is it the key's rights, or no check at all?
        _bare_status, unsigned = _get(conn, own, {"Host": authority})
    except Exception as exc:  # TLS, connection, timeout: never a verdict about the key
        return _result(
            Verdict.UNKNOWN, scrub(f"{type(exc).__name__}: {exc}", target.password), started,
            loopback=loopback,
        )  # fmt: skip
    finally:
        conn.close()
    if unsigned in PAST_AUTH:
        return _result(
            Verdict.NO_PASSWORD,
            f"the store answered an unsigned request with {unsigned}: anyone gets in, so no "
            "key can prove a revocation (does it hold no identity at all?)",
            started, loopback=loopback, used_password=False,
        )  # fmt: skip
    return _result(
        Verdict.UNKNOWN,
        f"signed request accepted on {bucket}, but a bucket outside its rights answered "
        f"{wide} (HTTP {wide_status}), not AccessDenied: its rights are wider than declared",
        started, loopback=loopback, used_password=True,
    )  # fmt: skip


def probe(target: ProbeTarget, options: ProbeOptions) -> ProbeResult:
    """The held credential's login; if accepted, the negative control (a random wrong secret)."""
    first = login(target, options)
    if not options.control or first.verdict is not Verdict.ACCEPTED:
        return ProbeResult(first, None)
    wrong = ProbeTarget(
        target.host, target.port, target.user, control_password(target.password),
        target.dbname, kind=target.kind, ca=target.ca, tls=target.tls,
    )  # fmt: skip
    return ProbeResult(first, login(wrong, options))


__all__ = ["login", "probe", "tls_context"]
