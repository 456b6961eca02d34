"""A node speaks only for its own ends.

Root on app2 restarts its agent with a holding for app1's pair in its record: the agent then
reports it, signed with app2's own real key, as any modified agent could. push believed it:
a claimed generation above the pair's made push rotate app1's pair past it; a claimed file
missing at the current generation made every push deliver to app1 again. Real agents over real
sockets; the forged claim is put where the agent keeps its holdings.
"""

from __future__ import annotations

import json

import pytest

from meshtui.host.state.holdings import FILE
from tests.fix_agents import Mesh

pytestmark = pytest.mark.slow

APP1 = "database:app1/gitea->db1/postgres"


@pytest.fixture
def mesh(mesh_with_agents) -> Mesh:
    m: Mesh = mesh_with_agents(
        consumers={"app1": ["gitea"], "app2": ["wiki"]},
        port=5432,
        admin=None,
        provisioner=["/bin/true"],
    )
    with m.controller() as ctl:
        assert ctl.push().ok
    return m


def forge(mesh: Mesh, file: str = "srv/app2/wiki/db.password", **claim: object) -> None:
    """app2's agent restarted holding ``claim`` as the consumer end of app1's pair."""
    mesh.stop("app2")
    path = mesh.nodes["app2"] / FILE
    held = json.loads(path.read_text())
    held["consumer"][APP1] = {
        "file": str(mesh.root / file),
        "group": None,
        "mode": "0600",
        "owner": None,
        **claim,
    }
    path.write_text(json.dumps(held))
    mesh.start("app2")


def claim_events(mesh: Mesh) -> list[dict[str, object]]:
    with mesh.controller() as ctl:
        return [e.detail for e in ctl.events() if e.kind == "claim"]


def test_a_node_claiming_a_higher_generation_of_anothers_pair_rotates_nothing(mesh) -> None:
    before = mesh.secret("srv/app1/gitea/db.password")
    forge(mesh, digest="blake2b:" + "ab" * 32, generation=999)

    run = mesh.cli("push")

    assert mesh.secret("srv/app1/gitea/db.password") == before
    with mesh.controller() as ctl:
        (pair,) = ctl.inventory.pairs([APP1])
        assert pair["generation"] == 1
    assert "AHEAD" not in run.stdout and "rotated" not in run.stdout, run.stdout
    assert f"CLAIM     app2: app2 claims the consumer end of {APP1}" in run.stdout, run.stdout
    (said,) = claim_events(mesh)
    assert APP1 in str(said["app2"])


def test_a_node_claiming_anothers_file_is_missing_makes_no_delivery(mesh) -> None:
    with mesh.controller() as ctl:
        ends = ctl.inventory.held_ends([APP1])
    generation, digest = ends[(APP1, "consumer")][:2]
    forge(mesh, "srv/app2/wiki/gone.password", digest=digest, generation=generation)

    for _ in range(2):
        with mesh.controller() as ctl:
            report = ctl.push()
        assert APP1 not in [o.pair for o in report.delivered], report.delivered
        assert "app2" in report.claims
    with mesh.controller() as ctl:
        assert ctl.inventory.held_ends([APP1])[(APP1, "consumer")][0] == generation
