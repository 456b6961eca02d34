"""Where a probe's login would land: is a host this machine (loopback) or the network?

A probe is evidence about the private network only when the login leaves this host; these
rules, shared by every kind of probe, tell a loopback target before anything is sent.
"""

from __future__ import annotations

import ipaddress
import socket

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
