"""One node's replay record must not renumber the whole mesh.

Attack: root on one node (db1) edits its agent's replay record so that it claims to
have accepted request number 10**40, and restarts it. db1 now refuses every request "as older";
the next ``push`` reads db1's high-water mark (unsigned by the controller, signed by db1's own
key) and jumped the controller's sequence past it. Every other node then accepted numbers near
10**40 and ratcheted its own floor there, for good; the sequence file keeps 32 digits only, so
every later process numbered below what the honest nodes had accepted, and they refused it
as a replay (``probe`` of app1 failed). One node's key was enough to lock the controller out of
every node. Real agents over real sockets.
"""

from __future__ import annotations

import json
import time

import pytest

from meshtui.controller import config
from meshtui.controller.agents.client import read_anchor_answer
from meshtui.host.state.guard import LEDGER
from tests.fix_agents import Mesh

pytestmark = pytest.mark.slow

HUGE = 10**40


def test_a_node_claiming_an_absurd_high_water_mark_does_not_renumber_the_mesh(
    mesh_with_agents,
) -> None:
    m: Mesh = mesh_with_agents(
        consumers={"app1": ["gitea"]}, port=5432, admin=None, provisioner=["/bin/true"]
    )
    assert m.cli("push").returncode == 0
    # root on db1 rewrites its agent's replay record and restarts it
    m.stop("db1")
    record = m.nodes["db1"] / LEDGER
    line = json.loads(record.read_text().splitlines()[0])
    mine = config.load(m.state).name  # the numbers of this controller, and of none named
    line.update(floor=HUGE, recent=[HUGE], by={mine: {"floor": HUGE, "recent": [HUGE]}})
    record.write_text(json.dumps(line) + "\n")
    m.start("db1")

    done = m.cli("push")
    out = done.stdout + done.stderr
    assert "db1" in out and "claims it accepted request number" in out, out
    # the honest node was not renumbered past the controller's clock
    with m.controller(read_only=True) as ctl:
        app1 = read_anchor_answer(ctl.inventory.nodes()["app1"])
    ceiling = int((time.time() + 400 * 86400) * 1_000_000)
    assert app1.accepted is not None and app1.accepted < ceiling, app1.accepted
    # and a later process still talks to it
    probe = m.cli("probe", "database:app1/gitea->db1/postgres")
    assert "older than the requests" not in probe.stdout + probe.stderr, probe.stdout
    assert "replayed" not in probe.stdout + probe.stderr, probe.stdout
