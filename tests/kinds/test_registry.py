"""The registry of provider kinds: every record loads, a name becomes a kind in one place, and an
unknown kind is refused at ``declare`` naming the known ones."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest

from meshtui.contracts.adapter import Capabilities
from meshtui.contracts.manifest_reader import parse_manifest
from meshtui.contracts.probe_types import ProbeOptions, ProbeTarget
from meshtui.controller.plan import declaration
from meshtui.errors import DeclarationError, ManifestError, UnknownKindError
from meshtui.kinds import registry
from meshtui.kinds.kind import DEFAULT_KIND, Kind
from tests.fix_mesh import Mesh, provider


@pytest.mark.parametrize("name", registry.NAMES)
def test_every_reference_of_every_kind_loads(name: str) -> None:
    kind = registry.KINDS[name]
    assert isinstance(kind, Kind) and kind.name == name
    refs = kind.refs()
    assert {"adapter", "probe", "lab"} <= set(refs)
    for field, ref in refs.items():
        assert ref.load() is not None, f"{name}: {field} = {ref} does not load"
    probe = refs["probe"].load()
    assert list(inspect.signature(probe).parameters) == ["target", "options"], (
        f"{name}: the probe must take (target: ProbeTarget, options: ProbeOptions)"
    )
    assert ProbeTarget.__name__ in str(inspect.signature(probe))
    assert ProbeOptions.__name__ in str(inspect.signature(probe))


def declared_and_implemented(adapter: type) -> tuple[Capabilities, Capabilities]:
    """An adapter class's declared capabilities, and the ones its methods say it has."""
    has = Capabilities(
        batching=callable(getattr(adapter, "create_many", None)),
        narrowing=callable(getattr(adapter, "inspect_only", None)),
        deciding=bool(getattr(adapter, "create_decides", False)),
        limited=hasattr(adapter, "limits"),
        catching_up=callable(getattr(adapter, "catch_up", None)),
        live_sessions=callable(getattr(adapter, "end_sessions", None))
        and callable(getattr(adapter, "count_sessions", None)),
        overlapping=callable(getattr(adapter, "create_keeping", None)),
        alternating=callable(getattr(adapter, "create_alternate", None)),
    )
    return adapter.capabilities, has  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", registry.NAMES)
def test_every_adapter_declares_exactly_what_it_implements(name: str) -> None:
    declared, has = declared_and_implemented(registry.KINDS[name].adapter.load())
    assert declared == has, f"{name}: declares {declared}, implements {has}"


def test_a_declaration_that_overstates_is_caught() -> None:
    class Overstated:
        capabilities = Capabilities(batching=True)

    declared, has = declared_and_implemented(Overstated)
    assert declared != has


def test_an_omitted_kind_is_the_default_and_the_default_is_stored_as_omitted() -> None:
    assert registry.kind_of(None).name == DEFAULT_KIND == "postgres"
    assert registry.stored_name(DEFAULT_KIND) is None
    for name in registry.NAMES:
        assert registry.kind_of(name).name == name
        assert registry.kind_of(registry.stored_name(name)).name == name


@pytest.mark.parametrize("name", ["mongodb", "", "Postgres", 5])
def test_an_unknown_kind_names_the_known_ones(name: object) -> None:
    with pytest.raises(UnknownKindError) as caught:
        registry.kind_of(name)
    for known in registry.NAMES:
        assert known in str(caught.value)


def test_declare_refuses_an_unknown_kind_naming_file_key_and_the_known_kinds(mesh: Mesh) -> None:
    mod = provider()
    mod["provides"][0]["kind"] = "mongodb"
    path = mesh.write(mesh.spec({"db1/postgres": mod}))
    with pytest.raises(DeclarationError) as caught:
        declaration.load(path)
    text = str(caught.value)
    assert str(path) in text and "provides[0].kind" in text and "'mongodb'" in text
    assert all(f'"{k}"' in text for k in registry.NAMES), text


def test_a_manifest_of_an_unknown_kind_is_broken() -> None:
    doc = {"version": 1, "kind": "mongodb", "provision": "p", "provider": "db1/x", "serial": 1}
    data = json.dumps({**doc, "consumers": []}).encode()
    with pytest.raises(ManifestError, match=", ".join(registry.NAMES)):
        parse_manifest(data, Path("m.json"))
