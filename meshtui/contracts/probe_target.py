"""Where a probe's login would land: is a host this machine (loopback) or the network?

A probe is evidence about the private network only when the login leaves this host; these
rules, shared by every kind of probe, tell a loopback target before anything is sent.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass

_LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"}


def loopback_host(host: str) -> bool:
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
    return loopback_addr(addr)


def loopback_addr(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether an address is loopback or unspecified (also as an IPv4-mapped IPv6 address)."""
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return addr.is_loopback or addr.is_unspecified


def own_address(addr: str) -> bool:
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


def resolve(host: str, port: int) -> list[str]:
    """The addresses ``host`` names: itself if it is an address, else what the resolver says."""
    try:
        return [str(ipaddress.ip_address(host.strip("[]")))]
    except ValueError:
        pass
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def same_addr(a: str | None, b: str) -> bool:
    """Whether two address texts name the same address (None never does)."""
    if a is None:
        return False
    try:
        return ipaddress.ip_address(a) == ipaddress.ip_address(b)
    except ValueError:
        return a == b


ALLOW = "allow_loopback to test locally"
"""What an operator declares to probe a server on this machine on purpose."""


@dataclass(frozen=True)
class Route:
    """Where a probe connects: the first address its host names, and whether that login stays
    on this machine (allowed only by ``allow_loopback``)."""

    address: str
    loopback: bool


@dataclass(frozen=True)
class NotRun:
    """Why a probe is not sent (its reason, "not run: …" or "host name not resolved…"), and
    whether the target it names is this machine."""

    reason: str
    loopback: bool


def named_loopback(host: str, *, allow_loopback: bool) -> NotRun | None:
    """The refusal of a host whose very name is this machine, before any other check of the
    target (a loopback probe proves nothing about the private network), or None."""
    if allow_loopback or not loopback_host(host):
        return None
    why = f"not run: {host!r} is a loopback target, not the provider's private address ({ALLOW})"
    return NotRun(why, True)


def route(host: str, port: int, *, allow_loopback: bool) -> Route | NotRun:
    """Resolve ``host`` once and choose its first address, refusing one on this machine: any
    address it names that is loopback, or a first address configured here (the login would not
    cross the network). The kind connects to :attr:`Route.address`, never resolving again."""
    named = loopback_host(host)
    try:
        addresses = resolve(host, port)
    except OSError as exc:
        return NotRun(f"host name not resolved: {exc.strerror}", named)
    if not addresses:
        return NotRun("host name not resolved", named)
    first = addresses[0]
    if any(loopback_addr(ipaddress.ip_address(a)) for a in addresses):
        why = f"not run: {host!r} resolves to a loopback address ({ALLOW})"
    elif own_address(first):
        why = (
            f"not run: {first} is an address of this host itself, so the login would not cross "
            f"the network: loopback ({ALLOW})"
        )
    else:
        return Route(first, named)
    if not allow_loopback:
        return NotRun(why, True)
    return Route(first, True)
