"""A command imports only what it uses: ``meshtui --version`` and ``meshtui status`` run as
whole processes under ``python -X importtime``, and what they imported is checked.

``--version`` is answered before argparse and any other meshtui module; ``status`` (text and
JSON, on an inventory with a PostgreSQL pair, a vault and a module's own secrets) reads the
inventory and the status image and imports no dashboard, no client of a server, no agent,
no signing library and no migration library. The timings themselves are a benchmark
(benchmarks/bench_cli.py), not a test.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import meshtui
from meshtui.cli import VERSION, render
from meshtui.cli.parser import HANDLERS, build_parser
from tests.fix_mesh import Mesh, consumer, provider

HEAVY = (
    "textual",
    "rich",
    "psycopg",
    "redis",
    "botocore",
    "httpx",
    "httpcore",
    "uvicorn",
    "starlette",
    "anyio",
    "sqlite_utils",
    "importlib.metadata",
)
"""What no read-only command of the controller imports: the dashboard, the clients of the
servers, the agent's web stack, and the libraries only a migration or an install needs."""

VAULT = {
    "provides": [{"name": "secret", "kind": "openbao", "port": 8200, "ca": "/etc/bao-ca.pem"}],
    "receives": {"secret": "srv/db1/bao/mesh.json"},
    "grants": {"secret": "srv/db1/bao/grants"},
    "admin": "srv/db1/bao/admin.toml",
}


def imported(*args: str | Path) -> tuple[set[str], str]:
    """Every module ``python -X importtime -m meshtui.cli ARGS`` imported, and its stdout."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "meshtui.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    names = {
        line.rsplit("|", 1)[1].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and "imported package" not in line
    }
    assert names, done.stderr
    return names, done.stdout


def among(names: set[str], roots: tuple[str, ...]) -> list[str]:
    """The names in ``names`` that are one of ``roots`` or inside one."""
    return sorted(n for n in names if any(n == r or n.startswith(f"{r}.") for r in roots))


def test_version_imports_nothing_but_the_cli_package() -> None:
    names, out = imported("--version")
    assert out == f"{VERSION}\n"
    assert among(names, (*HEAVY, "nacl", "msgspec", "sqlite3", "argparse")) == []
    assert among(names, ("meshtui",)) == ["meshtui", "meshtui.cli"]


def test_version_is_the_installed_distributions(capsys: pytest.CaptureFixture[str]) -> None:
    """``--version`` prints ``meshtui.__version__`` (reading the installed metadata costs ~45
    ms): it must be pyproject.toml's version, and the installed distribution's."""
    import tomllib
    from importlib.metadata import version

    from meshtui.cli import DISTRIBUTION

    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    assert (project["name"], project["version"]) == (DISTRIBUTION, meshtui.__version__)
    assert f"{DISTRIBUTION} {version(DISTRIBUTION)}" == VERSION
    with pytest.raises(SystemExit):  # argparse's --version, after other options, says the same
        build_parser().parse_args(["--read-only", "--version"])
    assert capsys.readouterr().out == f"{VERSION}\n"


@pytest.fixture
def vault_mesh(mesh: Mesh) -> Mesh:
    """A declared mesh: a PostgreSQL pair, a vault pair and the module's two own secrets."""
    gitea = consumer("app1/gitea")
    gitea["requires"].append({"name": "secret", "file": "/srv/app1/gitea/vault.secret_id"})
    gitea["secrets"] = [
        {"name": "session_key", "mint": {"length": 48}, "file": "/srv/app1/gitea/session.key"},
        {"name": "smtp_password", "supplied": True, "file": "/srv/app1/gitea/smtp"},
    ]
    spec = mesh.spec({"db1/postgres": provider(), "db1/bao": VAULT, "app1/gitea": gitea})
    assert mesh.cli("declare", mesh.write(spec)).code == 0
    return mesh


@pytest.mark.parametrize("form", [[], ["--json"]], ids=["text", "json"])
def test_status_imports_what_it_reads_and_no_more(vault_mesh: Mesh, form: list[str]) -> None:
    for _ in range(2):  # the first read writes the status image, the second reads it
        names, out = imported("--state", vault_mesh.state, "status", *form)
    assert "secret:app1/gitea->db1/bao" in out and "smtp_password" in out
    assert among(names, (*HEAVY, "nacl", "tomllib")) == []
    assert among(names, ("meshtui.controller.act.own_secrets", "meshtui.protocol.messages")) == []
    assert among(names, ("meshtui.tui", "meshtui.host", "meshtui.provisioner", "meshtui.lab")) == []


def test_every_command_has_a_handler_that_resolves() -> None:
    """The dispatch table names a function that exists for each command it lists."""
    import importlib

    for command, target in HANDLERS.items():
        module, _, function = target.partition(":")
        assert callable(getattr(importlib.import_module(f"meshtui.cli.{module}"), function)), (
            command
        )


@pytest.mark.parametrize(
    "data",
    [
        [{"pair": "database:app1/gitea->db1/postgres", "latency_ms": 1 / 3, "alarm": False}],
        {"a": [], "b": {}, "c": [[], [{}]], "d": 'é\u2028\x01\x7f"\\/', "e": 10**30, "f": -0.0},
        [],
        {"path": Path("/srv/x"), "nan": math.nan, "inf": -math.inf},
    ],
)
def test_print_json_writes_what_json_dumps_indents(
    data: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    render.print_json(data)
    assert capsys.readouterr().out == json.dumps(data, indent=2, default=str) + "\n"
