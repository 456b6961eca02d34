"""A private network made of Linux network namespaces, so lab probes cross a real (virtual) link.

Layout of a network named ``mt`` with nodes ``db1`` and ``app1`` on ``10.213.0.0/24``::

    namespace mt-net    bridge "br0", one port "v-<node>" per node (no address)
    namespace mt-db1    lo up, "mesh0" = 10.213.0.2/24 (peer of mt-net's "v-db1")
    namespace mt-app1   lo up, "mesh0" = 10.213.0.3/24 (peer of mt-net's "v-app1")

Node addresses are given in the order of the node list: ``.2``, ``.3``, ... (``.1`` is left
free). There is no default route anywhere, so a packet can reach the subnet and nothing else.
Every link is created directly inside its namespace (``ip -n mt-net link add ... peer ...
netns mt-db1``), so the root namespace never holds any of it, even for an instant, and two
networks never clash on interface names. Deleting a namespace deletes its veth ends, and a veth
pair dies with either end.

A network's name is a short prefix with no ``-`` (``[a-z0-9]``, at most 12 characters), so
the namespaces ``<name>-*`` belong to exactly one network, which is what :func:`destroy`
removes. Everything here needs root and iproute2's ``ip``.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from meshtui.errors import LabError
from meshtui.freeform import ForeignJson
from meshtui.lab.wait import poll
from meshtui.runas import RUN_ENV

DEFAULT_SUBNET = "10.213.0.0/24"
BRIDGE_NODE = "net"  # the namespace "<name>-net" holds the bridge; no node may take this name
BRIDGE = "br0"
NODE_IFACE = "mesh0"
PORT_PREFIX = "v-"
MARK_PREFIX = "meshtui-run "  # the bridge's alias: the run that built the network
IFNAMSIZ = 15  # Linux limit on an interface name, in bytes

_NAME_RE = re.compile(r"[a-z0-9]{1,12}")
_NODE_RE = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,11}[a-z0-9])?")
_TIMEOUT = 30.0  # seconds, for any single ``ip`` command
_KILL_GRACE = 5.0  # seconds between SIGTERM and SIGKILL for processes left in a namespace


@dataclass(frozen=True)
class Network:
    """A built private network: its prefix, its subnet and each node's address."""

    name: str
    subnet: str
    nodes: dict[str, str] = field(hash=False)

    def namespace(self, node: str) -> str:
        """The namespace of ``node`` (``<name>-<node>``)."""
        if node not in self.nodes:
            raise LabError(f"network {self.name}: no node named {node!r}")
        return _ns(self.name, node)

    def cidr(self) -> str:
        """The subnet in CIDR form, e.g. ``10.213.0.0/24`` (what a pg_hba line names)."""
        return str(ipaddress.ip_network(self.subnet))

    def address(self, node: str) -> str:
        """The private address of ``node``."""
        if node not in self.nodes:
            raise LabError(f"network {self.name}: no node named {node!r}")
        return self.nodes[node]

    @property
    def bridge_namespace(self) -> str:
        """The namespace that holds the bridge (``<name>-net``)."""
        return _ns(self.name, BRIDGE_NODE)

    def namespaces(self) -> list[str]:
        """Every namespace of this network, the bridge's first."""
        return [self.bridge_namespace] + [_ns(self.name, n) for n in self.nodes]


# --------------------------------------------------------------------------- running ``ip``


def _run(argv: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run one command; on failure raise LabError naming the command and its stderr."""
    try:
        done = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            timeout=_TIMEOUT,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except FileNotFoundError as exc:
        raise LabError(f"{' '.join(argv)}: {argv[0]} not found (install iproute2)") from exc
    except subprocess.TimeoutExpired as exc:
        raise LabError(f"{' '.join(argv)}: no answer after {_TIMEOUT:.0f} s") from exc
    if check and done.returncode != 0:
        why = done.stderr.strip() or done.stdout.strip() or f"exit status {done.returncode}"
        raise LabError(f"{' '.join(argv)}: {why}")
    return done


def _ip(*args: str, netns: str | None = None, check: bool = True) -> str:
    argv = ["ip"] + (["-n", netns] if netns else []) + list(args)
    return _run(argv, check=check).stdout


def _ip_json(*args: str, netns: str | None = None) -> list[ForeignJson]:
    out = _ip("-j", *args, netns=netns)
    if not out.strip():
        return []
    data = json.loads(out)
    return [d for d in data if isinstance(d, dict)] if isinstance(data, list) else []


def _ns(name: str, node: str) -> str:
    return f"{name}-{node}"


def _list_namespaces() -> list[str]:
    """Names from ``ip netns list`` (whose lines read ``name`` or ``name (id: N)``)."""
    out = _ip("netns", "list")
    return [line.split()[0] for line in out.splitlines() if line.strip()]


# --------------------------------------------------------------------------- validation


def _check_name(name: str) -> None:
    if not _NAME_RE.fullmatch(name):
        raise LabError(
            f"network name {name!r} is not 1-12 characters of [a-z0-9] "
            "(no '-': it separates the name from the node in namespace names)"
        )


def _check_nodes(nodes: Sequence[str]) -> None:
    if not nodes:
        raise LabError("a network needs at least one node")
    seen: set[str] = set()
    for node in nodes:
        if not isinstance(node, str) or not _NODE_RE.fullmatch(node):
            raise LabError(
                f"node name {node!r} is not 1-13 characters of [a-z0-9-] "
                "starting and ending with a letter or digit"
            )
        if node == BRIDGE_NODE:
            raise LabError(f"node name {node!r} is reserved for the bridge's namespace")
        if node in seen:
            raise LabError(f"node name {node!r} is given twice")
        if len((PORT_PREFIX + node).encode()) > IFNAMSIZ:  # pragma: no cover - regex bounds it
            raise LabError(f"node name {node!r} makes an interface name over {IFNAMSIZ} bytes")
        seen.add(node)


def _plan_addresses(
    subnet: str, nodes: Sequence[str]
) -> tuple[ipaddress.IPv4Network, dict[str, str]]:
    try:
        net = ipaddress.ip_network(subnet, strict=True)
    except ValueError as exc:
        raise LabError(f"subnet {subnet!r} is not a network in CIDR form: {exc}") from exc
    if not isinstance(net, ipaddress.IPv4Network):
        raise LabError(f"subnet {subnet!r} is not IPv4")
    if net.is_loopback or net.is_multicast or net.is_unspecified or net.is_link_local:
        raise LabError(f"subnet {subnet!r} is loopback, multicast, link-local or unspecified")
    # .0 is the network, .1 left free, the last is broadcast: nodes take .2 up to last-1.
    room = net.num_addresses - 3
    if len(nodes) > room:
        raise LabError(f"subnet {subnet} has room for {max(room, 0)} nodes, not {len(nodes)}")
    return net, {node: str(net.network_address + 2 + i) for i, node in enumerate(nodes)}


# --------------------------------------------------------------------------- public API


@functools.cache
def available() -> bool:
    """True when we are root, ``ip`` exists and a namespace can really be made and removed."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return False
    probe = f"mtprobe{os.getpid()}"
    try:
        _ip("netns", "list")
        _ip("netns", "add", probe)
        _ip("netns", "del", probe)
    except LabError:
        _ip("netns", "del", probe, check=False)
        return False
    return True


def free_port() -> int:
    """A free TCP port on loopback, for a server of a lab without namespaces."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def exec_argv(namespace: str, argv: list[str]) -> list[str]:
    """The command line that runs ``argv`` inside ``namespace``."""
    if not namespace or "/" in namespace or namespace.startswith("-"):
        raise LabError(f"{namespace!r} is not a namespace name")
    return ["ip", "netns", "exec", namespace, *argv]


def spawn(namespace: str, argv: list[str], **popen_kwargs: Any) -> subprocess.Popen[bytes]:
    """Start ``argv`` inside ``namespace``; keyword arguments go to :class:`subprocess.Popen`."""
    try:
        proc: subprocess.Popen[bytes] = subprocess.Popen(exec_argv(namespace, argv), **popen_kwargs)
    except OSError as exc:
        raise LabError(f"ip netns exec {namespace} {argv[0] if argv else ''}: {exc}") from exc
    return proc


def exists(name: str) -> bool:
    """True when the network's bridge namespace (``<name>-net``) exists."""
    _check_name(name)
    return _ns(name, BRIDGE_NODE) in _list_namespaces()


def create(name: str, nodes: list[str], subnet: str = DEFAULT_SUBNET) -> Network:
    """Build (or complete) the network ``name`` with ``nodes`` on ``subnet``.

    Idempotent: what exists is kept, what is missing is added, and each node's interface
    ends up with exactly its planned address. Nodes of an earlier call that are not in
    ``nodes`` are left alone (:func:`destroy` removes everything).
    """
    _check_name(name)
    _check_nodes(nodes)
    net, addresses = _plan_addresses(subnet, nodes)
    present = set(_list_namespaces())

    bridge_ns = _ns(name, BRIDGE_NODE)
    _ensure_namespace(bridge_ns, present)
    links = {d.get("ifname"): d for d in _ip_json("link", "show", netns=bridge_ns)}
    if BRIDGE not in links:
        _ip("link", "add", BRIDGE, "type", "bridge", netns=bridge_ns)
    _ip("link", "set", "lo", "up", netns=bridge_ns)
    _ip("link", "set", BRIDGE, "up", netns=bridge_ns)
    run = os.environ.get(RUN_ENV)
    if run:  # the test run that built it, so a sweep finds it once that run is gone
        _ip("link", "set", BRIDGE, "alias", MARK_PREFIX + run, netns=bridge_ns)

    for node in nodes:
        node_ns = _ns(name, node)
        _ensure_namespace(node_ns, present)
        port = PORT_PREFIX + node
        node_links = {d.get("ifname") for d in _ip_json("link", "show", netns=node_ns)}
        if port in links and NODE_IFACE not in node_links:
            # A port whose peer went elsewhere (cannot normally happen): start it afresh.
            _ip("link", "del", port, netns=bridge_ns)
            del links[port]
        if NODE_IFACE in node_links and port not in links:
            _ip("link", "del", NODE_IFACE, netns=node_ns)
            node_links.discard(NODE_IFACE)
        if port not in links:
            _ip(
                "link", "add", port, "type", "veth",
                "peer", "name", NODE_IFACE, "netns", node_ns,
                netns=bridge_ns,
            )  # fmt: skip
        _ip("link", "set", port, "master", BRIDGE, netns=bridge_ns)
        _ip("link", "set", port, "up", netns=bridge_ns)
        _set_address(node_ns, f"{addresses[node]}/{net.prefixlen}")
        _ip("link", "set", "lo", "up", netns=node_ns)
        _ip("link", "set", NODE_IFACE, "up", netns=node_ns)
        if _ip_json("route", "show", "default", netns=node_ns):  # we never add one; be sure
            _ip("route", "flush", "exact", "0.0.0.0/0", netns=node_ns)
    return Network(name=name, subnet=str(net), nodes=addresses)


def marks() -> dict[str, str]:
    """Each network whose bridge carries a run's mark, and that mark (``meshtui.lab.runs``)."""
    found: dict[str, str] = {}
    for ns in _list_namespaces():
        name, _, node = ns.rpartition("-")
        if node != BRIDGE_NODE or not _NAME_RE.fullmatch(name):
            continue
        try:
            links = _ip_json("link", "show", BRIDGE, netns=ns)
        except LabError:  # removed meanwhile, or no bridge: not a network of ours
            continue
        alias = str(links[0].get("ifalias", "")) if links else ""
        if alias.startswith(MARK_PREFIX):
            found[name] = alias[len(MARK_PREFIX) :]
    return found


def destroy(name: str) -> None:
    """Remove every namespace ``<name>-*`` (and so every link in them). Idempotent.

    Processes still running inside a node's namespace would keep it (and its veth) alive
    after ``ip netns del``, so they are sent SIGTERM, then SIGKILL after a grace period.
    Stop servers properly before destroying the network that carries them.
    """
    _check_name(name)
    ours = [ns for ns in _list_namespaces() if ns.startswith(f"{name}-")]
    for ns in ours:
        _end_processes(ns)
    errors: list[str] = []
    for ns in ours:
        done = _run(["ip", "netns", "del", ns], check=False)
        if done.returncode != 0 and ns in _list_namespaces():
            errors.append(f"ip netns del {ns}: {done.stderr.strip()}")
    if errors:
        raise LabError("; ".join(errors))


# --------------------------------------------------------------------------- helpers


def _ensure_namespace(ns: str, present: set[str]) -> None:
    if ns in present:
        return
    done = _run(["ip", "netns", "add", ns], check=False)
    if done.returncode != 0 and ns not in _list_namespaces():
        raise LabError(f"ip netns add {ns}: {done.stderr.strip()}")
    present.add(ns)


def _set_address(ns: str, want: str) -> None:
    """Give the node interface exactly ``want`` (IPv4); drop any other IPv4 address on it."""
    have: list[str] = []
    for link in _ip_json("-4", "addr", "show", "dev", NODE_IFACE, netns=ns):
        for info in link.get("addr_info", []):
            if info.get("family") == "inet":
                have.append(f"{info['local']}/{info['prefixlen']}")
    for addr in have:
        if addr != want:
            _ip("addr", "del", addr, "dev", NODE_IFACE, netns=ns)
    if want not in have:
        _ip("addr", "add", want, "dev", NODE_IFACE, netns=ns)


def _pids(ns: str) -> list[int]:
    done = _run(["ip", "netns", "pids", ns], check=False)
    return [int(p) for p in done.stdout.split() if p.isdigit()] if done.returncode == 0 else []


def _end_processes(ns: str) -> None:
    pids = _pids(ns)
    if not pids:
        return
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    if poll(lambda: not _pids(ns), _KILL_GRACE):
        return
    pids = _pids(ns)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
