"""The controller's key is lost: a node never takes a new one from the network nor from a
repeated ``host init``; ``doctor`` names the nodes that still pin the old key; ``host rekey``,
run on the node, is the one act that changes the pin, keeping the old audit head as history."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from meshtui import crypto
from meshtui.controller.agents.client import read_anchor_answer
from meshtui.controller.core import Controller, init_keys
from meshtui.errors import AgentError
from meshtui.protocol import messages
from meshtui.protocol.messages import StateRequest
from tests.fix_agents import Mesh


def ask_state(ctl: Controller) -> dict[str, object]:
    with ctl.agents() as agents:
        return dict(agents.call_many(messages.STATE, {n: StateRequest() for n in ["db1", "app1"]}))


def new_controller_key(m: Mesh) -> crypto.PublicKeys:
    """The old key is lost: a new one is made in the same state folder (``meshtui init``)."""
    lost = m.root / "lost"
    lost.mkdir()
    shutil.move(m.state / "controller.key", lost / "controller.key")
    (m.state / "controller.pub").unlink()
    pub, created = init_keys(m.state)
    assert created
    return crypto.load_public(pub, need_seal=False)


def test_a_new_controller_key_is_refused_until_the_operator_rekeys_the_node(
    mesh_with_agents,
) -> None:
    m: Mesh = mesh_with_agents(
        consumers={"app1": ["gitea"]}, port=5432, admin=None, provisioner=["/bin/true"]
    )
    with m.controller() as ctl:
        assert all(not isinstance(a, AgentError) for a in ask_state(ctl).values())
        old_fp = ctl.keys().public().fingerprint()
        kept = read_anchor_answer(ctl.inventory.nodes()["app1"]).head
        assert kept is not None
    new = new_controller_key(m)

    # presented over the network: every node refuses it
    with m.controller() as ctl:
        for node, answer in ask_state(ctl).items():
            assert isinstance(answer, AgentError), node
            assert "refused, unsigned" in answer.reason  # the node's words are not trusted
    # doctor names each node that still pins the old key, and the act that changes it
    res = m.cli("doctor", "--json")
    assert res.returncode == 1
    found = {p["node"]: p for p in json.loads(res.stdout)["problems"] if p["check"] == "key"}
    assert set(found) == {"db1", "app1"}
    assert old_fp in found["app1"]["problem"] and new.fingerprint() in found["app1"]["problem"]
    assert "meshtui host rekey" in found["app1"]["fix"]

    # host init again with the new key: refused, the pin is unchanged
    res = m.cli(
        "host", "init", "--name", "app1", "--state", str(m.nodes["app1"]),
        "--controller", str(m.state / "controller.pub"),
    )  # fmt: skip
    assert res.returncode == 2 and "host rekey" in res.stderr and old_fp in res.stderr
    pinned = crypto.load_public(m.nodes["app1"] / "controller.pub", need_seal=False)
    assert pinned.fingerprint() == old_fp

    # host rekey without --yes shows both fingerprints and changes nothing
    m.stop("app1")
    rekey = ["host", "rekey", "--state", str(m.nodes["app1"]), "--controller"]
    res = m.cli(*rekey, str(m.state / "controller.pub"))
    assert res.returncode == 2 and old_fp in res.stderr and new.fingerprint() in res.stderr
    assert crypto.load_public(m.nodes["app1"] / "controller.pub", need_seal=False) == pinned
    res = m.cli(*rekey, str(m.state / "controller.pub"), "--yes")
    assert res.returncode == 0, res.stderr
    assert f"event {kept.seq}" in res.stdout
    assert old_fp in (m.nodes["app1"] / "controller-keys.log").read_text()
    m.start("app1")

    with m.controller() as ctl:
        answers = ask_state(ctl)
        assert not isinstance(answers["app1"], AgentError)  # the node obeys the new key
        assert isinstance(answers["db1"], AgentError)  # the one not rekeyed still refuses
        seen = read_anchor_answer(ctl.inventory.nodes()["app1"])
        assert seen.controller == new.fingerprint()
        assert [h.seq for h in seen.history] == [kept.seq]  # what it saw, kept aside
        assert seen.head is not None and seen.head.verifies(new.verify)
    res = m.cli("doctor", "--json")
    keys = [p["node"] for p in json.loads(res.stdout)["problems"] if p["check"] == "key"]
    assert keys == ["db1"]


def test_host_init_with_the_same_key_again_is_fine(tmp_path: Path) -> None:
    from meshtui.host.state import identity

    pub, _ = init_keys(tmp_path / "state")
    identity.init("app1", tmp_path / "n", pub)
    identity.init("app1", tmp_path / "n", pub)  # re-running init keeps everything


def test_keys_lost_a_new_controller_rekeys_every_node_and_one_push_converges(
    mesh_with_agents, tmp_path: Path
) -> None:
    """No backup at all: a new controller (init, declare) is refused until each node is
    re-keyed on the node; then one push names every end ahead and brings it to one generation."""
    m: Mesh = mesh_with_agents(
        consumers={"app1": ["gitea"]}, port=5432, admin=None, provisioner=["/bin/true"]
    )
    pair = "database:app1/gitea->db1/postgres"
    assert m.cli("push").returncode == 0
    for _ in range(2):
        done = m.cli("rotate", "--yes", pair)
        assert done.returncode == 0, done.stdout + done.stderr

    new = tmp_path / "new-controller"
    run = lambda *a: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "meshtui.cli", "--state", str(new), *a],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert run("init").returncode == 0
    assert run("declare", str(m.decl)).returncode == 0
    refused = run("push")
    assert refused.returncode == 1 and "refused" in refused.stdout
    res = run("doctor", "--json")
    assert {p["node"] for p in json.loads(res.stdout)["problems"] if p["check"] == "key"} == {
        "db1",
        "app1",
    }
    for node in ("db1", "app1"):
        m.stop(node)
        done = m.cli(
            "host", "rekey", "--state", str(m.nodes[node]),
            "--controller", str(new / "controller.pub"), "--yes",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        m.start(node)
    pushed = run("push")
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    assert f"AHEAD     {pair}" in pushed.stdout and "holds generation 3" in pushed.stdout
    assert "rotated to generation 4 on both ends" in pushed.stdout
    (row,) = json.loads(run("status", "--json").stdout)
    assert row["generation"] == row["consumer_generation"] == row["provider_generation"] == 4
    verified = run("audit", "--verify", "--json")
    assert verified.returncode == 0, verified.stdout + verified.stderr
