"""A pair's rotation as declared: ``rotation = "overlap"`` and its ``grace`` per offer or per
requirement, stored for ``rotate``; refused, naming the kind, where the kind's login holds one
credential only and cannot alternate between two logins."""

from __future__ import annotations

from typing import Any

import pytest

from meshtui.controller.plan import declaration
from meshtui.errors import DeclarationError
from meshtui.kinds import registry
from meshtui.model import DEFAULT_GRACE_S, OVERLAP, SWAP
from tests.fix_mesh import Mesh, consumer, provider


def _redis(module_id: str = "db1/redis") -> dict[str, Any]:
    mod = provider(module_id, "cache", 6379)
    mod["provides"][0].update(kind="redis", tls=False)
    return mod


def _declared(mesh: Mesh, mods: dict[str, Any]) -> dict[str, Any]:
    decl = declaration.load(mesh.write(mesh.spec(mods)))
    return {p.id: p.rotation for p in decl.pairs}


def test_a_pair_is_a_swap_unless_declared_otherwise(mesh: Mesh) -> None:
    modes = _declared(mesh, {"db1/postgres": provider(), "app1/gitea": consumer("app1/gitea")})
    assert [(m.rotation, m.grace) for m in modes.values()] == [(SWAP, DEFAULT_GRACE_S)]


def test_overlap_on_the_offer_reaches_each_pair_and_a_requirement_overrides_it(
    mesh: Mesh,
) -> None:
    redis = _redis()
    redis["provides"][0].update(rotation="overlap", grace="30s")
    app1 = consumer("app1/gitea", "cache")
    app1["requires"][0]["values"] = {}
    app2 = consumer("app1/other", "cache")
    app2["requires"][0].update(values={}, rotation="swap")
    modes = _declared(mesh, {"db1/redis": redis, "app1/gitea": app1, "app1/other": app2})
    assert modes["cache:app1/gitea->db1/redis"].rotation == OVERLAP
    assert modes["cache:app1/gitea->db1/redis"].grace == 30.0
    assert modes["cache:app1/other->db1/redis"].rotation == SWAP


@pytest.mark.parametrize("where", ["offer", "requirement"])
def test_a_seaweedfs_overlap_needs_its_access_key_and_secret_in_one_file(
    mesh: Mesh, where: str
) -> None:
    """Its access key alternates between two of the identity's keys: an app reading the key
    from the connection file and the secret from the credential file could hold one of each."""
    s3 = provider("db1/seaweedfs", "objects", 8333)
    s3["provides"][0].update(kind="seaweedfs", tls=False)
    app = consumer("app1/gitea", "objects")
    app["requires"][0]["values"] = {}
    (s3["provides"][0] if where == "offer" else app["requires"][0])["rotation"] = "overlap"
    assert registry.can_alternate(registry.kind_of("seaweedfs"))
    path = mesh.write(mesh.spec({"db1/seaweedfs": s3, "app1/gitea": app}))
    with pytest.raises(DeclarationError) as caught:
        declaration.load(path)
    text = str(caught.value)
    assert str(path) in text and 'modules."app1/gitea".requires[0].format' in text, text
    assert 'format = "aws"' in text and 'rotation = "swap"' in text, text
    app["requires"][0]["format"] = "aws"
    modes = _declared(mesh, {"db1/seaweedfs": s3, "app1/gitea": app})
    assert [m.rotation for m in modes.values()] == [OVERLAP]


def test_postgres_rotates_by_overlap_with_two_alternating_logins(mesh: Mesh) -> None:
    pg = provider()
    pg["provides"][0]["rotation"] = "overlap"
    app = consumer("app1/gitea")
    app["requires"][0]["format"] = "pg_service"
    assert registry.can_alternate(registry.kind_of("postgres"))
    modes = _declared(mesh, {"db1/postgres": pg, "app1/gitea": app})
    assert [m.rotation for m in modes.values()] == [OVERLAP]


@pytest.mark.parametrize("connection", [False, True])
def test_an_alternating_overlap_pair_whose_file_holds_the_password_alone_is_refused(
    mesh: Mesh, connection: bool
) -> None:
    """Its login changes at every rotation: an app reading it from another file (its
    connection file) and the password from this one can hold one of each and be refused."""
    pg = provider()
    pg["provides"][0]["rotation"] = "overlap"
    app = consumer("app1/gitea")
    if connection:
        app["requires"][0]["connection"] = {"file": "/srv/app1/gitea/db.env", "format": "env"}
    path = mesh.write(mesh.spec({"db1/postgres": pg, "app1/gitea": app}))
    with pytest.raises(DeclarationError) as caught:
        declaration.load(path)
    text = str(caught.value)
    assert 'modules."app1/gitea".requires[0].format' in text, text
    assert "alternates between two logins" in text and "from one file" in text, text
    assert 'format = "pg_service"' in text and 'rotation = "swap"' in text, text


@pytest.mark.parametrize(
    ("shape", "said"),
    [
        ("ini", "'ini' is not a credential file format"),
        ("aws", "'aws' is not a credential file format for a PostgreSQL"),
    ],
)
def test_a_credential_file_format_the_kind_does_not_write_is_refused(
    mesh: Mesh, shape: str, said: str
) -> None:
    app = consumer("app1/gitea")
    app["requires"][0]["format"] = shape
    path = mesh.write(mesh.spec({"db1/postgres": provider(), "app1/gitea": app}))
    with pytest.raises(DeclarationError) as caught:
        declaration.load(path)
    text = str(caught.value)
    assert 'modules."app1/gitea".requires[0].format' in text and said in text, text


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [("rotation", "fast", "'fast' is not a rotation"), ("grace", 5, "must be a duration")],
)
def test_a_bad_rotation_or_grace_names_the_key(
    mesh: Mesh, key: str, value: object, said: str
) -> None:
    pg = provider()
    pg["provides"][0][key] = value
    path = mesh.write(mesh.spec({"db1/postgres": pg, "app1/gitea": consumer("app1/gitea")}))
    with pytest.raises(DeclarationError) as caught:
        declaration.load(path)
    assert f"provides[0].{key}" in str(caught.value) and said in str(caught.value)
