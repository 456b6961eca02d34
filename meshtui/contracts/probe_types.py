"""The shapes of a probe: what it logs in to (:class:`ProbeTarget`), how (:class:`ProbeOptions`),
and what it found (:class:`LoginResult`, :class:`ProbeResult`), with the reason text rules every
kind of probe shares (the ``loopback:`` mark, scrubbing the password out of error text).

The contract of every kind's probe (``Kind.probe``, :data:`KindProbe`); no I/O here.
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from meshtui.kinds.kind import DEFAULT_KIND
from meshtui.model import Verdict
from meshtui.protocol.messages import LoginReport, ProbeReport

REASON_MAX = 300
"""A reason is one line of at most this many characters."""


@dataclass(frozen=True)
class ProbeTarget:
    """Where and as whom one probe logs in. The password never shows in its repr."""

    host: str
    port: int
    user: str
    password: str = field(repr=False)
    dbname: str
    kind: str = DEFAULT_KIND  # which kind's probe logs in (meshtui.kinds.registry)
    ca: str | None = None  # Redis: the CA that signed the server's certificate
    tls: bool = True


@dataclass(frozen=True)
class ProbeOptions:
    """How a probe runs, the same for every target of one round.

    ``timeout`` bounds each connect; ``allow_loopback`` lets a loopback target run (its results
    say ``loopback``); ``control`` adds the negative control after an accepted login;
    ``expect_client_addr`` is the address this node must be seen from.
    """

    timeout: float = 5.0
    allow_loopback: bool = False
    control: bool = True
    expect_client_addr: str | None = None


def control_password(password: str) -> str:
    """A fresh random password that is not ``password``: the negative control's."""
    while True:
        wrong = secrets.token_urlsafe(32)
        if wrong != password:
            return wrong


def mark_loopback(reason: str, loopback: bool) -> str:
    """``reason``, saying ``loopback`` once when the login did not cross the private network."""
    if loopback and "loopback" not in reason:
        return f"loopback: {reason}"
    return reason


def scrub(text: str, password: str, noise: Sequence[re.Pattern[str]] = ()) -> str:
    """Error text fit for a reason: without the password or ``noise``, on one line, not too long."""
    if password:
        text = text.replace(password, "***")
    text = " ".join(text.split())
    for pattern in noise:
        text = pattern.sub("", text)
    return text if len(text) <= REASON_MAX else text[: REASON_MAX - 1] + "…"


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

    @classmethod
    def after(
        cls,
        verdict: Verdict,
        reason: str,
        started: float | None,
        *,
        loopback: bool,
        used_password: bool | None = None,
        client_addr: str | None = None,
        system_user: str | None = None,
    ) -> LoginResult:
        """A result timed from ``started`` (``perf_counter``; None: never connected)."""
        latency = (time.perf_counter() - started) * 1000.0 if started is not None else 0.0
        return cls(
            verdict,
            mark_loopback(reason, loopback),
            latency,
            used_password,
            client_addr,
            loopback,
            system_user,
        )

    def to_json(self) -> LoginReport:
        return {
            "verdict": self.verdict,
            "reason": self.reason,
            "latency_ms": round(self.latency_ms, 3),
            "used_password": self.used_password,
            "client_addr": self.client_addr,
            "loopback": self.loopback,
            "system_user": self.system_user,
        }

    @classmethod
    def from_json(cls, data: LoginReport) -> LoginResult:
        """The result an agent reported (its shape checked on receipt); ValueError for a
        verdict name this version does not know."""
        return cls(
            verdict=Verdict(data["verdict"]),
            reason=data["reason"],
            latency_ms=float(data["latency_ms"]),
            used_password=data["used_password"],
            client_addr=data["client_addr"],
            loopback=data["loopback"],
            system_user=data["system_user"],
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
        return mark_loopback(why, login.loopback)

    @property
    def loopback(self) -> bool:
        return self.login.loopback

    def to_json(self) -> ProbeReport:
        return {
            "verdict": self.verdict(),
            "reason": self.reason(),
            "loopback": self.loopback,
            "login": self.login.to_json(),
            "control": self.control.to_json() if self.control is not None else None,
        }

    @classmethod
    def from_json(cls, data: ProbeReport) -> ProbeResult:
        """The probe an agent reported (its shape checked on receipt)."""
        control = data["control"]
        return cls(
            login=LoginResult.from_json(data["login"]),
            control=LoginResult.from_json(control) if control is not None else None,
        )


KindProbe = Callable[[ProbeTarget, ProbeOptions], ProbeResult]
"""A kind's probe (its ``Kind.probe``): one login with the held credential and, unless
``options.control`` is False or it was not accepted, the negative control."""
