"""Attack: a declaration that names the agent's own state folder as a place to write.

The agent writes a consumer's credential file, a provider's manifest and its grants folder
wherever the (signed) delivery says, as root. A declaration whose ``file``, ``receives`` or
``grants`` points into the node's state folder would have the agent overwrite its own key, its
pinned controller key or its replay guard: the node is lost, or its replay record reset. Real
agents over real sockets; the controller pushes the declaration as it is written.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from tests.fix_agents import Mesh


def digests(folder: Path) -> dict[str, str]:
    """Every file of the state folder, by content digest: proof nothing was overwritten."""
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir() if p.is_file()
    }


def redeclare(mesh: Mesh, old: str, new: str) -> None:
    text = mesh.decl.read_text()
    assert old in text
    mesh.decl.write_text(text.replace(old, new))
    with mesh.controller() as ctl:
        ctl.declare(mesh.decl)


def push_errors(mesh: Mesh) -> str:
    with mesh.controller() as ctl:
        result = ctl.push()
    return repr(result)


def test_a_credential_file_in_the_agents_state_folder_is_refused(mesh_with_agents) -> None:
    mesh = mesh_with_agents(
        consumers={"app1": ["gitea"]}, port=5432, admin=None, provisioner=["true"]
    )
    state = mesh.nodes["app1"]
    before = digests(state)
    redeclare(mesh, 'file = "srv/app1/gitea/db.password"', f'file = "{state}/node.key"')
    said = push_errors(mesh)
    after = digests(state)
    assert {k: after.get(k) for k in before} == before, "the agent overwrote its own state"
    assert "state folder" in said, said
    mesh.start("app1")  # it still starts: its key and controller key are its own


def test_a_manifest_or_grants_folder_in_the_agents_state_folder_is_refused(
    mesh_with_agents,
) -> None:
    mesh = mesh_with_agents(
        consumers={"app1": ["gitea"]}, port=5432, admin=None, provisioner=["true"]
    )
    state = mesh.nodes["db1"]
    before = digests(state)
    redeclare(
        mesh,
        'receives = { database = "srv/db1/postgres/mesh.json" }\n'
        'grants = { database = "srv/db1/postgres/grants" }',
        f'receives = {{ database = "{state}/controller.pub" }}\n'
        f'grants = {{ database = "{state}" }}',
    )
    said = push_errors(mesh)
    after = digests(state)
    assert {k: after.get(k) for k in before} == before, "the agent overwrote its own state"
    assert "state folder" in said, said
    mesh.start("db1")
