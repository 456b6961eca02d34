"""The live login to an OpenBao: an AppRole login from the consumer's node, over verified TLS.

Same evidence and verdicts as every probe (:mod:`meshtui.contracts.probe_types`), OpenBao-shaped:

* ``POST /v1/auth/approle/login`` with the role_id (the pair's login) and the held secret_id,
  over TLS verified against the declared CA alone (host name: the private address);
* 200 with a token: :attr:`Verdict.ACCEPTED`. The token is dropped unread and not revoked: a
  revocation is one more storage write per probe (it halved probe throughput), and the role's
  tokens live 5 minutes at most (``TOKEN_TTL_S``); a removal revokes them with the rest;
* 400 ``invalid role or secret ID``: :attr:`Verdict.REFUSED`, the only refusal;
* sealed (503), any other status, a certificate that does not verify, a refused connection or a
  timeout: :attr:`Verdict.UNKNOWN`, never refused or revoked;
* the negative control logs in with a random wrong secret_id and must be refused.

The secret_id is only ever the request body's field; it is scrubbed from any error text. One TLS
context per CA file is shared by every probe (:func:`meshtui.kinds.openbao.client.tls_context`).
"""

from __future__ import annotations

import ipaddress
import time

import httpx

from meshtui.contracts.probe_target import (
    NotRun,
    loopback_addr,
    loopback_host,
    named_loopback,
    route,
    same_addr,
)
from meshtui.contracts.probe_types import (
    LoginResult,
    ProbeOptions,
    ProbeResult,
    ProbeTarget,
    control_password,
    scrub,
)
from meshtui.errors import ProvisionError
from meshtui.kinds.openbao.client import APPROLE_MOUNT, REFUSED_TEXT, SEALED, Bao, BaoError
from meshtui.model import Verdict


def _url_host(address: str) -> str:
    return f"[{address}]" if ":" in address else address


def login(target: ProbeTarget, secret_id: str, options: ProbeOptions) -> LoginResult:
    """One AppRole login with ``secret_id``; never raises, never lets the secret out."""
    host, user = target.host, target.user
    loopback = loopback_host(host)

    def result(
        verdict: Verdict,
        reason: str,
        started: float | None,
        *,
        used_password: bool | None = None,
        client_addr: str | None = None,
    ) -> LoginResult:
        return LoginResult.after(
            verdict,
            reason,
            started,
            loopback=loopback,
            used_password=used_password,
            client_addr=client_addr,
        )

    named = named_loopback(host, allow_loopback=options.allow_loopback)
    if named is not None:
        return result(Verdict.UNKNOWN, named.reason, None)
    if not secret_id or not user:
        return result(Verdict.UNKNOWN, "not run: no role_id or secret_id", None)
    if not target.ca:
        return result(Verdict.UNKNOWN, "not run: no CA to verify OpenBao's certificate", None)
    found = route(host, target.port, allow_loopback=options.allow_loopback)
    loopback = found.loopback
    if isinstance(found, NotRun):
        return result(Verdict.UNKNOWN, found.reason, None)
    address = found.address
    started = time.perf_counter()
    try:
        bao = Bao(
            f"https://{_url_host(address)}:{target.port}", ca=target.ca, timeout=options.timeout
        )
    except ProvisionError as exc:
        return result(Verdict.UNKNOWN, f"not run: {scrub(str(exc), secret_id)}", None)
    with bao:
        try:
            response = bao.send(
                "POST",
                f"auth/{APPROLE_MOUNT}/login",
                {"role_id": user, "secret_id": secret_id},
                secrets=[secret_id],
            )
        except BaoError as exc:  # TLS, connection, timeout: never a verdict about the secret
            return result(Verdict.UNKNOWN, scrub(str(exc), secret_id), started)
        client = _client_addr(response.extensions.get("network_stream"))
        status = response.status_code
        errors = _errors(response, secret_id)
        if status == 400 and REFUSED_TEXT in errors:
            return result(
                Verdict.REFUSED,
                f"AppRole login refused (400 {REFUSED_TEXT})",
                started,
                used_password=True,
                client_addr=client,
            )
        if status == SEALED:
            return result(Verdict.UNKNOWN, "OpenBao is sealed (503): nothing proved", started)
        if status != 200:
            return result(
                Verdict.UNKNOWN,
                f"AppRole login answered {status}, not a refusal: {errors or 'no reason given'}",
                started,
            )
        if not _token(response):
            return result(Verdict.UNKNOWN, "AppRole login answered 200 without a token", started)
    seen_local = client is not None and (
        loopback_addr(ipaddress.ip_address(client)) or client == address
    )
    if seen_local and not loopback:
        return result(
            Verdict.UNKNOWN,
            f"AppRole login accepted from the server's own host (client {client}): "
            "loopback, not a private-network check",
            started,
            used_password=True,
            client_addr=client,
        )
    if options.expect_client_addr is not None and not same_addr(client, options.expect_client_addr):
        return result(
            Verdict.UNKNOWN,
            f"AppRole login accepted, but sent from {client}, not {options.expect_client_addr}",
            started,
            used_password=True,
            client_addr=client,
        )
    source = client or "an unread address"
    return result(
        Verdict.ACCEPTED,
        f"AppRole login accepted over TLS (certificate verified) from {source}",
        started,
        used_password=True,
        client_addr=client,
    )


def _client_addr(stream: object) -> str | None:
    """The local address the login left from (OpenBao does not echo the client's)."""
    get = getattr(stream, "get_extra_info", None)
    if get is None:
        return None
    try:
        found = get("client_addr")
    except OSError:  # the server closed the connection with its answer: nothing to read back
        return None
    if isinstance(found, tuple) and found:
        return str(found[0])
    return None


def _errors(response: httpx.Response, secret_id: str) -> str:
    try:
        body = response.json()
    except ValueError:
        return ""
    found = body.get("errors") if isinstance(body, dict) else None
    if not isinstance(found, list):
        return ""
    return scrub("; ".join(str(e) for e in found), secret_id)


def _token(response: httpx.Response) -> str | None:
    try:
        body = response.json()
    except ValueError:
        return None
    auth = body.get("auth") if isinstance(body, dict) else None
    token = auth.get("client_token") if isinstance(auth, dict) else None
    return str(token) if token else None


def probe(target: ProbeTarget, options: ProbeOptions) -> ProbeResult:
    """Log in with the held secret_id; if accepted, again with a random wrong one."""
    first = login(target, target.password, options)
    if not options.control or first.verdict is not Verdict.ACCEPTED:
        return ProbeResult(first, None)
    return ProbeResult(first, login(target, control_password(target.password), options))
