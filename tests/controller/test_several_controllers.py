"""Two controllers, each with its own key, on one inventory and one mesh of real agents: every
audit event names the controller that appended it, the head is signed by that controller's key,
and ``audit --verify`` (the chain and every node's anchor) passes with events from both.

Until the inventory can live on PostgreSQL, the second controller is this state folder's
inventory opened under ctl-b's name and key (what a second machine on a shared inventory does).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from meshtui import crypto
from meshtui.controller import config
from meshtui.controller.core import Controller
from meshtui.controller.keys import add_peer
from meshtui.host.policy import node_policy
from meshtui.protocol.fence import Fence
from tests.fix_agents import Mesh, mesh_policy

GITEA = "database:app1/gitea->db1/postgres"


@pytest.fixture
def mesh(mesh_with_agents: Callable[..., Mesh], tmp_path) -> Mesh:
    m = mesh_with_agents(
        consumers={"app1": ["gitea"]}, port=5432, admin=None, provisioner=["/bin/true"]
    )
    config.write_name(m.state, "ctl-a")
    b = crypto.PrivateKeys.generate(node=False)
    crypto.write_keys(tmp_path, "ctl-b", b)
    m.ctl_b = b  # type: ignore[attr-defined]
    m.ctl_b_pub = tmp_path / "ctl-b.pub"  # type: ignore[attr-defined]
    a = crypto.load_public(m.state / "controller.pub", need_seal=False)
    for node in m.nodes:
        entries = [
            node_policy.ControllerKey("ctl-a", a.verify).entry(),
            node_policy.ControllerKey("ctl-b", b.public().verify).entry(),
        ]
        policy = mesh_policy(node, m.root, provisioner=(("/bin/true",),))
        text = policy + "\n" + "\n\n".join(entries) + "\n"
        node_policy.write(m.nodes[node], text)
    m.start_all(list(m.nodes))
    return m


@contextmanager
def controller_b(mesh: Mesh) -> Iterator[Controller]:
    """The shared inventory, acted on by ctl-b with its own key."""
    ctl = Controller.open(mesh.state)
    keys: crypto.PrivateKeys = mesh.ctl_b  # type: ignore[attr-defined]
    ctl._keys = keys
    ctl.fence = Fence("ctl-b")
    ctl.inventory.signer = keys.sign
    ctl.inventory.controller = "ctl-b"
    try:
        yield ctl
    finally:
        ctl.close()


def test_the_audit_names_each_controller_and_verifies_with_events_from_both(mesh: Mesh) -> None:
    with mesh.controller() as a:
        pushed = a.push()
        assert pushed.ok, [(o.pair, o.reason) for o in pushed.delivered]
    with controller_b(mesh) as b:
        assert b.rotate([GITEA]).outcome == "done"
        assert b.push().ok  # every node now keeps a head ctl-b signed
    events = Controller.open(mesh.state, read_only=True)
    with events as ctl:
        by = {e["controller"] for e in ctl.inventory.events()}
        assert {"ctl-a", "ctl-b"} <= by
        assert ctl.inventory.signed_head().controller == "ctl-b"  # type: ignore[union-attr]
        exported = list(csv.DictReader(io.StringIO(ctl.export_events("csv"))))
        assert {"ctl-a", "ctl-b"} <= {row["controller"] for row in exported}
        # ctl-a does not know ctl-b's key yet: the head cannot be checked, and it says why
        chain = ctl.verify_chain()
        assert not chain.ok and "controller ctl-b" in chain.problem
        assert "controllers/ctl-b.pub" in chain.problem
    add_peer(mesh.state, "ctl-b", mesh.ctl_b_pub)  # type: ignore[attr-defined]
    done = mesh.cli("audit", "--verify")
    assert done.returncode == 0, done.stdout + done.stderr
    for node in mesh.nodes:
        assert f"node {node}" in done.stdout and "agrees" in done.stdout


def test_a_head_signed_by_another_key_than_its_controllers_fails(mesh: Mesh) -> None:
    with mesh.controller() as a:
        assert a.push().ok
    add_peer(mesh.state, "ctl-b", mesh.ctl_b_pub)  # type: ignore[attr-defined]
    with mesh.controller() as a:  # ctl-a's key, but the events say ctl-b
        a.inventory.controller = "ctl-b"
        a.inventory.record("declare", [], {}, "ok")
        chain = a.verify_chain()
    assert not chain.ok and "not signed by the controller key of controller ctl-b" in chain.problem


def test_doctor_names_the_nodes_that_do_not_yet_accept_a_controller(
    mesh_with_agents: Callable[..., Mesh], tmp_path
) -> None:
    m = mesh_with_agents(
        consumers={"app1": ["gitea"]}, port=5432, admin=None, provisioner=["/bin/true"]
    )
    b = crypto.PrivateKeys.generate(node=False)
    crypto.write_keys(tmp_path, "ctl-b", b)
    with m.controller() as ctl:
        assert not [p for p in ctl.doctor().problems if p.check == "controller"]
    add_peer(m.state, "ctl-b", tmp_path / "ctl-b.pub")  # ctl-b added here, not yet on the nodes
    with m.controller() as ctl:
        found = [p for p in ctl.doctor().problems if p.check == "controller"]
    assert sorted(p.node for p in found) == sorted(m.nodes)
    assert all("does not accept controller ctl-b" in p.problem for p in found)
    assert all("pins only controller key" in p.problem for p in found)
    assert all(crypto.b64(b.public().verify) in p.fix for p in found)

    a = crypto.load_public(m.state / "controller.pub", need_seal=False)
    name = config.load(m.state).name
    policy = mesh_policy("app1", m.root, provisioner=(("/bin/true",),))
    entries = [node_policy.ControllerKey(name, a.verify).entry()]
    node_policy.write(m.nodes["app1"], policy + "\n" + "\n\n".join(entries) + "\n")
    m.start("app1")  # names this controller only: ctl-b still missing there
    entries.append(node_policy.ControllerKey("ctl-b", b.public().verify).entry())
    for node in ("db1",):
        policy = mesh_policy(node, m.root, provisioner=(("/bin/true",),))
        node_policy.write(m.nodes[node], policy + "\n" + "\n\n".join(entries) + "\n")
        m.start(node)
    with m.controller() as ctl:
        found = [p for p in ctl.doctor().problems if p.check == "controller"]
    assert [(p.node, p.subject) for p in found] == [("app1", "ctl-b")]
    assert f"its policy names {name}" in found[0].problem


def test_a_rotation_under_an_epoch_behind_the_nodes_changes_nothing(
    mesh_with_agents: Callable[..., Mesh],
) -> None:
    m = mesh_with_agents(
        consumers={"app1": ["gitea"]}, port=5432, admin=None, provisioner=["/bin/true"]
    )
    with m.controller() as ctl:
        name = ctl.fence.controller
        ctl.fence = Fence(name, 5)  # as a lease at epoch 5 would set it
        assert ctl.push().ok
    held = m.secret("srv/app1/gitea/db.password")
    with m.controller() as ctl:
        ctl.fence = Fence(name, 4)  # woke up after another controller took epoch 5
        report = ctl.rotate([GITEA])
    assert report.outcome != "done"
    assert f"controller {name}'s epoch 4 is behind epoch 5" in report.reason
    assert m.secret("srv/app1/gitea/db.password") == held


def test_doctor_names_a_node_whose_policy_no_longer_names_this_controller(
    mesh_with_agents: Callable[..., Mesh],
) -> None:
    m = mesh_with_agents(
        consumers={"app1": ["gitea"]}, port=5432, admin=None, provisioner=["/bin/true"]
    )
    other = crypto.PrivateKeys.generate(node=False).public().verify
    policy = mesh_policy("app1", m.root, provisioner=(("/bin/true",),))
    entry = node_policy.ControllerKey("ctl-b", other).entry()
    node_policy.write(m.nodes["app1"], policy + "\n" + entry + "\n")  # this controller retired
    m.start("app1")
    with m.controller() as ctl:
        name = ctl.fence.controller
        problems = ctl.doctor().problems
    mine = [p for p in problems if p.node == "app1" and p.check == "controller"]
    assert [p.subject for p in mine] == [name]
    assert "its policy names ctl-b" in mine[0].problem
    refused = [p for p in problems if p.node == "app1" and p.check == "key"]
    assert refused and "[[controllers]]" in refused[0].fix
