"""The declaration: resolution rules, and errors that name the file, the key and the fix."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from meshtui.controller.plan import declaration
from meshtui.controller.plan.naming import derive_login
from meshtui.errors import DeclarationError
from tests.fix_mesh import Mesh, consumer, modules, provider

Spec = dict[str, Any]
Case = Callable[[Mesh, Spec], str]  # mutates the spec, returns text to append verbatim


def good_spec(mesh: Mesh) -> Spec:
    return mesh.spec(modules(["app1/gitea", "app1/wiki", "app2/gitea"]))


def colliding_module_names(node: str) -> tuple[str, str]:
    """Two module names on ``node`` that fold to the same text and share a login."""
    seen: dict[str, str] = {}
    for seps in itertools.product("-_", repeat=14):
        name = "a" + "".join(s + c for s, c in zip(seps, "bcdefghijklmno", strict=True))
        login = derive_login(node, name)
        if login in seen:
            return seen[login], name
        seen[login] = name
    raise AssertionError("no collision found")


# ---------------------------------------------------------------------------- resolution


def test_requires_resolves_to_the_only_provider_without_from(mesh: Mesh) -> None:
    decl = declaration.load(mesh.write(good_spec(mesh)))
    assert [p.id for p in decl.pairs] == [
        "database:app1/gitea->db1/postgres",
        "database:app1/wiki->db1/postgres",
        "database:app2/gitea->db1/postgres",
    ]
    assert {p.port for p in decl.pairs} == {5432}
    assert len({p.login for p in decl.pairs}) == 3


def test_from_picks_one_of_several_providers(mesh: Mesh) -> None:
    mods = modules([]) | {"app2/pg": provider("app2/pg", port=5433)}
    mods["app1/gitea"] = consumer("app1/gitea", source="app2/pg")
    mods["app1/wiki"] = consumer("app1/wiki", source="db1/postgres")
    decl = declaration.load(mesh.write(mesh.spec(mods)))
    by_id = {p.id: p for p in decl.pairs}
    assert by_id["database:app1/gitea->app2/pg"].port == 5433
    assert by_id["database:app1/wiki->db1/postgres"].port == 5432
    assert len(decl.pairs) == 2


def test_credential_file_owner_group_and_mode_reach_the_pair(mesh: Mesh) -> None:
    spec = good_spec(mesh)
    spec["modules"]["app1/gitea"]["requires"][0].update(owner="git", group="git", mode="0640")
    decl = declaration.load(mesh.write(spec))
    by_id = {p.id: p for p in decl.pairs}
    gitea = by_id["database:app1/gitea->db1/postgres"]
    assert (gitea.owner, gitea.group, gitea.mode) == ("git", "git", "0640")
    wiki = by_id["database:app1/wiki->db1/postgres"]
    assert (wiki.owner, wiki.group, wiki.mode) == (None, None, "0600")


def test_from_is_allowed_with_a_single_provider(mesh: Mesh) -> None:
    mods = modules([])
    mods["app1/gitea"] = consumer("app1/gitea", source="db1/postgres")
    (pair,) = declaration.load(mesh.write(mesh.spec(mods))).pairs
    assert pair.provider == "db1/postgres"


def test_relative_paths_are_taken_from_the_declaration_folder(mesh: Mesh) -> None:
    mods = modules([])
    mods["app1/gitea"] = consumer("app1/gitea", file="creds/gitea.password")
    path = mesh.write(mesh.spec(mods))
    decl = declaration.load(path)
    assert decl.pairs[0].file == str((mesh.root / "creds/gitea.password").resolve())
    assert decl.modules["db1/postgres"].receives["database"] == str(
        (mesh.root / "srv/db1/postgres/mesh.json").resolve()
    )


def test_node_keys_come_from_the_pub_file(mesh: Mesh) -> None:
    decl = declaration.load(mesh.write(good_spec(mesh)))
    pub = mesh.keys("app1").public()
    assert decl.nodes["app1"].seal_key == pub.seal
    assert decl.nodes["app1"].verify_key == pub.verify


# ---------------------------------------------------------------------------- errors


def _unknown_node_in_from(mesh: Mesh, spec: Spec) -> str:
    spec["modules"]["app1/gitea"] = consumer("app1/gitea", source="db9/postgres")
    return ""


def _module_on_undeclared_node(mesh: Mesh, spec: Spec) -> str:
    spec["modules"]["db9/cache"] = consumer("db9/cache")
    return ""


def _nobody_provides(mesh: Mesh, spec: Spec) -> str:
    spec["modules"]["app1/gitea"] = consumer("app1/gitea", "cache")
    return ""


def _ambiguous(mesh: Mesh, spec: Spec) -> str:
    spec["modules"]["app2/pg"] = provider("app2/pg")
    return ""


def _from_not_a_provider(mesh: Mesh, spec: Spec) -> str:
    spec["modules"]["app1/gitea"] = consumer("app1/gitea", source="app1/wiki")
    return ""


def _duplicate_module(mesh: Mesh, spec: Spec) -> str:
    return '\n[modules."app1/gitea"]\nrequires = []\n'


def _duplicate_node(mesh: Mesh, spec: Spec) -> str:
    return '\n[nodes.app1]\naddress = "10.0.0.9"\n'


def _node_without_keys(mesh: Mesh, spec: Spec) -> str:
    del spec["nodes"]["app1"]["keys"]
    return ""


def _missing_key_file(mesh: Mesh, spec: Spec) -> str:
    spec["nodes"]["app1"]["keys"] = "nodes/app1/missing.pub"
    return ""


def _garbage_key_file(mesh: Mesh, spec: Spec) -> str:
    (mesh.root / "garbage.pub").write_text("seal = 'not base64!'\nverify = 3\n")
    spec["nodes"]["app1"]["keys"] = "garbage.pub"
    return ""


def _key_file_is_a_folder(mesh: Mesh, spec: Spec) -> str:
    spec["nodes"]["app1"]["keys"] = "nodes/app1"
    return ""


def _controller_pub_as_node_keys(mesh: Mesh, spec: Spec) -> str:
    spec["nodes"]["app1"]["keys"] = "state/controller.pub"
    return ""


def _login_collision(mesh: Mesh, spec: Spec) -> str:
    a, b = colliding_module_names("app1")
    spec["modules"][f"app1/{a}"] = consumer(f"app1/{a}")
    spec["modules"][f"app1/{b}"] = consumer(f"app1/{b}")
    return ""


def _shared_file(mesh: Mesh, spec: Spec) -> str:
    spec["modules"]["app1/wiki"] = consumer("app1/wiki", file="/srv/app1/gitea/database.password")
    return ""


def _typo_top(mesh: Mesh, spec: Spec) -> str:
    spec["node"] = {"x": {"address": "10.0.0.1"}}
    return ""


def _typo_node(mesh: Mesh, spec: Spec) -> str:
    spec["nodes"]["app1"]["adress"] = spec["nodes"]["app1"].pop("address")
    return ""


def _typo_module(mesh: Mesh, spec: Spec) -> str:
    spec["modules"]["app1/gitea"]["require"] = spec["modules"]["app1/gitea"].pop("requires")
    return ""


def _typo_requirement(mesh: Mesh, spec: Spec) -> str:
    spec["modules"]["app1/gitea"]["requires"][0]["fiel"] = "/x"
    return ""


def _typo_provides(mesh: Mesh, spec: Spec) -> str:
    spec["modules"]["db1/postgres"]["provides"][0]["prot"] = 5432
    return ""


def _port(value: Any) -> Case:
    def case(mesh: Mesh, spec: Spec) -> str:
        offer = spec["modules"]["db1/postgres"]["provides"][0]
        if value is None:
            del offer["port"]
        else:
            offer["port"] = value
        return ""

    return case


def _address(value: str) -> Case:
    def case(mesh: Mesh, spec: Spec) -> str:
        spec["nodes"]["app2"]["address"] = value
        return ""

    return case


def _agent(value: str) -> Case:
    def case(mesh: Mesh, spec: Spec) -> str:
        spec["nodes"]["app2"]["agent"] = value
        return ""

    return case


def _bad_module_name(mesh: Mesh, spec: Spec) -> str:
    spec["modules"]["app1/bad[b]name"] = consumer("app1/bad[b]name")
    return ""


def _provided_twice(mesh: Mesh, spec: Spec) -> str:
    offers = spec["modules"]["db1/postgres"]["provides"]
    offers.append({"name": "database", "port": 5433})
    return ""


def _file_access(**given: str) -> Case:
    def case(mesh: Mesh, spec: Spec) -> str:
        spec["modules"]["app1/gitea"]["requires"][0].update(given)
        return ""

    return case


LONG = "n" * 70


def _long_node_name(mesh: Mesh, spec: Spec) -> str:
    spec["nodes"][LONG] = dict(spec["nodes"]["app2"])
    return ""


def _self_requirement(mesh: Mesh, spec: Spec) -> str:
    spec["modules"]["db1/postgres"]["requires"] = [
        {"name": "database", "file": "/srv/self.password"}
    ]
    return ""


ERRORS: list[tuple[str, Case, list[str]]] = [
    (
        "unknown node",
        _unknown_node_in_from,
        ['modules."app1/gitea".requires[0].from', "db9/postgres", "name a provider"],
    ),
    (
        "module on an undeclared node",
        _module_on_undeclared_node,
        ['modules."db9/cache"', "undeclared node 'db9'", "add [nodes.db9]"],
    ),
    (
        "requirement nobody provides",
        _nobody_provides,
        ['modules."app1/gitea".requires[0]', "nobody provides 'cache'", 'name = "cache"'],
    ),
    (
        "ambiguous provider",
        _ambiguous,
        ["requires[0]", "app2/pg", "db1/postgres", "several", "from = "],
    ),
    (
        "from names a module that does not provide it",
        _from_not_a_provider,
        ['modules."app1/gitea".requires[0].from', "app1/wiki does not provide"],
    ),
    (
        "duplicate module",
        _duplicate_module,
        ['modules."app1/gitea"', "twice", "merge"],
    ),
    ("duplicate node", _duplicate_node, ["nodes.app1", "twice", "merge"]),
    ("node without keys", _node_without_keys, ["nodes.app1.keys", "no keys", "host init"]),
    (
        "missing key file",
        _missing_key_file,
        ["nodes.app1.keys", "missing.pub", "cannot read", "node.pub"],
    ),
    ("garbage key file", _garbage_key_file, ["nodes.app1.keys", "garbage.pub", "node.pub"]),
    ("key file is a folder", _key_file_is_a_folder, ["nodes.app1.keys", "cannot read"]),
    (
        "controller key as node key",
        _controller_pub_as_node_keys,
        ["nodes.app1.keys", "controller.pub", "seal", "host init"],
    ),
    ("login collision", _login_collision, ["requires[0]", "login", "rename one of the modules"]),
    (
        "one module provides the same thing twice",
        _provided_twice,
        ['modules."db1/postgres".provides[1].name', "twice", "one entry per provision"],
    ),
    ("two requirements share a file", _shared_file, ["requires[0].file", "own file"]),
    (
        "credential mode for other users",
        _file_access(mode="0644"),
        ['modules."app1/gitea".requires[0].mode', "/srv/app1/gitea/", "every user", "0640"],
    ),
    ("credential mode 0604", _file_access(mode="0604"), ["requires[0].mode", "every user"]),
    ("credential mode set-uid", _file_access(mode="4600"), ["requires[0].mode", "not a file mode"]),
    (
        "credential mode as digits",
        _file_access(mode="640x"),
        ["requires[0].mode", "not a file mode"],
    ),
    ("credential mode owner blind", _file_access(mode="0040"), ["requires[0].mode", "owner read"]),
    ("credential owner", _file_access(owner="git:git"), ["requires[0].owner", "not a user name"]),
    ("credential group", _file_access(group="a b"), ["requires[0].group", "not a group name"]),
    ("typo at the top", _typo_top, ["(top level).node", "not a known key", "nodes"]),
    ("typo in a node", _typo_node, ["nodes.app1.adress", "not a known key", "address"]),
    ("typo in a module", _typo_module, ['modules."app1/gitea".require', "requires"]),
    ("typo in a requirement", _typo_requirement, ["requires[0].fiel", "file"]),
    ("typo in provides", _typo_provides, ["provides[0].prot", "port"]),
    ("port 0", _port(0), ["provides[0].port", "1-65535"]),
    ("port 70000", _port(70000), ["provides[0].port", "1-65535"]),
    ("port as text", _port("5432"), ["provides[0].port", "1-65535"]),
    ("port as bool", _port(True), ["provides[0].port", "1-65535"]),
    ("port missing", _port(None), ["provides[0].port", "1-65535"]),
    ("bad address", _address("10.213.0.300"), ["nodes.app2.address", "10.213.0.300", "address"]),
    ("host name as address", _address("db1.local"), ["nodes.app2.address", "db1.local"]),
    ("empty address", _address(""), ["nodes.app2.address", "non-empty"]),
    # an agent URL's host and path reach the request line and host header as they are
    ("agent URL with a space", _agent("http://10.0.0.2:1/a b"), ["nodes.app2.agent", "ASCII"]),
    ("agent URL with CR LF", _agent("http://10.0.0.2:1/\r\nx: 1"), ["nodes.app2.agent"]),
    ("agent URL non-ASCII", _agent("http://10.0.0.2:1/\u00e9"), ["nodes.app2.agent", "encode"]),
    ("bad module name", _bad_module_name, ['modules."app1/bad[b]name"', "bad[b]name", "1-32"]),
    ("70-character node name", _long_node_name, [f"nodes.{LONG}", "1-32"]),
    ("module requires itself", _self_requirement, ['modules."db1/postgres".requires[0]', "itself"]),
]


@pytest.mark.parametrize(
    ("case", "expected"), [(c, e) for _, c, e in ERRORS], ids=[n for n, _, _ in ERRORS]
)
def test_bad_declaration_exits_2_names_file_key_fix_and_changes_nothing(
    mesh: Mesh, case: Case, expected: list[str]
) -> None:
    assert mesh.cli("declare", mesh.write(good_spec(mesh))).code == 0
    before = mesh.tables()
    spec = good_spec(mesh)
    extra = case(mesh, spec)
    path = mesh.write(spec, "bad.toml", extra)
    res = mesh.cli("declare", path)
    assert res.code == 2, (res.out, res.err)
    assert res.out == ""
    assert res.err.startswith(f"meshtui: {path}: "), res.err
    assert res.err.count("\n") == 1, "one line, no traceback"
    for text in expected:
        assert text in res.err, f"{text!r} not in {res.err!r}"
    assert mesh.tables() == before
    with pytest.raises(DeclarationError):
        declaration.load(path)


def test_unreadable_declaration_exits_2(mesh: Mesh, tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    res = mesh.cli("declare", missing)
    assert res.code == 2 and str(missing) in res.err and "cannot read" in res.err
    latin = tmp_path / "latin.toml"
    latin.write_bytes(b'[nodes.x]\naddress = "caf\xe9"\n')
    res = mesh.cli("declare", latin)
    assert res.code == 2 and str(latin) in res.err and "UTF-8" in res.err


def test_errors_carry_file_key_and_fix_fields(mesh: Mesh) -> None:
    spec = good_spec(mesh)
    _node_without_keys(mesh, spec)
    path = mesh.write(spec)
    with pytest.raises(DeclarationError) as info:
        declaration.load(path)
    assert info.value.file == str(path)
    assert info.value.key == "nodes.app1.keys"
    assert "host init" in info.value.fix


@pytest.mark.parametrize(
    ("raw", "stored"),
    [
        ("/etc/gitea/db.password", "/etc/gitea/db.password"),
        ("/etc//gitea/./db.password", "/etc/gitea/db.password"),
        ("/etc/gitea/", "/etc/gitea"),
    ],
)
def test_absolute_paths_are_kept_in_normal_form(mesh: Mesh, raw: str, stored: str) -> None:
    mods = modules([])
    mods["app1/gitea"] = consumer("app1/gitea", file=raw)
    (pair,) = declaration.load(mesh.write(mesh.spec(mods))).pairs
    assert pair.file == stored


@pytest.mark.parametrize("raw", ["/etc/../gitea/x", "srv/../../etc/x", ".."])
def test_paths_that_climb_with_dotdot_are_refused(mesh: Mesh, raw: str) -> None:
    mods = modules([])
    mods["app1/gitea"] = consumer("app1/gitea", file=raw)
    with pytest.raises(DeclarationError) as err:
        declaration.load(mesh.write(mesh.spec(mods)))
    assert "'..'" in str(err.value) and "requires[0].file" in str(err.value)
