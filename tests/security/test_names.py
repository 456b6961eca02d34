"""Attack: names and addresses that carry a line break or a pg_hba token into the mesh.

``$`` in a regular expression also matches before a trailing newline, so "database\\n" passed as
a plain name; Python takes any text after '%' as an IPv6 scope id, so an address could carry a
tab and a '#'. Both reach file names, manifests and pg_hba.conf; the declaration refuses them.
"""

from __future__ import annotations

import pytest

from meshtui.controller.plan import declaration
from meshtui.errors import DeclarationError
from tests.fix_mesh import MeshFactory, consumer, provider


def test_a_provision_name_with_a_trailing_newline_is_refused(mesh_factory: MeshFactory) -> None:
    mesh = mesh_factory()
    spec = mesh.spec(
        {
            "db1/postgres": provider(provision="database\n"),
            "app1/gitea": consumer("app1/gitea", "database\n"),
        }
    )
    with pytest.raises(DeclarationError, match="not allowed"):
        declaration.load(mesh.write(spec))


def test_a_node_name_with_a_trailing_newline_is_refused(mesh_factory: MeshFactory) -> None:
    mesh = mesh_factory()
    spec = mesh.spec({"db1/postgres": provider(), "app1/gitea": consumer("app1/gitea")})
    spec["nodes"]["app1\n"] = spec["nodes"]["app1"]
    with pytest.raises(DeclarationError, match="not allowed"):
        declaration.load(mesh.write(spec))


@pytest.mark.parametrize("address", ["::1%lo\t::\ttrust#", "fe80::1%eth0"])
def test_an_address_with_a_scope_id_is_refused(mesh_factory: MeshFactory, address: str) -> None:
    mesh = mesh_factory()
    spec = mesh.spec({"db1/postgres": provider(), "app1/gitea": consumer("app1/gitea")})
    spec["nodes"]["app1"]["address"] = address
    with pytest.raises(DeclarationError, match="nodes.app1.address"):
        declaration.load(mesh.write(spec))


@pytest.mark.parametrize(
    ("where", "why"),
    [
        ("srv/db1/postgres/mesh.json", "manifest"),
        ("srv/db1/postgres/grants/app1.gitea.secret", "grants folder"),
        ("srv/db1/postgres/grants/sub/x.password", "grants folder"),
        ("srv/db1/postgres/admin.conninfo", "admin"),
    ],
)
def test_a_credential_file_over_a_providers_files_is_refused(
    mesh_factory: MeshFactory, where: str, why: str
) -> None:
    """A consumer on the provider's node whose credential file is the provider's manifest, a
    file in its grants folder (where the agent also deletes stale secrets) or its admin file:
    one delivery would overwrite the other's file, or the provider would delete the credential."""
    mesh = mesh_factory()
    spec = mesh.spec({"db1/postgres": provider(), "db1/backup": consumer("db1/backup", file=where)})
    path = mesh.write(spec)
    with pytest.raises(DeclarationError, match=why):
        declaration.load(path)
