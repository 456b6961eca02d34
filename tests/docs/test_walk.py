"""The real-mesh walk (docs/real-mesh.md) runs as written: its steps, the units and MESHTUI_STATE
name one state folder and one installed program, and the provision unit reads the declaration's
paths. (Every TOML block of the manual is parsed by tests/docs/test_examples.py.)"""

from __future__ import annotations

import configparser
import re
import tomllib
from pathlib import Path

import pytest

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


def test_the_walks_openbao_policy_is_the_provisioners_policy() -> None:
    from meshtui.kinds.openbao.lab import PROVISIONER_POLICY

    assert _block("hcl", "auth/approle/role") == PROVISIONER_POLICY


def test_the_walks_redis_conf_has_every_line_the_lab_runs_with() -> None:
    lab_only = {"dir", "logfile", "pidfile", "daemonize", "save", "appendonly", "loglevel"}
    source = (ROOT / "meshtui" / "kinds" / "redis" / "lab.py").read_text()
    lab = set(re.findall(r'^\s+f?"([a-z-]+) [^"]*",$', source, flags=re.M)) - lab_only
    walk = {line.split()[0] for line in _block("sh", "tls-port 6379").splitlines() if line}
    assert lab and lab <= walk, sorted(lab - walk)


def test_the_walks_weed_server_has_every_flag_the_lab_runs_with(tmp_path: Path) -> None:
    from meshtui.kinds.seaweedfs import lab

    lab_only = {"-master.volumeSizeLimitMB", "-volume.preStopSeconds"}
    ports = lab.Ports(9333, 8080, 8888, 8333)
    argv = lab.WeedServer(tmp_path, "10.0.0.2", ports, None).argv()[1:]
    flags = {word.split("=", 1)[0] for word in argv} - lab_only
    unit = _block("ini", "weed server")
    assert flags <= set(re.findall(r"(?<=\s)(-[A-Za-z0-9.]+|server)(?==|\s)", unit)), flags
    for role in ("master", "volume", "filer", "s3", "client"):
        assert f"[grpc.{role}]" in WALK, role
    for flag, port in (("master", 9333), ("volume", 8080), ("filer", 8888), ("s3", 8333)):
        assert f"-{flag}.port={port} -{flag}.port.grpc={port + 10000}" in unit, flag


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
