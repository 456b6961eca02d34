"""``pin`` on the way from the declaration to the manifest: declared on a provider module, kept in
its spec, handed to the provider's agent, read by the provisioner; anything else is an error
naming the file and the module."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from meshtui.contracts.manifest_reader import parse_manifest
from meshtui.controller.core import Controller
from meshtui.controller.plan import declaration
from meshtui.controller.plan.planner import Planner
from meshtui.errors import DeclarationError, ManifestError
from tests.fix_mesh import MeshFactory, modules


def _declared(mesh_factory: MeshFactory, pin: object) -> Path:
    mesh = mesh_factory()
    mods = modules(["app1/gitea"])
    mods["db1/postgres"]["pin"] = pin
    return mesh.write(mesh.spec(mods))


def test_pin_true_reaches_the_module_and_the_provider_delivery(
    mesh_factory: MeshFactory,
) -> None:
    path = _declared(mesh_factory, True)
    decl = declaration.load(path)
    assert decl.modules["db1/postgres"].pin is True
    assert decl.modules["app1/gitea"].pin is False
    state = path.parent / "state"
    with Controller.open(state) as ctl:
        ctl.declare(path)
        sets = Planner(ctl.inventory).provider_sets([("db1/postgres", "database")], {})
    assert sets["db1"][0]["pin"] is True


def test_no_pin_keeps_the_module_spec_as_it_was(mesh_factory: MeshFactory) -> None:
    mesh = mesh_factory()
    path = mesh.write(mesh.spec(modules(["app1/gitea"])))
    with Controller.open(mesh.state) as ctl:
        ctl.declare(path)
        sets = Planner(ctl.inventory).provider_sets([("db1/postgres", "database")], {})
        stored = ctl.inventory.module_records()["db1/postgres"]["spec"]
    assert '"pin"' not in stored  # an inventory declared before pin existed stays equal
    assert sets["db1"][0]["pin"] is False


@pytest.mark.parametrize("value", ["yes", 1, "true"])
def test_pin_that_is_not_a_boolean_is_an_error_naming_file_and_module(
    mesh_factory: MeshFactory, value: object
) -> None:
    path = _declared(mesh_factory, value)
    with pytest.raises(DeclarationError) as caught:
        declaration.load(path)
    assert caught.value.file == str(path)
    assert caught.value.key == 'modules."db1/postgres".pin'
    assert "true or false" in str(caught.value)


def test_pin_on_a_module_that_provides_nothing_is_an_error(mesh_factory: MeshFactory) -> None:
    mesh = mesh_factory()
    mods = modules(["app1/gitea"])
    mods["app1/gitea"]["pin"] = True
    with pytest.raises(DeclarationError) as caught:
        declaration.load(mesh.write(mesh.spec(mods)))
    assert caught.value.key == 'modules."app1/gitea".pin'
    assert "provides nothing" in str(caught.value)


def _manifest(**top: object) -> bytes:
    doc = {"version": 1, "provision": "database", "provider": "db1/postgres", "serial": 1}
    return json.dumps({**doc, "consumers": [], **top}).encode()


def test_the_manifest_reads_pin() -> None:
    where = Path("/srv/db1/postgres/mesh.json")
    assert parse_manifest(_manifest(pin=True), where).pin is True
    assert parse_manifest(_manifest(), where).pin is False
    with pytest.raises(ManifestError, match=r"mesh.json: pin: must be a bool"):
        parse_manifest(_manifest(pin="yes"), where)
