"""``lab up --controllers 2``: a second controller with its own keys and state folder, accepted
by every lab node by its own key, not by the first controller's."""

from __future__ import annotations

import csv
import io
import json
import re
import stat
import time
import tomllib
from pathlib import Path

import pytest

from meshtui import crypto
from meshtui.controller import config
from meshtui.controller.core import Controller
from meshtui.errors import LabError
from meshtui.lab import controllers, shared_inventory
from meshtui.lab import mesh as lab_mesh
from meshtui.protocol import messages
from tests.controller.failover import Watches
from tests.docs.examples import command_lines
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


def test_both_controllers_share_one_postgresql_inventory_and_one_watch_leads(lab):
    state, built = lab
    b = controllers.state_of(built.folder, "ctl-b")
    conninfo = built.folder / shared_inventory.CONNINFO
    assert config.load(state).postgres == conninfo == config.load(b).postgres
    assert stat.S_IMODE(conninfo.stat().st_mode) == 0o600
    assert not (state / "inventory.db").exists() and not (b / "inventory.db").exists()

    # ctl-a declared and pushed (the fixture); ctl-b sees it without declaring anything
    shown = cli(b, "status", "--json")
    assert shown.returncode == 0, shown.stderr
    pairs = [p["pair"] for p in json.loads(shown.stdout)]
    assert pairs, shown.stdout
    pushed = cli(b, "push")
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    rotated = cli(b, "rotate", pairs[0], "--yes")
    assert rotated.returncode == 0, rotated.stdout + rotated.stderr
    assert cli(state, "push").returncode == 0

    verified = cli(state, "audit", "--verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert cli(b, "audit", "--verify").returncode == 0
    exported = cli(state, "audit", "--export", "csv")
    assert exported.returncode == 0, exported.stderr
    named = {row["controller"] for row in csv.DictReader(io.StringIO(exported.stdout))}
    assert {"ctl-a", "ctl-b"} <= named, named

    watches = Watches()
    try:
        for name, folder in (("ctl-a", state), ("ctl-b", b)):
            watches.start(name, folder)
        (leader,) = watches.wait_roles(60)
        (standby,) = [w for w in watches.running if w is not leader]
        beat = standby.beat()
        assert beat is not None and beat.role == "standby" and beat.leader == leader.name
    finally:
        watches.stop_all()


def test_a_state_folder_on_its_own_sqlite_inventory_is_refused_before_anything_is_raised(
    tmp_path,
):
    state = tmp_path / "state"
    with Controller.open(state):  # its inventory: a SQLite file
        pass
    done = cli(state, "lab", "up", "--controllers", "2")
    assert done.returncode != 0
    assert str(state / "inventory.db") in done.stderr and "move-inventory" in done.stderr
    assert not (state / "lab" / shared_inventory.CONNINFO).exists()
    assert not (state / "lab" / "nodes").exists()


WALK = Path(__file__).parents[2] / "docs" / "several-controllers.md"


def test_the_walk_in_the_lab_runs_as_written(lab):
    """docs/several-controllers.md's lab walk, its folder ``/tmp/lab`` this lab's: every
    ``meshtui`` command of its blocks but ``lab`` (the fixture's) and ``watch`` (the watch test's)
    exits 0 against the two controllers."""
    state, _built = lab
    page = WALK.read_text()
    walk = page[page.index("## The walk in the lab") : page.index("## Restoring")]
    blocks = re.findall(r"^```sh\n(.*?)^```", walk, flags=re.M | re.S)
    ran = 0
    for block in blocks:
        for argv in command_lines(block.replace("/tmp/lab", str(state))):
            if argv[argv.index("--state") + 2] in ("lab", "watch"):
                continue
            done = cli(Path(argv[argv.index("--state") + 1]), *argv[2:])
            assert done.returncode == 0, f"meshtui {' '.join(argv)}: {done.stdout}{done.stderr}"
            ran += 1
    assert ran >= 5


def test_lab_up_again_keeps_both_controllers_keys(lab):
    """Last: ``lab up`` again writes the lab's declaration for the default mesh."""
    state, built = lab
    b = controllers.state_of(built.folder, "ctl-b")
    before = (b / "controller.pub").read_text()
    done = cli(state, "lab", "up", "--controllers", "2")
    assert done.returncode == 0, done.stderr
    assert (b / "controller.pub").read_text() == before
    assert "lab/controllers/ctl-b" in done.stdout
    assert f"meshtui --state {b} status" in done.stdout  # it sees the one inventory: no declare


def test_lab_down_stops_the_inventory_and_purge_points_the_folder_back_at_sqlite(lab):
    """Last of all (it takes the lab down; the fixture's own teardown then finds it gone)."""
    state, built = lab
    b = controllers.state_of(built.folder, "ctl-b")
    rotated = cli(b, "rotate", "--all", "--yes")  # every node keeps an audit head ctl-b signed
    assert rotated.returncode == 0, rotated.stdout + rotated.stderr
    down = cli(state, "lab", "down")
    assert down.returncode == 0 and "inventory PostgreSQL" in down.stdout, down.stdout
    assert "stopping the agents ..." in down.stderr, down.stderr  # said as it goes
    began = time.monotonic()
    shown = cli(b, "status")
    assert shown.returncode == 1 and "inventory on PostgreSQL" in shown.stderr, shown.stderr
    assert time.monotonic() - began < 20
    assert f"meshtui --state {state} lab up starts it again" in shown.stderr, shown.stderr
    with pytest.raises(LabError) as refused:  # one controller: no node accepts ctl-b now
        lab_mesh.up(state, kinds=ONLY_POSTGRES, mesh={"app1": ["gitea"]}, controllers=1)
    said = str(refused.value)
    assert "not signed by the key of controller ctl-b" in said, said  # the head ctl-b signed
    assert "if controller ctl-b was retired, name the controllers that stay" in said, said
    tail = said.split("its log ends:\n", 1)[1].split("\nthe rest of the lab is up", 1)[0]
    assert all(line.startswith(("20", "meshtui")) for line in tail.splitlines()), tail
    assert f"meshtui --state {state} lab up again, or lab down" in said, said
    again_up = lab_mesh.up(state, kinds=ONLY_POSTGRES, mesh={"app1": ["gitea"]})  # no --controllers
    assert again_up.controllers == 2  # the ones it was raised with: every node accepts both
    for folder in (state, b):
        again = cli(folder, "status")
        assert again.returncode == 0, again.stderr  # the lab's own inventory started again
        reached = cli(folder, "probe")
        assert reached.returncode == 0, f"{folder}: {reached.stdout}{reached.stderr}"
    assert (state / "controllers" / "ctl-b.pub").exists()
    lab_mesh.down(state, purge=True)
    assert config.load(state).postgres is None and not built.folder.exists()
    assert not (state / "controllers" / "ctl-b.pub").exists()  # doctor asks for no ctl-b now
