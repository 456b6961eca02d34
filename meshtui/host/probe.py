"""The live login: does the credential this node holds open the provider's door, and does the door
check passwords at all?

A probe runs inside the consumer node's agent (in the lab, inside the consumer's namespace) and
logs in to the provider's private address with the credential the node holds. It is the only
evidence behind "working", "stale" and "revoked", so it is strict:

* every connect passes ``require_auth=scram-sha-256``: a server that would let us in without a
  password (``trust``, ``peer``, ``ident``, ...) fails client-side, before anything is sent,
  and shows as :attr:`Verdict.NO_PASSWORD`, never :attr:`Verdict.ACCEPTED`;
* an accepted login must have ``pgconn.used_password``; ``inet_client_addr()``,
  ``inet_server_addr()`` and, on PostgreSQL >= 16, ``system_user`` are read back;
* a negative control logs in as the same login with a fresh random wrong password: it must be
  refused, or the server does not check passwords (:attr:`Verdict.NO_PASSWORD`);
* only an authentication refusal ("password authentication failed", SQLSTATE 28P01) is
  :attr:`Verdict.REFUSED`. A refused connection, a timeout, a server that is down or starting,
  an unknown database, too many clients, a missing pg_hba line: all :attr:`Verdict.UNKNOWN`.
  psycopg reports connection errors with ``sqlstate`` None, so they are classified by their
  message text (the lab server runs with ``lc_messages=C``);
* loopback targets (127.0.0.0/8, ::1, 0.0.0.0, ``localhost``, Unix-socket paths) are refused
  unless ``allow_loopback``; then every result says ``loopback`` so nobody mistakes it for the
  private-network check.

The password is given to psycopg as the ``password=`` keyword, never in argv, env, a conninfo
string we build, a reason or a log; error text is scrubbed of it all the same.

This module must not import the controller, the inventory, Textual or Rich.
"""

from __future__ import annotations

import ipaddress
import math
import re
import secrets
import socket
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import psycopg

from meshtui.messages import LoginReport, ProbeReport

SCRAM = "scram-sha-256"
APPLICATION_NAME = "meshtui-probe"
_LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"}
_REASON_MAX = 300

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


class Verdict(StrEnum):
    """What one login (or one probe) showed."""

    ACCEPTED = "accepted"
    REFUSED = "refused"
    UNKNOWN = "unknown"
    NO_PASSWORD = "no password demanded"


@dataclass(frozen=True)
class LoginResult:
    """One login attempt: its verdict, why, how long the connect took, and what it proved."""

    verdict: Verdict
    reason: str
    latency_ms: float
    used_password: bool | None
    client_addr: str | None
    loopback: bool
    system_user: str | None = None

    def to_json(self) -> LoginReport:
        return {
            "verdict": str(self.verdict),
            "reason": self.reason,
            "latency_ms": round(self.latency_ms, 3),
            "used_password": self.used_password,
            "client_addr": self.client_addr,
            "loopback": self.loopback,
            "system_user": self.system_user,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LoginResult:
        return cls(
            verdict=Verdict(data["verdict"]),
            reason=str(data["reason"]),
            latency_ms=float(data["latency_ms"]),
            used_password=data.get("used_password"),
            client_addr=data.get("client_addr"),
            loopback=bool(data.get("loopback", False)),
            system_user=data.get("system_user"),
        )


@dataclass(frozen=True)
class ProbeResult:
    """A login with the held credential and, unless skipped, its negative control."""

    login: LoginResult
    control: LoginResult | None

    def verdict(self) -> Verdict:
        """ACCEPTED only if the login was accepted and the control refused (when one ran).

        A control that got in means the server does not check passwords: NO_PASSWORD, which
        also overrides a refusal (a server that lets anyone in cannot prove a revocation).
        An accepted login whose control could not be judged is UNKNOWN.
        """
        login, control = self.login, self.control
        if login.verdict is Verdict.NO_PASSWORD:
            return Verdict.NO_PASSWORD
        if control is not None and control.verdict in (Verdict.ACCEPTED, Verdict.NO_PASSWORD):
            return Verdict.NO_PASSWORD
        if login.verdict is Verdict.ACCEPTED:
            if control is None or control.verdict is Verdict.REFUSED:
                return Verdict.ACCEPTED
            return Verdict.UNKNOWN
        return login.verdict  # REFUSED or UNKNOWN

    def reason(self) -> str:
        """One line saying why the probe has its verdict."""
        login, control = self.login, self.control
        verdict = self.verdict()
        if control is not None and control.verdict is Verdict.ACCEPTED:
            why = "a random wrong password was accepted: the server does not check passwords"
        elif control is not None and control.verdict is Verdict.NO_PASSWORD:
            why = f"negative control: {control.reason}"
        elif verdict is Verdict.UNKNOWN and login.verdict is Verdict.ACCEPTED and control:
            why = f"{login.reason}; but the negative control was not judged: {control.reason}"
        elif verdict is Verdict.ACCEPTED and control is not None:
            why = f"{login.reason}; a random wrong password was refused"
        else:
            why = login.reason
        if login.loopback and "loopback" not in why:
            why = f"loopback: {why}"
        return why

    @property
    def loopback(self) -> bool:
        return self.login.loopback

    def to_json(self) -> ProbeReport:
        return {
            "verdict": str(self.verdict()),
            "reason": self.reason(),
            "loopback": self.loopback,
            "login": self.login.to_json(),
            "control": self.control.to_json() if self.control is not None else None,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProbeResult:
        control = data.get("control")
        return cls(
            login=LoginResult.from_json(data["login"]),
            control=LoginResult.from_json(control) if control is not None else None,
        )


@dataclass(frozen=True)
class ProbeTarget:
    """Where and as whom one probe logs in. The password never shows in its repr."""

    host: str
    port: int
    user: str
    password: str = field(repr=False)
    dbname: str
    kind: str = "postgres"  # "redis": meshtui.host.probe_redis logs in
    ca: str | None = None  # Redis: the CA that signed the server's certificate
    tls: bool = True


# --------------------------------------------------------------------------- targets


def _loopback_host(host: str) -> bool:
    """Whether ``host`` (as libpq would read it) means this machine rather than the network."""
    h = host.strip()
    if not h or h.startswith(("/", "@")):  # default socket, path, abstract socket
        return True
    if h.lower().rstrip(".") in _LOOPBACK_NAMES or h.lower().rstrip(".").endswith(".localhost"):
        return True
    try:
        addr = ipaddress.ip_address(h.strip("[]"))
    except ValueError:
        return False
    return _loopback_addr(addr)


def _loopback_addr(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return addr.is_loopback or addr.is_unspecified


def _own_address(addr: str) -> bool:
    """Whether ``addr`` is configured on this host (network namespace): can we bind to it?

    Binding sends nothing. Where non-local binds are allowed the answer would be meaningless,
    so it is "no" there, and the check after login (client address == server address) decides.
    """
    ip = ipaddress.ip_address(addr)
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    try:
        with open(f"/proc/sys/net/ipv{ip.version}/ip_nonlocal_bind") as fh:
            if fh.read().strip() != "0":
                return False
    except OSError:
        pass
    if ip.version == 6 and ip.is_link_local:
        return False  # needs a scope id; never a provider address
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.bind((addr, 0))
    except OSError:
        return False
    return True


def _resolve(host: str, port: int) -> list[str]:
    """The addresses ``host`` names: itself if it is an address, else what the resolver says."""
    try:
        return [str(ipaddress.ip_address(host.strip("[]")))]
    except ValueError:
        pass
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def _same_addr(a: str | None, b: str) -> bool:
    if a is None:
        return False
    try:
        return ipaddress.ip_address(a) == ipaddress.ip_address(b)
    except ValueError:
        return a == b


# --------------------------------------------------------------------------- text


def _scrub(text: str, password: str) -> str:
    """Error text fit for a reason: without the password, on one line, not too long."""
    if password:
        text = text.replace(password, "***")
    text = " ".join(text.split())
    text = _HINT.sub("", _PREFIX.sub("", text))
    return text if len(text) <= _REASON_MAX else text[: _REASON_MAX - 1] + "…"


def _classify(message: str) -> tuple[Verdict, str]:
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
    for needle, what in (
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
    ):
        if needle in lowered:
            return Verdict.UNKNOWN, f"{what}: {message}"
    return Verdict.UNKNOWN, f"login failed, not an authentication refusal: {message}"


# --------------------------------------------------------------------------- login


def _result(
    verdict: Verdict,
    reason: str,
    started: float | None,
    *,
    loopback: bool,
    used_password: bool | None = None,
    client_addr: str | None = None,
    system_user: str | None = None,
) -> LoginResult:
    latency = (time.perf_counter() - started) * 1000.0 if started is not None else 0.0
    if loopback and "loopback" not in reason:
        reason = f"loopback: {reason}"
    return LoginResult(verdict, reason, latency, used_password, client_addr, loopback, system_user)


def login(
    host: str,
    port: int,
    user: str,
    password: str,
    dbname: str,
    *,
    timeout: float = 5.0,
    allow_loopback: bool = False,
    expect_client_addr: str | None = None,
) -> LoginResult:
    """Log in once with ``password``; never raises, never lets the password out.

    ``timeout`` bounds the connect (libpq's ``connect_timeout``: whole seconds, at least 2).
    ``expect_client_addr``, when given, is the address this node must be seen from; a login
    seen from elsewhere is UNKNOWN (it did not cross the private network as this node).
    """
    loopback = _loopback_host(host)
    if "," in host:
        return _result(Verdict.UNKNOWN, "a probe targets exactly one host", None, loopback=loopback)
    if loopback and not allow_loopback:
        return _result(
            Verdict.UNKNOWN,
            f"not run: {host!r} is a loopback target, not the provider's private address "
            "(allow_loopback to test locally)",
            None,
            loopback=True,
        )
    if not password:
        return _result(Verdict.UNKNOWN, "not run: the password is empty", None, loopback=loopback)
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        return _result(Verdict.UNKNOWN, f"not run: bad port {port!r}", None, loopback=loopback)
    if not user or not dbname or "\x00" in user + dbname + password:
        return _result(
            Verdict.UNKNOWN, "not run: bad user or database name", None, loopback=loopback
        )

    params: dict[str, Any] = {
        "host": host,
        "port": port,
        "user": user,
        "dbname": dbname,
        "connect_timeout": max(2, math.ceil(timeout)),
        "require_auth": SCRAM,
        "application_name": APPLICATION_NAME,
        "gssencmode": "disable",
        "sslmode": "prefer",
        "options": f"-c statement_timeout={max(1, int(timeout * 1000))}",
    }
    if not host.startswith(("/", "@")):
        try:
            addresses = _resolve(host, port)
        except OSError as exc:
            return _result(
                Verdict.UNKNOWN,
                f"host name not resolved: {_scrub(str(exc), password)}",
                None,
                loopback=loopback,
            )
        if not addresses:
            return _result(Verdict.UNKNOWN, "host name not resolved", None, loopback=loopback)
        if any(_loopback_addr(ipaddress.ip_address(a)) for a in addresses):
            loopback = True
            if not allow_loopback:
                return _result(
                    Verdict.UNKNOWN,
                    f"not run: {host!r} resolves to a loopback address (allow_loopback to "
                    "test locally)",
                    None,
                    loopback=True,
                )
        elif _own_address(addresses[0]):
            loopback = True
            if not allow_loopback:
                return _result(
                    Verdict.UNKNOWN,
                    f"not run: {addresses[0]} is an address of this host itself, so the login "
                    "would not cross the network: loopback (allow_loopback to test locally)",
                    None,
                    loopback=True,
                )
        params["hostaddr"] = addresses[0]  # connect where we checked, not where PGHOSTADDR says

    started = time.perf_counter()
    try:
        conn = psycopg.connect(autocommit=True, password=password, **params)
    except psycopg.Error as exc:
        message = _scrub(str(exc), password)
        used = bool(exc.pgconn.used_password) if exc.pgconn is not None else None
        verdict, reason = _classify(message)
        return _result(verdict, reason, started, loopback=loopback, used_password=used)
    except Exception as exc:  # never let anything (and its text) escape unscrubbed
        message = _scrub(f"{type(exc).__name__}: {exc}", password)
        return _result(Verdict.UNKNOWN, f"probe error: {message}", started, loopback=loopback)

    latency_ms = (time.perf_counter() - started) * 1000.0
    try:
        return _inspect(conn, latency_ms, loopback, allow_loopback, expect_client_addr, password)
    except Exception as exc:
        message = _scrub(f"{type(exc).__name__}: {exc}", password)
        reason = f"logged in, then could not judge the session: {message}"
        if loopback:
            reason = f"loopback: {reason}"
        used = bool(conn.pgconn.used_password)
        return LoginResult(Verdict.UNKNOWN, reason, latency_ms, used, None, loopback)
    finally:
        conn.close()


def _inspect(
    conn: psycopg.Connection[Any],
    latency_ms: float,
    loopback: bool,
    allow_loopback: bool,
    expect_client_addr: str | None,
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
        note = f"; could not read the client address: {_scrub(str(exc), password)}"

    def done(verdict: Verdict, reason: str, *, lb: bool = loopback) -> LoginResult:
        if lb and "loopback" not in reason:
            reason = f"loopback: {reason}"
        return LoginResult(verdict, reason, latency_ms, used, client, lb, sysuser)

    if not used:
        return done(Verdict.NO_PASSWORD, "logged in but no password was used")
    if sysuser is not None and not sysuser.startswith(SCRAM + ":"):
        return done(Verdict.NO_PASSWORD, f"logged in, but system_user is {sysuser!r}")
    seen_local = client is None or server is None or client == server
    if client is not None:
        seen_local = seen_local or _loopback_addr(ipaddress.ip_address(client))
    if seen_local and not loopback and not note:
        # The connection never left the server's host (a Unix socket, 127.x, or its own
        # address): it proves nothing about the private network.
        if not allow_loopback:
            return done(
                Verdict.UNKNOWN,
                f"logged in from the server's own host (client {client}, server {server}): "
                "loopback, not a private-network check",
                lb=True,
            )
        where = client if client is not None else "a Unix socket"
        return done(Verdict.ACCEPTED, f"logged in with SCRAM from {where} (loopback)", lb=True)
    if expect_client_addr is not None and not _same_addr(client, expect_client_addr):
        return done(
            Verdict.UNKNOWN,
            f"logged in, but seen from {client}, not {expect_client_addr}" + note,
        )
    return done(Verdict.ACCEPTED, f"logged in with SCRAM from {client}" + note)


# --------------------------------------------------------------------------- probes


def _control_password(password: str) -> str:
    while True:
        wrong = secrets.token_urlsafe(32)
        if wrong != password:
            return wrong


def probe(
    host: str,
    port: int,
    user: str,
    password: str,
    dbname: str,
    *,
    timeout: float = 5.0,
    allow_loopback: bool = False,
    control: bool = True,
    expect_client_addr: str | None = None,
) -> ProbeResult:
    """Log in with the held credential; if it got in, log in again with a random wrong one.

    The negative control runs only after an accepted login (there is nothing to contrast
    otherwise) and unless ``control`` is False; ``ProbeResult.control`` is None when it did
    not run. It doubles the logins of a healthy probe.
    """
    first = login(
        host,
        port,
        user,
        password,
        dbname,
        timeout=timeout,
        allow_loopback=allow_loopback,
        expect_client_addr=expect_client_addr,
    )
    if not control or first.verdict is not Verdict.ACCEPTED:
        return ProbeResult(first, None)
    second = login(
        host,
        port,
        user,
        _control_password(password),
        dbname,
        timeout=timeout,
        allow_loopback=allow_loopback,
        expect_client_addr=expect_client_addr,
    )
    return ProbeResult(first, second)


def probe_target(
    t: ProbeTarget,
    *,
    timeout: float = 5.0,
    allow_loopback: bool = False,
    control: bool = True,
    expect_client_addr: str | None = None,
) -> ProbeResult:
    """Probe one target with the probe of its provider's kind (PostgreSQL or Redis)."""
    if t.kind == "redis":
        from meshtui.host import probe_redis  # it builds on this module

        return probe_redis.probe(
            t.host,
            t.port,
            t.user,
            t.password,
            ca=t.ca,
            tls=t.tls,
            timeout=timeout,
            allow_loopback=allow_loopback,
            control=control,
            expect_client_addr=expect_client_addr,
        )
    if t.kind != "postgres":
        unknown = LoginResult(
            Verdict.UNKNOWN, f"not run: unknown provider kind {t.kind!r}", 0.0, None, None, False
        )
        return ProbeResult(unknown, None)
    return probe(
        t.host,
        t.port,
        t.user,
        t.password,
        t.dbname,
        timeout=timeout,
        allow_loopback=allow_loopback,
        control=control,
        expect_client_addr=expect_client_addr,
    )


def probe_many(
    targets: Sequence[ProbeTarget],
    *,
    concurrency: int = 8,
    timeout: float = 5.0,
    allow_loopback: bool = False,
    control: bool = True,
    expect_client_addr: str | None = None,
) -> list[ProbeResult]:
    """Probe every target, at most ``concurrency`` at a time (threads); results in order.

    Threads, not asyncio: libpq computes SCRAM's PBKDF2 while holding no Python lock, so
    threads overlap it with the network and the server; an event loop would serialize it.
    """
    if concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    if not targets:
        return []

    def one(t: ProbeTarget) -> ProbeResult:
        return probe_target(
            t,
            timeout=timeout,
            allow_loopback=allow_loopback,
            control=control,
            expect_client_addr=expect_client_addr,
        )

    with ThreadPoolExecutor(
        max_workers=min(concurrency, len(targets)), thread_name_prefix="probe"
    ) as pool:
        return list(pool.map(one, targets))
