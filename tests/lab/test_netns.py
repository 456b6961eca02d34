"""The private network of namespaces: validation (anyone), and the real thing (root)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from meshtui.errors import LabError
from meshtui.lab import netns as lab_netns
from tests.fix_netns import netns_prefix

# --------------------------------------------------------------------------- pure checks


@pytest.mark.parametrize("name", ["", "mt-x", "MT", "abcdefghijklm", "mt x", "mt/", "é"])
def test_bad_network_names_are_refused_before_anything_runs(name: str) -> None:
    with pytest.raises(LabError, match="network name"):
        lab_netns.create(name, ["db1"])
    with pytest.raises(LabError, match="network name"):
        lab_netns.destroy(name)


@pytest.mark.parametrize(
    "nodes, match",
    [
        ([], "at least one node"),
        (["Db1"], "node name"),
        (["-db"], "node name"),
        (["db-"], "node name"),
        (["a" * 14], "node name"),
        (["db 1"], "node name"),
        (["net"], "reserved"),
        (["db1", "db1"], "twice"),
    ],
)
def test_bad_node_names_are_refused(nodes: list[str], match: str) -> None:
    with pytest.raises(LabError, match=match):
        lab_netns.create("mtv", nodes)


@pytest.mark.parametrize(
    "subnet, match",
    [
        ("10.213.0.5/24", "CIDR"),
        ("fd00::/64", "IPv4"),
        ("127.0.0.0/8", "loopback"),
        ("10.213.0.0/30", "room for 1 nodes"),
        ("nonsense", "CIDR"),
    ],
)
def test_bad_subnets_are_refused(subnet: str, match: str) -> None:
    with pytest.raises(LabError, match=match):
        lab_netns.create("mtv", ["db1", "app1"], subnet=subnet)


def test_longest_node_name_fits_an_interface_name() -> None:
    node = "a" * 13
    lab_netns._check_nodes([node])  # no error
    assert len(lab_netns.PORT_PREFIX + node) <= lab_netns.IFNAMSIZ


def test_addresses_follow_the_node_order_from_dot_two() -> None:
    net, addresses = lab_netns._plan_addresses("10.9.0.0/24", ["db1", "app1", "app2"])
    assert str(net) == "10.9.0.0/24"
    assert addresses == {"db1": "10.9.0.2", "app1": "10.9.0.3", "app2": "10.9.0.4"}


def test_network_helpers() -> None:
    net = lab_netns.Network("mt", "10.213.0.0/24", {"db1": "10.213.0.2", "app1": "10.213.0.3"})
    assert net.namespace("db1") == "mt-db1"
    assert net.bridge_namespace == "mt-net"
    assert net.namespaces() == ["mt-net", "mt-db1", "mt-app1"]
    assert net.cidr() == "10.213.0.0/24"
    assert net.address("app1") == "10.213.0.3"
    assert hash(net) == hash(net)  # usable as a key despite the dict
    with pytest.raises(LabError, match="no node named 'x'"):
        net.namespace("x")


def test_exec_argv() -> None:
    assert lab_netns.exec_argv("mt-db1", ["true", "x"]) == [
        "ip",
        "netns",
        "exec",
        "mt-db1",
        "true",
        "x",
    ]
    for bad in ("", "../x", "-n"):
        with pytest.raises(LabError):
            lab_netns.exec_argv(bad, ["true"])


def test_failing_command_names_itself_and_its_stderr() -> None:
    with pytest.raises(LabError) as err:
        lab_netns._ip("link", "show", "dev", "mtnosuch0")
    assert "ip link show dev mtnosuch0" in str(err.value)
    assert "mtnosuch0" in str(err.value).split(":", 1)[1]


# --------------------------------------------------------------------------- as root

SERVER = """
import socket, sys
s = socket.socket(); s.bind((sys.argv[1], 0)); s.listen(1)
print(s.getsockname()[1], flush=True)
c, peer = s.accept(); c.sendall(("hello " + peer[0]).encode()); c.close()
"""

CLIENT = """
import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
print(c.recv(100).decode())
"""


def _json(argv: list[str]) -> list[dict[str, object]]:
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    return json.loads(out) if out.strip() else []


def _talk(net: lab_netns.Network, server: str, client: str) -> str:
    """Listen in ``server``'s namespace on its address; connect from ``client``'s; return reply."""
    addr = net.address(server)
    srv = lab_netns.spawn(
        net.namespace(server), [sys.executable, "-c", SERVER, addr], stdout=subprocess.PIPE
    )
    try:
        assert srv.stdout is not None
        port = srv.stdout.readline().decode().strip()
        cli = subprocess.run(
            lab_netns.exec_argv(net.namespace(client), [sys.executable, "-c", CLIENT, addr, port]),
            capture_output=True,
            text=True,
            timeout=20,
        )
        assert cli.returncode == 0, cli.stderr
        return cli.stdout.strip()
    finally:
        srv.kill()
        srv.wait()


@pytest.mark.root
def test_each_namespace_has_its_address_and_no_default_route(netns: lab_netns.Network) -> None:
    assert list(netns.nodes) == ["db1", "app1", "app2"]
    assert netns.nodes == {"db1": "10.213.0.2", "app1": "10.213.0.3", "app2": "10.213.0.4"}
    assert lab_netns.exists(netns.name)
    for node, addr in netns.nodes.items():
        ns = netns.namespace(node)
        links = _json(["ip", "-n", ns, "-j", "addr", "show"])
        by_name = {link["ifname"]: link for link in links}
        assert set(by_name) == {"lo", "mesh0"}
        v4 = [
            f"{a['local']}/{a['prefixlen']}"
            for a in by_name["mesh0"]["addr_info"]  # type: ignore[attr-defined]
            if a["family"] == "inet"
        ]
        assert v4 == [f"{addr}/24"]
        assert "UP" in by_name["lo"]["flags"]  # type: ignore[operator]
        assert _json(["ip", "-n", ns, "-j", "route", "show", "default"]) == []
        assert _json(["ip", "-n", ns, "-j", "-6", "route", "show", "default"]) == []
        routes = _json(["ip", "-n", ns, "-j", "route", "show"])
        assert [r["dst"] for r in routes] == ["10.213.0.0/24"]
        # Anything outside the subnet is unroutable (a table lookup; no packet is sent).
        nowhere = subprocess.run(
            ["ip", "-n", ns, "route", "get", "192.0.2.1"], capture_output=True, text=True
        )
        assert nowhere.returncode != 0 and "unreachable" in nowhere.stderr
    bridge = _json(["ip", "-n", netns.bridge_namespace, "-j", "link", "show", "master", "br0"])
    assert sorted(str(p["ifname"]) for p in bridge) == ["v-app1", "v-app2", "v-db1"]


@pytest.mark.root
def test_tcp_crosses_the_bridge_between_namespaces(netns: lab_netns.Network) -> None:
    assert _talk(netns, "db1", "app1") == "hello 10.213.0.3"
    assert _talk(netns, "app1", "app2") == "hello 10.213.0.4"


@pytest.mark.root
def test_root_namespace_is_untouched(netns: lab_netns.Network) -> None:
    root_links = _json(["ip", "-j", "addr", "show"])
    names = {str(link["ifname"]) for link in root_links}
    assert "mesh0" not in names
    assert not any(n.startswith(lab_netns.PORT_PREFIX) for n in names)
    root_addrs = {
        a["local"]
        for link in root_links
        for a in link.get("addr_info", [])  # type: ignore[attr-defined]
    }
    assert not root_addrs & set(netns.nodes.values())
    assert not [
        r
        for r in _json(["ip", "-j", "route", "show"])
        if str(r.get("dst", "")).startswith("10.213.0.")
    ]


@pytest.mark.root
def test_create_twice_repairs_and_destroy_leaves_nothing() -> None:
    if not lab_netns.available():
        pytest.skip("network namespaces are not usable here")
    name = netns_prefix("d")
    lab_netns.destroy(name)
    try:
        first = lab_netns.create(name, ["db1", "app1"], subnet="10.213.0.0/24")
        again = lab_netns.create(name, ["db1", "app1"], subnet="10.213.0.0/24")
        assert first == again
        # Break it (an address gone, an interface gone), then create completes it.
        subprocess.run(["ip", "-n", f"{name}-db1", "addr", "flush", "dev", "mesh0"], check=True)
        subprocess.run(["ip", "-n", f"{name}-net", "link", "del", "v-app1"], check=True)
        repaired = lab_netns.create(name, ["db1", "app1"])
        assert repaired == first
        assert _talk(repaired, "db1", "app1") == "hello 10.213.0.3"
        # A process left running in a namespace is ended by destroy.
        sleeper = lab_netns.spawn(f"{name}-app1", ["sleep", "60"])
        time.sleep(0.1)
    finally:
        lab_netns.destroy(name)
    assert sleeper.wait(timeout=10) != 0
    assert not lab_netns.exists(name)
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not [line for line in listed.splitlines() if line.startswith(f"{name}-")]
    root_names = {str(link["ifname"]) for link in _json(["ip", "-j", "link", "show"])}
    assert not [n for n in root_names if n.startswith(name) or n == "mesh0"]
    lab_netns.destroy(name)  # idempotent
