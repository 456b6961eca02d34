"""``lab up --controllers 2``: a second controller with its own keys and state folder, accepted
by every lab node by its own key, not by the first controller's."""

from __future__ import annotations

import tomllib

import pytest

from meshtui import crypto
from meshtui.controller import config
from meshtui.controller.core import Controller
from meshtui.lab import controllers
from meshtui.protocol import messages
from tests.fix_lab import cli, running_lab

pytestmark = [pytest.mark.root, pytest.mark.slow]

ONLY_POSTGRES = {"redis": False, "openbao": False, "seaweedfs": False}


@pytest.fixture(scope="module")
def lab():
    with running_lab(
        "meshtui-labctl-", controllers=2, kinds=ONLY_POSTGRES, mesh={"app1": ["gitea"]}
    ) as found:
        yield found


def test_the_second_controller_has_its_own_keys_and_every_node_accepts_both(lab):
    state, built = lab
    b = controllers.state_of(built.folder, "ctl-b")
    assert b == state / "lab" / "controllers" / "ctl-b"
    assert config.load(state).name == "ctl-a" and config.load(b).name == "ctl-b"
    key_a = crypto.load_public(state / "controller.pub", need_seal=False).verify
    key_b = crypto.load_public(b / "controller.pub", need_seal=False).verify
    assert key_a != key_b
    assert (b / "controllers" / "ctl-a.pub").exists()
    assert (state / "controllers" / "ctl-b.pub").exists()
    for node in built.addresses:
        policy = tomllib.loads((built.folder / "nodes" / node / "policy.toml").read_text())
        named = {c["name"]: crypto.unb64(c["verify"]) for c in policy["controllers"]}
        assert named == {"ctl-a": key_a, "ctl-b": key_b}

    declared = cli(b, "declare", str(built.declaration))
    assert declared.returncode == 0, declared.stderr
    with Controller.open(b) as ctl, ctl.agents() as agents:
        answers = agents.call_many(messages.STATE, dict.fromkeys(built.addresses, {}))
    assert all(not isinstance(a, Exception) for a in answers.values()), answers
    assert cli(b, "status").returncode == 0


def test_lab_up_again_keeps_both_controllers_keys(lab):
    state, built = lab
    b = controllers.state_of(built.folder, "ctl-b")
    before = (b / "controller.pub").read_text()
    done = cli(state, "lab", "up", "--controllers", "2")
    assert done.returncode == 0, done.stderr
    assert (b / "controller.pub").read_text() == before
    assert "lab/controllers/ctl-b" in done.stdout
