"""``kind`` in the declaration and the manifest: Redis providers, their values, clear errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from meshtui.contracts.manifest_reader import parse_manifest
from meshtui.controller.plan import declaration
from meshtui.errors import DeclarationError, ManifestError
from tests.fix_mesh import Mesh, consumer, provider


def redis_spec(mesh: Mesh, **offer: Any) -> dict[str, Any]:
    cache = provider("db1/redis", "cache", 6379)
    cache["provides"][0].update({"kind": "redis", "ca": "ca.pem", **offer})
    cache["admin"] = "srv/db1/redis/admin.url"
    wiki = consumer("app2/wiki", "cache")
    wiki["requires"][0]["values"] = {"keys": "wiki:*"}
    mods = {
        "db1/postgres": provider(),
        "db1/redis": cache,
        "app1/gitea": consumer("app1/gitea", "database"),
        "app2/wiki": wiki,
    }
    return mesh.spec(mods)


def test_kind_is_postgres_by_default_and_redis_when_said(mesh: Mesh) -> None:
    decl = declaration.load(mesh.write(redis_spec(mesh)))
    offers = {m.id: m.provides[0] for m in decl.modules.values() if m.provides}
    assert offers["db1/postgres"].kind == "postgres" and offers["db1/postgres"].ca is None
    assert offers["db1/redis"].kind == "redis"
    assert offers["db1/redis"].ca is not None and offers["db1/redis"].ca.endswith("/ca.pem")
    assert [p.id for p in decl.pairs] == [
        "cache:app2/wiki->db1/redis",
        "database:app1/gitea->db1/postgres",
    ]


@pytest.mark.parametrize(
    ("change", "key", "words"),
    [
        ({"kind": "mongodb"}, "provides[0].kind", "not a provider kind"),
        ({"ca": None}, "provides[0].ca", "needs the CA"),
        ({"tls": "yes"}, "provides[0].tls", "true or false"),
        ({"tls": False}, "provides[0].ca", "not used with tls = false"),
    ],
)
def test_bad_redis_offers_name_the_key(
    mesh: Mesh, change: dict[str, Any], key: str, words: str
) -> None:
    spec = redis_spec(mesh)
    offer = spec["modules"]["db1/redis"]["provides"][0]
    for k, v in change.items():
        if v is None:
            offer.pop(k)
        else:
            offer[k] = v
    with pytest.raises(DeclarationError) as info:
        declaration.load(mesh.write(spec))
    assert f'modules."db1/redis".{key}' in str(info.value) and words in str(info.value)


def test_plain_text_redis_needs_no_ca(mesh: Mesh) -> None:
    spec = redis_spec(mesh, tls=False)
    spec["modules"]["db1/redis"]["provides"][0].pop("ca")
    decl = declaration.load(mesh.write(spec))
    assert decl.modules["db1/redis"].provides[0].tls is False


def test_ca_on_a_postgres_provider_is_refused(mesh: Mesh) -> None:
    spec = redis_spec(mesh)
    spec["modules"]["db1/postgres"]["provides"][0]["ca"] = "ca.pem"
    with pytest.raises(DeclarationError, match=r'provides\[0\]\.ca: is only for kind = "redis"'):
        declaration.load(mesh.write(spec))


@pytest.mark.parametrize(
    ("values", "words"),
    [
        ({"database": "wiki"}, "unknown values database"),
        ({"commands": "+@admin"}, "never granted"),
        ({"commands": "+@all"}, "never granted"),
        ({"commands": "read"}, "not an ACL category rule"),
        ({"keys": "a b\tc"}, "patterns are separated"),
        ({"channels": "news.(x)"}, "parenthesis"),
    ],
)
def test_redis_values_are_checked_at_declare(
    mesh: Mesh, values: dict[str, str], words: str
) -> None:
    spec = redis_spec(mesh)
    spec["modules"]["app2/wiki"]["requires"][0]["values"] = values
    with pytest.raises(DeclarationError) as info:
        declaration.load(mesh.write(spec))
    assert 'modules."app2/wiki".requires[0].values' in str(info.value)
    assert words in str(info.value) and "db1/redis is a Redis" in str(info.value)


def test_redis_admin_is_required_with_its_own_words(mesh: Mesh) -> None:
    spec = redis_spec(mesh)
    del spec["modules"]["db1/redis"]["admin"]
    with pytest.raises(DeclarationError, match="Redis URL"):
        declaration.load(mesh.write(spec))


def _manifest(**top: Any) -> bytes:
    doc = {"version": 1, "provision": "cache", "provider": "db1/redis", "serial": 1}
    return json.dumps({**doc, "consumers": [], **top}).encode()


def test_manifest_carries_the_kind() -> None:
    assert parse_manifest(_manifest(), Path("m.json")).kind == "postgres"
    assert parse_manifest(_manifest(kind="redis"), Path("m.json")).kind == "redis"
    with pytest.raises(ManifestError, match=r"m.json: kind: is 'mongodb'"):
        parse_manifest(_manifest(kind="mongodb"), Path("m.json"))
