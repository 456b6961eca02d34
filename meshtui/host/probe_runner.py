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

Here: a probe of any kind, dispatched through meshtui.kinds.registry, and many at once. The
shapes are in probe_types.py, the loopback rules in probe_address.py, each kind's login in its
package (meshtui/kinds/postgres/probe.py, meshtui/kinds/redis/probe.py). None of them imports the
controller, the inventory, Textual or Rich.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from meshtui.contracts.probe_types import (
    KindProbe,
    LoginResult,
    ProbeOptions,
    ProbeResult,
    ProbeTarget,
)
from meshtui.errors import UnknownKindError
from meshtui.kinds import registry
from meshtui.model import Verdict

__all__ = [
    "LoginResult",
    "ProbeOptions",
    "ProbeResult",
    "ProbeTarget",
    "Verdict",
    "login",
    "not_run",
    "probe",
    "probe_many",
    "probe_one",
    "probe_target",
]


def probe_one(target: ProbeTarget, options: ProbeOptions) -> ProbeResult:
    """Probe one target with the probe of its provider's kind (meshtui.kinds.registry).

    A kind this agent does not know is not run: UNKNOWN, never refused.
    """
    try:
        kind = registry.kind_of(target.kind)
    except UnknownKindError:
        return not_run(f"not run: unknown provider kind {target.kind!r}")
    run: KindProbe = kind.probe.load()
    return run(target, options)


def not_run(why: str) -> ProbeResult:
    """The result of a probe that was not sent (``why`` says so): unknown, never refused."""
    return ProbeResult(LoginResult(Verdict.UNKNOWN, why, 0.0, None, None, False), None)


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
    """One login to the default kind (PostgreSQL) from loose values, without the control."""
    return probe_one(
        ProbeTarget(host, port, user, password, dbname),
        ProbeOptions(timeout, allow_loopback, False, expect_client_addr),
    ).login


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
    """:func:`probe_one` of the default kind (PostgreSQL) from loose values."""
    return probe_one(
        ProbeTarget(host, port, user, password, dbname),
        ProbeOptions(timeout, allow_loopback, control, expect_client_addr),
    )


def probe_target(
    t: ProbeTarget,
    *,
    timeout: float = 5.0,
    allow_loopback: bool = False,
    control: bool = True,
    expect_client_addr: str | None = None,
) -> ProbeResult:
    """:func:`probe_one` with the options as keywords."""
    return probe_one(t, ProbeOptions(timeout, allow_loopback, control, expect_client_addr))


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
    options = ProbeOptions(timeout, allow_loopback, control, expect_client_addr)
    with ThreadPoolExecutor(
        max_workers=min(concurrency, len(targets)), thread_name_prefix="probe"
    ) as pool:
        return list(pool.map(lambda t: probe_one(t, options), targets))
