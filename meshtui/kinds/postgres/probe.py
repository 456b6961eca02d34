"""One PostgreSQL login for a probe: connect with SCRAM demanded, then judge the session; and
:func:`probe`, the kind's probe (the login, then its negative control).

The rules (why each outcome has its verdict) are in meshtui/host/probe_runner.py's docstring. The
password goes to psycopg as the ``password=`` keyword only, and every error text is scrubbed.
"""

from __future__ import annotations

import ipaddress
import math
import re
import time
from dataclasses import dataclass, replace
from typing import Any

import psycopg

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
    mark_loopback,
    scrub,
)
from meshtui.freeform import LibraryKwargs
from meshtui.model import Verdict

SCRAM = "scram-sha-256"
APPLICATION_NAME = "meshtui-probe"

# Message texts (libpq / server with lc_messages=C) and what they mean.
_AUTH_FAILED = re.compile(r"FATAL:\s+password authentication failed for user ")
_NO_PASSWORD = re.compile(
    r'authentication method requirement "scram-sha-256" failed: '
    r"server did not complete authentication"
)
_OTHER_METHOD = re.compile(
    r'authentication method requirement "scram-sha-256" failed: server requested ([^\n]+)'
)
_PREFIX = re.compile(
    r'^(?:connection failed: |connection is bad: |connection to server (?:at "[^"]*", port \d+|'
    r'on socket "[^"]*") failed: )+'
)
_HINT = re.compile(r" Is the server running (?:on that host|locally) and accepting [^?]*\?")
_NEEDLES = (
    ("timeout expired", "timed out"),
    ("connection refused", "connection refused (server down or not listening)"),
    ("no route to host", "no route to host"),
    ("network is unreachable", "network unreachable"),
    ("too many clients", "too many connections"),
    ("too many connections", "too many connections"),
    ("no such file or directory", "no server on that socket"),
    ("does not exist", "server error"),
    ("no pg_hba.conf entry", "the server has no pg_hba line for us (password not checked)"),
    ("the database system is", "server not ready"),
    ("could not translate host name", "host name not resolved"),
)
"""Connection failures psycopg reports with no SQLSTATE, told by their text: all UNKNOWN."""


def scrub_libpq(text: str, password: str) -> str:
    """libpq's error text fit for a reason: scrubbed, without its "connection to..." prefix."""
    return scrub(text, password, (_PREFIX, _HINT))


def classify(message: str) -> tuple[Verdict, str]:
    """Verdict and reason for a failed connect, from libpq's message text."""
    if _AUTH_FAILED.search(message):
        return Verdict.REFUSED, "password authentication failed (28P01)"
    if _NO_PASSWORD.search(message):
        return (
            Verdict.NO_PASSWORD,
            "the server did not demand a password (it would let us in without one): " + message,
        )
    other = _OTHER_METHOD.search(message)
    if other:
        return (
            Verdict.UNKNOWN,
            f"the server asked for {other.group(1)}, not scram-sha-256; nothing was sent",
        )
    lowered = message.lower()
    for needle, what in _NEEDLES:
        if needle in lowered:
            return Verdict.UNKNOWN, f"{what}: {message}"
    return Verdict.UNKNOWN, f"login failed, not an authentication refusal: {message}"


@dataclass(frozen=True)
class _Route:
    """Where the login will connect: the checked address (None: a socket) and whether loopback."""

    hostaddr: str | None
    loopback: bool


def _not_run(reason: str, loopback: bool) -> LoginResult:
    return LoginResult.after(Verdict.UNKNOWN, reason, None, loopback=loopback)


def _check_target(t: ProbeTarget, options: ProbeOptions) -> LoginResult | None:
    """A not-run result when the target is unusable as given, else None."""
    loopback = loopback_host(t.host)
    if "," in t.host:
        return _not_run("a probe targets exactly one host", loopback)
    named = named_loopback(t.host, allow_loopback=options.allow_loopback)
    if named is not None:
        return _not_run(named.reason, named.loopback)
    if not t.password:
        return _not_run("not run: the password is empty", loopback)
    if isinstance(t.port, bool) or not isinstance(t.port, int) or not 0 < t.port < 65536:
        return _not_run(f"not run: bad port {t.port!r}", loopback)
    if not t.user or not t.dbname or "\x00" in t.user + t.dbname + t.password:
        return _not_run("not run: bad user or database name", loopback)
    return None


def _route(t: ProbeTarget, options: ProbeOptions) -> _Route | LoginResult:
    """Resolve the host once and refuse a loopback or own address unless allowed; a socket
    path is libpq's own (no address to check)."""
    if t.host.startswith(("/", "@")):
        return _Route(None, loopback_host(t.host))
    found = route(t.host, t.port, allow_loopback=options.allow_loopback)
    if isinstance(found, NotRun):
        return _not_run(found.reason, found.loopback)
    return _Route(found.address, found.loopback)


def _params(t: ProbeTarget, options: ProbeOptions, route: _Route) -> LibraryKwargs:
    """psycopg's connect keywords, the password aside."""
    params: LibraryKwargs = {
        "host": t.host,
        "port": t.port,
        "user": t.user,
        "dbname": t.dbname,
        "connect_timeout": max(2, math.ceil(options.timeout)),
        "require_auth": SCRAM,
        "application_name": APPLICATION_NAME,
        "gssencmode": "disable",
        "sslmode": "prefer",
        "options": f"-c statement_timeout={max(1, int(options.timeout * 1000))}",
    }
    if route.hostaddr is not None:
        params["hostaddr"] = route.hostaddr  # connect where we checked, not where PGHOSTADDR says
    return params


def login(target: ProbeTarget, options: ProbeOptions) -> LoginResult:
    """Log in once with the target's password; never raises, never lets the password out.

    ``options.timeout`` bounds the connect (libpq's ``connect_timeout``: whole seconds, at least
    2). A login seen from elsewhere than ``options.expect_client_addr`` (when given) is UNKNOWN.
    """
    refused = _check_target(target, options)
    if refused is not None:
        return refused
    route = _route(target, options)
    if isinstance(route, LoginResult):
        return route
    password = target.password
    started = time.perf_counter()
    try:
        conn = psycopg.connect(
            autocommit=True, password=password, **_params(target, options, route)
        )
    except psycopg.Error as exc:
        used = bool(exc.pgconn.used_password) if exc.pgconn is not None else None
        verdict, reason = classify(scrub_libpq(str(exc), password))
        return LoginResult.after(
            verdict, reason, started, loopback=route.loopback, used_password=used
        )
    except Exception as exc:  # never let anything (and its text) escape unscrubbed
        message = scrub_libpq(f"{type(exc).__name__}: {exc}", password)
        return LoginResult.after(
            Verdict.UNKNOWN, f"probe error: {message}", started, loopback=route.loopback
        )

    latency_ms = (time.perf_counter() - started) * 1000.0
    try:
        return _judge(conn, latency_ms, route.loopback, options, password)
    except Exception as exc:
        message = scrub_libpq(f"{type(exc).__name__}: {exc}", password)
        reason = mark_loopback(
            f"logged in, then could not judge the session: {message}", route.loopback
        )
        used = bool(conn.pgconn.used_password)
        return LoginResult(Verdict.UNKNOWN, reason, latency_ms, used, None, route.loopback)
    finally:
        conn.close()


def _judge(
    conn: psycopg.Connection[Any],
    latency_ms: float,
    loopback: bool,
    options: ProbeOptions,
    password: str,
) -> LoginResult:
    """Judge an open connection: was a password demanded, and where were we seen from?"""
    used = bool(conn.pgconn.used_password)
    client: str | None = None
    server: str | None = None
    sysuser: str | None = None
    note = ""
    try:
        if conn.info.server_version >= 160000:
            row = conn.execute(
                "SELECT host(inet_client_addr()), host(inet_server_addr()), system_user"
            ).fetchone()
        else:
            row = conn.execute(
                "SELECT host(inet_client_addr()), host(inet_server_addr()), NULL::text"
            ).fetchone()
        if row is not None:
            client, server, sysuser = row
    except psycopg.Error as exc:
        note = f"; could not read the client address: {scrub_libpq(str(exc), password)}"

    def done(verdict: Verdict, reason: str, *, lb: bool = loopback) -> LoginResult:
        return LoginResult(
            verdict, mark_loopback(reason, lb), latency_ms, used, client, lb, sysuser
        )

    if not used:
        return done(Verdict.NO_PASSWORD, "logged in but no password was used")
    if sysuser is not None and not sysuser.startswith(SCRAM + ":"):
        return done(Verdict.NO_PASSWORD, f"logged in, but system_user is {sysuser!r}")
    seen_local = client is None or server is None or client == server
    if client is not None:
        seen_local = seen_local or loopback_addr(ipaddress.ip_address(client))
    if seen_local and not loopback and not note:
        # The connection never left the server's host (a Unix socket, 127.x, or its own
        # address): it proves nothing about the private network.
        if not options.allow_loopback:
            return done(
                Verdict.UNKNOWN,
                f"logged in from the server's own host (client {client}, server {server}): "
                "loopback, not a private-network check",
                lb=True,
            )
        where = client if client is not None else "a Unix socket"
        return done(Verdict.ACCEPTED, f"logged in with SCRAM from {where} (loopback)", lb=True)
    expect = options.expect_client_addr
    if expect is not None and not same_addr(client, expect):
        return done(Verdict.UNKNOWN, f"logged in, but seen from {client}, not {expect}" + note)
    return done(Verdict.ACCEPTED, f"logged in with SCRAM from {client}" + note)


def probe(target: ProbeTarget, options: ProbeOptions) -> ProbeResult:
    """Log in with the held credential; if it got in, again with a wrong one (the kind's probe).

    The negative control runs only after an accepted login (there is nothing to contrast
    otherwise) and unless ``options.control`` is False; ``ProbeResult.control`` is None when it
    did not run. It doubles the logins of a healthy probe.
    """
    first = login(target, options)
    if not options.control or first.verdict is not Verdict.ACCEPTED:
        return ProbeResult(first, None)
    wrong = replace(target, password=control_password(target.password))
    return ProbeResult(first, login(wrong, options))
