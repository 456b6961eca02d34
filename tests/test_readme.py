"""The README's examples run as written (issue 26): every TOML block parses (TOML 1.0 allows no
line break inside an inline table, which the first walk's operator copied and met), and the
walk's steps, the units and MESHTUI_STATE name one state folder and one installed program."""

from __future__ import annotations

import configparser
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
README = (ROOT / "README.md").read_text()
BLOCKS = re.findall(r"^```toml\n(.*?)^```", README, flags=re.M | re.S)


def test_the_readme_has_toml_blocks() -> None:
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize("number", range(len(BLOCKS)))
def test_every_toml_block_parses(number: int) -> None:
    try:
        tomllib.loads(BLOCKS[number])
    except tomllib.TOMLDecodeError as exc:
        pytest.fail(f"README.md's TOML block {number + 1} is not valid TOML: {exc}")


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
    assert f"/opt/meshtui/bin/pip install ./{wheel}" in README
    assert "pip install meshtui`" not in README.replace("**Not** `pip install meshtui`", "")
    for unit in ("meshtui-agent.service", "meshtui-watch.service", "meshtui-provision@.service"):
        assert _service(unit)["ExecStart"].startswith("/opt/meshtui/bin/meshtui "), unit


def test_one_state_folder_in_the_walk_and_the_watch_unit() -> None:
    env = _service("meshtui-watch.service")["Environment"]
    state = env.removeprefix("MESHTUI_STATE=")
    assert _service("meshtui-watch.service")["User"] == "meshtui"
    assert (
        f"MESHTUI_STATE={state}" in README and f"-d -o meshtui -g meshtui -m 0700 {state}" in README
    )
    assert "--state /var/lib/meshtui init" not in README


def test_the_provision_unit_reads_the_declarations_paths() -> None:
    decl = tomllib.loads(BLOCKS[0])
    module = decl["modules"]["db1/postgres"]
    manifest, admin = module["receives"]["database"], module["admin"]
    start = _service("meshtui-provision@.service")["ExecStart"]
    instance = "db1/postgres"  # %I: the instance name unescaped (systemd-escape --path)
    assert f"--manifest {manifest}" in start.replace("%I", instance)
    assert f"--admin {admin}" in start.replace("%I", instance)
