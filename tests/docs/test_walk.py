"""The real-mesh walk (docs/real-mesh.md) runs as written: its steps, the units and MESHTUI_STATE
name one state folder and one installed program, and the provision unit reads the declaration's
paths. (Every TOML block of the manual is parsed by tests/docs/test_examples.py.)"""

from __future__ import annotations

import configparser
import re
import tomllib
from pathlib import Path

import pytest

from meshtui.contracts.server_config import PLACEHOLDERS
from meshtui.errors import PolicyRefusal
from meshtui.model import Declaration

ROOT = Path(__file__).parents[2]
WALK = (ROOT / "docs" / "real-mesh.md").read_text()
BLOCKS = re.findall(r"^```toml\n(.*?)^```", WALK, flags=re.M | re.S)


def test_an_inline_table_over_two_lines_is_named_with_the_fix(tmp_path: Path) -> None:
    from meshtui.controller.plan.declaration import load
    from meshtui.errors import DeclarationError

    path = tmp_path / "mesh.toml"
    path.write_text(
        '[modules."app1/gitea"]\n'
        'requires = [{ name = "database", values = { database = "gitea" },\n'
        '              file = "/etc/gitea/db.password" }]\n'
    )
    with pytest.raises(DeclarationError) as caught:
        load(path)
    assert "line 2 opens an inline table" in str(caught.value)
    assert "on one line" in str(caught.value)


def _service(name: str) -> configparser.SectionProxy:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string((ROOT / "contrib" / "systemd" / name).read_text())
    return parser["Service"]


def test_install_names_our_distribution_and_the_units_run_it() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    name, version = pyproject["name"], pyproject["version"]
    assert name != "meshtui"  # PyPI's meshtui is another program
    wheel = f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    assert f"/opt/meshtui/bin/pip install ./{wheel}" in WALK
    assert "pip install meshtui`" not in WALK.replace("**Not** `pip install meshtui`", "")
    for unit in ("meshtui-agent.service", "meshtui-watch.service", "meshtui-provision@.service"):
        assert _service(unit)["ExecStart"].startswith("/opt/meshtui/bin/meshtui "), unit


def test_one_state_folder_in_the_walk_and_the_watch_unit() -> None:
    env = _service("meshtui-watch.service")["Environment"]
    state = env.removeprefix("MESHTUI_STATE=")
    assert _service("meshtui-watch.service")["User"] == "meshtui"
    assert f"MESHTUI_STATE={state}" in WALK and f"-d -o meshtui -g meshtui -m 0700 {state}" in WALK
    assert "--state /var/lib/meshtui init" not in WALK


def test_the_provision_unit_reads_the_declarations_paths() -> None:
    decl = next(
        tomllib.loads(b) for b in BLOCKS if "db1/postgres" in tomllib.loads(b).get("modules", {})
    )
    module = decl["modules"]["db1/postgres"]
    manifest, admin = module["receives"]["database"], module["admin"]
    start = _service("meshtui-provision@.service")["ExecStart"]
    instance = "db1/postgres"  # %I: the instance name unescaped (systemd-escape --path)
    assert f"--manifest {manifest}" in start.replace("%I", instance)
    assert f"--admin {admin}" in start.replace("%I", instance)


def _block(language: str, holding: str) -> str:
    found = [
        b
        for b in re.findall(rf"^```{language}\n(.*?)^```", WALK, flags=re.M | re.S)
        if holding in b
    ]
    assert len(found) == 1, (language, holding, len(found))
    return found[0]


def _outs() -> dict[str, str]:
    """Each ``--out`` folder of the walk and the kind whose configuration was written there."""
    found = re.findall(r"^meshtui kind config (\S+) --out (\S+)", WALK, flags=re.M)
    # each written once: a second --out into the same folder is refused
    assert len({folder for _, folder in found}) == len(found), found
    return {folder: kind for kind, folder in found}


def test_the_walk_takes_every_kinds_server_configuration_from_meshtui() -> None:
    """No server's configuration is pasted: each comes from ``meshtui kind config``."""
    from meshtui.kinds import registry

    assert sorted(set(_outs().values())) == sorted(registry.KINDS)
    for pasted in ('path "auth/approle/role"', "tls-port 6379", "-s3.port=8333", "[grpc.master]",
                   "CREATE ROLE", "~* &* +@all"):  # fmt: skip
        assert pasted not in WALK, pasted


def test_every_file_the_walk_installs_is_printed_and_goes_where_its_heading_says() -> None:
    from meshtui.cli.kind import recipe_of

    used = 0
    for folder, kind in _outs().items():
        recipe = recipe_of(kind)
        config = recipe.build(recipe.default)
        printed = {f.name: f for f in config.files}
        for name, rest in re.findall(rf"{re.escape(folder)}/([\w.-]+)(.*)$", WALK, flags=re.M):
            assert name in printed, (kind, name)
            used += 1
            dest = rest.split()[0] if rest.split() else ""
            if dest.startswith("/") and not dest.startswith(folder):
                assert dest == printed[name].path, (kind, name, dest)
        for name, item in printed.items():  # every file of it is used, or made by a step
            if any(item.path in step for step in config.steps if "token create" in step):
                continue
            assert f"{folder}/{name}" in WALK, (kind, name)
            if item.secret:  # a placeholder: the walk fills it without argv
                holder = next(p for p in PLACEHOLDERS if p in item.text)
                assert holder in WALK or "$EDITOR" in WALK, (kind, name)
    assert used >= 12


def test_the_walk_runs_what_each_kind_says_to_run_once() -> None:
    from meshtui.cli.kind import recipe_of

    for kind in ("redis",):
        recipe = recipe_of(kind)
        for step in recipe.build(recipe.default).steps:
            assert step in WALK, (kind, step)
    bao = recipe_of("openbao")
    printed = bao.build(bao.default)
    assert "-period=768h" in " ".join(printed.steps)
    assert any("auth/token/renew-self" in line for line in printed.expires)
    assert "auth/token/renew-self" in WALK and "BAO_TOKEN" not in WALK  # never in an environment


def _walk_declaration(tmp_path: Path) -> Declaration:
    from meshtui.controller.plan.declaration import parse
    from meshtui.crypto import PrivateKeys, write_keys

    text = next(b for b in BLOCKS if "[nodes.db1]" in b)
    for name in tomllib.loads(text)["nodes"]:
        write_keys(tmp_path / "keys", name, PrivateKeys.generate(node=True))
    return parse(text, tmp_path / "mesh.toml")


def test_each_nodes_policy_in_the_walk_allows_what_the_walks_declaration_asks_of_it(
    tmp_path: Path,
) -> None:
    """What `meshtui doctor` would ask each node, asked of the walk's own policies: nothing of
    the walk's declaration is refused (every kind, every file, owner, group, reload, admin)."""
    from meshtui.host.policy import node_policy
    from meshtui.host.policy.node_policy import ConsumerAsk, ProviderAsk
    from meshtui.kinds import registry

    policies = {}
    for text in (b for b in BLOCKS if b.startswith("# ") and "policy.toml" in b.splitlines()[0]):
        node = text.split(":", 1)[0].removeprefix("# ")
        node_policy.write(tmp_path / node, text)
        policies[node] = node_policy.load(tmp_path / node, node)
    assert set(policies) == {"db1", "app1", "app2"}
    declared = _walk_declaration(tmp_path / "decl")
    refused = []
    for module in declared.modules.values():
        allowed = policies[module.node]
        for offer in module.provides:
            kind = registry.name_of(offer.kind)
            refused += allowed.provider_refusals(
                ProviderAsk(
                    module.id,
                    offer.name,
                    kind,
                    module.receives[offer.name],
                    module.grants[offer.name],
                    module.admin,
                    module.provisioner,
                )
            )
        for need in module.requires:
            connection = need.connection.file if need.connection else None
            refused += allowed.consumer_refusals(
                ConsumerAsk(
                    module.id, need.name, need.file, need.owner, need.group, need.reload, connection
                )
            )
        for own in module.secrets:
            refused += allowed.consumer_refusals(
                ConsumerAsk(module.id, "secret", own.file, own.owner, own.group, own.reload)
            )
    handed = 0  # a consumer's node hands some kinds' credentials to their server: listed?
    for pair in declared.pairs:
        provider = declared.modules[pair.provider]
        offer = next(o for o in provider.provides if o.name == pair.provision)
        kind = registry.kind_of(offer.kind)
        if not kind.hands_over:
            continue
        handed += 1
        node = declared.modules[pair.consumer].node
        try:
            policies[node].server(
                kind.name, pair.consumer, declared.nodes[provider.node].address, pair.port, offer.ca
            )
        except PolicyRefusal as exc:
            refused.append(exc)
    assert handed, "the walk declares a vault and a Redis: their credentials are handed over"
    kinds = {registry.name_of(o.kind) for m in declared.modules.values() for o in m.provides}
    assert kinds == set(registry.KINDS)
    assert not refused, [str(r) for r in refused]
