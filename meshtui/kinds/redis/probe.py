"""The live login to a Redis: ``AUTH <login> <password>`` from the consumer's node, over TLS.

Same evidence and verdicts as the PostgreSQL probe (:mod:`meshtui.host.probe_runner`), Redis-shaped:

* the connection is TLS and verifies the server's certificate against the CA the declaration
  names, host name (the private address) included; ``tls = false`` is allowed but said in every
  reason, since AUTH then carries the password readable on the wire;
* on the fresh connection a ``PING`` goes first: it must come back ``NOAUTH``. A server where
  ``default`` needs no password lets anyone in, so nothing it says can prove a revocation: the
  result is :attr:`Verdict.UNKNOWN`, never accepted or refused;
* only ``WRONGPASS`` is :attr:`Verdict.REFUSED`; a refused connection, a timeout, a certificate
  that does not verify, any other error: :attr:`Verdict.UNKNOWN`;
* after an accepted AUTH, ``CLIENT INFO`` tells where the server saw us from (as PostgreSQL's
  ``inet_client_addr()``); the negative control is an AUTH with a random wrong password, which
  must come back ``WRONGPASS``.

PING, AUTH and CLIENT INFO go in one write (one round trip after the TLS handshake). The
password is only ever an argument of AUTH (which Redis keeps out of MONITOR and SLOWLOG); it is
scrubbed from any error text all the same. Uses redis-py's connection classes, not its client;
the two redis-py internals it needs (its own TLS context, reading on after NOAUTH) live in
:mod:`meshtui.kinds.redis.private`.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import ssl
import time
from typing import Any

import redis
from redis.connection import Connection

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
from meshtui.freeform import LibraryKwargs
from meshtui.kinds.redis.private import (
    ContextTLSConnection,
    NoAuth,
    ReadOnParser,
    WrongPass,
    local_address,
    tls_context,
)
from meshtui.model import Verdict

_NO_LIB_INFO: LibraryKwargs = (
    {"driver_info": None}
    if importlib.util.find_spec("redis.driver_info") is not None
    else {"lib_name": None, "lib_version": None}  # redis-py before 7
)
"""No CLIENT SETINFO on connect: the probe's first word to the server is its own PING."""


def _result(
    verdict: Verdict,
    reason: str,
    started: float | None,
    *,
    loopback: bool,
    used_password: bool | None = None,
    client_addr: str | None = None,
) -> LoginResult:
    latency = (time.perf_counter() - started) * 1000.0 if started is not None else 0.0
    if loopback and "loopback" not in reason:
        reason = f"loopback: {reason}"
    return LoginResult(verdict, reason, latency, used_password, client_addr, loopback, None)


def _addr(field: str) -> str | None:
    """The address of ``ip:port`` (``[v6]:port`` too) from CLIENT INFO."""
    host = field.rpartition(":")[0].strip("[]")
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return None


def _client_info(text: str) -> tuple[str | None, str | None]:
    """(client address, server address) from a CLIENT INFO line."""
    fields = dict(p.split("=", 1) for p in text.split() if "=" in p)
    return _addr(fields.get("addr", "")), _addr(fields.get("laddr", ""))


def _error_reason(exc: BaseException, password: str) -> str:
    return scrub(f"{type(exc).__name__}: {exc}", password)


def login(
    host: str,
    port: int,
    user: str,
    password: str,
    *,
    ca: str | None,
    tls: bool = True,
    timeout: float = 5.0,
    allow_loopback: bool = False,
    expect_client_addr: str | None = None,
) -> LoginResult:
    """One AUTH with ``password`` on a fresh connection; never raises, never lets it out."""
    loopback = loopback_host(host)
    named = named_loopback(host, allow_loopback=allow_loopback)
    if named is not None:
        return _result(Verdict.UNKNOWN, named.reason, None, loopback=named.loopback)
    if not password or not user or any(c in user + password for c in "\x00\r\n"):
        return _result(Verdict.UNKNOWN, "not run: bad login or password", None, loopback=loopback)
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        return _result(Verdict.UNKNOWN, f"not run: bad port {port!r}", None, loopback=loopback)
    if tls and not ca:
        return _result(
            Verdict.UNKNOWN,
            "not run: no CA to verify the server's certificate (declare ca, or tls = false)",
            None,
            loopback=loopback,
        )
    found = route(host, port, allow_loopback=allow_loopback)
    if isinstance(found, NotRun):
        return _result(Verdict.UNKNOWN, found.reason, None, loopback=found.loopback)
    loopback = found.loopback
    common: LibraryKwargs = {
        "host": found.address,
        "port": port,
        "socket_timeout": timeout,
        "socket_connect_timeout": timeout,
        "protocol": 2,
        "decode_responses": True,
        "parser_class": ReadOnParser,
        **_NO_LIB_INFO,
    }
    # redis-py's connection classes are untyped: hold them as Any
    conn: Any
    if tls:
        assert ca is not None
        try:
            context = tls_context(ca)
        except (OSError, ssl.SSLError) as exc:
            return _result(
                Verdict.UNKNOWN,
                f"not run: the CA file {ca} cannot be used: {exc}",
                None,
                loopback=loopback,
            )
        tls_class: Any = ContextTLSConnection
        conn = tls_class(context=context, **common)
    else:
        plain_class: Any = Connection
        conn = plain_class(**common)
    plain = "" if tls else "; plain text: the password crossed the network readable"
    started = time.perf_counter()
    try:
        conn.connect()
        here = local_address(conn)
        conn.send_packed_command(
            conn.pack_commands([("PING",), ("AUTH", user, password), ("CLIENT", "INFO")])
        )
        replies: list[Any] = []
        for _ in range(3):
            try:
                replies.append(conn.read_response())
            except redis.ResponseError as exc:
                replies.append(exc)
    except Exception as exc:  # connection, TLS, timeout: never a verdict about the password
        return _result(
            Verdict.UNKNOWN, _error_reason(exc, password) + plain, started, loopback=loopback
        )
    finally:
        conn.disconnect()
    ping, auth, info = replies
    if not isinstance(ping, NoAuth):
        return _result(
            Verdict.UNKNOWN,
            "the server answered before any AUTH (its default user needs no password): anyone "
            "gets in, so no login can prove a revocation" + plain,
            started,
            loopback=loopback,
            used_password=False,
        )
    if isinstance(auth, WrongPass):
        return _result(
            Verdict.REFUSED,
            "AUTH refused (WRONGPASS)" + plain,
            started,
            loopback=loopback,
            used_password=True,
        )
    if isinstance(auth, Exception) or str(auth) != "OK":
        return _result(
            Verdict.UNKNOWN,
            f"AUTH failed, not a WRONGPASS: {_error_reason(auth, password)}" + plain
            if isinstance(auth, Exception)
            else f"AUTH answered {str(auth)[:40]!r}" + plain,
            started,
            loopback=loopback,
        )
    client, server = (None, None) if isinstance(info, Exception) else _client_info(str(info))
    note = ""
    if isinstance(info, redis.exceptions.NoPermissionError) and here is not None:
        # a login restricted as asked (no @connection): the address is this end's own
        client, note = here, " (this end's address: the login may not run CLIENT INFO)"
    elif isinstance(info, Exception):
        note = f"; could not read CLIENT INFO: {_error_reason(info, password)}"
    seen_local = client is not None and (
        client == server or loopback_addr(ipaddress.ip_address(client))
    )
    if seen_local and not loopback:
        return _result(
            Verdict.UNKNOWN,
            f"AUTH accepted from the server's own host (client {client}): loopback, not a "
            "private-network check",
            started,
            loopback=True,
            used_password=True,
            client_addr=client,
        )
    if expect_client_addr is not None and not same_addr(client, expect_client_addr):
        return _result(
            Verdict.UNKNOWN,
            f"AUTH accepted, but seen from {client}, not {expect_client_addr}{note}",
            started,
            loopback=loopback,
            used_password=True,
            client_addr=client,
        )
    where = "TLS (certificate verified)" if tls else "plain text"
    return _result(
        Verdict.ACCEPTED,
        f"AUTH accepted over {where} from {client or 'an unread address'}{note}"
        + ("" if tls else "; the password crossed the network readable"),
        started,
        loopback=loopback,
        used_password=True,
        client_addr=client,
    )


def probe(
    host: str,
    port: int,
    user: str,
    password: str,
    *,
    ca: str | None,
    tls: bool = True,
    timeout: float = 5.0,
    allow_loopback: bool = False,
    control: bool = True,
    expect_client_addr: str | None = None,
) -> ProbeResult:
    """AUTH with the held credential; if accepted, again with a random wrong one (the control)."""
    kwargs: LibraryKwargs = {
        "ca": ca,
        "tls": tls,
        "timeout": timeout,
        "allow_loopback": allow_loopback,
        "expect_client_addr": expect_client_addr,
    }
    first = login(host, port, user, password, **kwargs)
    if not control or first.verdict is not Verdict.ACCEPTED:
        return ProbeResult(first, None)
    second = login(host, port, user, control_password(password), **kwargs)
    return ProbeResult(first, second)


def probe_target(target: ProbeTarget, options: ProbeOptions) -> ProbeResult:
    """The kind's probe, with the one signature every kind's probe has (see meshtui.kinds.kind)."""
    return probe(
        target.host,
        target.port,
        target.user,
        target.password,
        ca=target.ca,
        tls=target.tls,
        timeout=options.timeout,
        allow_loopback=options.allow_loopback,
        control=options.control,
        expect_client_addr=options.expect_client_addr,
    )
