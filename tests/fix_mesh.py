"""A small mesh for the foundation tests: real controller keys, real node key folders, and a
declaration written from a dict, plus a way to run the real CLI and to read every table.

    def test_x(mesh_factory):
        mesh = mesh_factory()                       # db1, app1, app2 with keys
        path = mesh.write(mesh.spec(consumers(["app1/gitea"])))
        assert mesh.cli("declare", path).code == 0
"""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from meshtui import cli, crypto
from meshtui.controller.core import INVENTORY, init_keys
from meshtui.host.state import identity

ADDRESSES = {"db1": "10.213.0.2", "app1": "10.213.0.3", "app2": "10.213.0.4"}

# ---------------------------------------------------------------------------- TOML writing

_BARE = re.compile(r"[A-Za-z0-9_-]+")


def toml_key(key: str) -> str:
    """A TOML key, quoted unless it is bare."""
    return key if _BARE.fullmatch(key) else json.dumps(key, ensure_ascii=False)


def toml_value(value: Any) -> str:
    """A TOML value (strings, ints, lists, inline tables)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {value!r} as TOML")


def to_toml(spec: Mapping[str, Any]) -> str:
    """``{"nodes": {name: {...}}, "modules": {id: {...}}}`` as a declaration file."""
    lines: list[str] = []
    for key, value in spec.items():
        if not isinstance(value, Mapping):
            lines.append(f"{toml_key(key)} = {toml_value(value)}")
    for section, tables in spec.items():
        if not isinstance(tables, Mapping):
            continue
        for name, body in tables.items():
            lines.append(f"\n[{toml_key(section)}.{toml_key(name)}]")
            if not isinstance(body, Mapping):
                raise TypeError(f"{section}.{name} must be a dict")
            for k, v in body.items():
                lines.append(f"{toml_key(k)} = {toml_value(v)}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------- declaration parts


def provider(
    module_id: str = "db1/postgres", provision: str = "database", port: int = 5432
) -> dict:
    """A provider module's spec (paths relative to the declaration)."""
    base = f"srv/{module_id}"
    return {
        "provides": [{"name": provision, "port": port}],
        "receives": {provision: f"{base}/mesh.json"},
        "grants": {provision: f"{base}/grants"},
        "admin": f"{base}/admin.conninfo",
    }


def consumer(
    module_id: str,
    provision: str = "database",
    *,
    source: str | None = None,
    file: str | None = None,
    database: str | None = None,
) -> dict:
    """A consumer module's spec requiring one ``provision``."""
    req: dict[str, Any] = {
        "name": provision,
        "values": {"database": database or module_id.split("/")[1]},
        "file": file or f"/srv/{module_id}/{provision}.password",
    }
    if source is not None:
        req["from"] = source
    return {"requires": [req]}


def modules(consumers: Iterable[str], provider_id: str = "db1/postgres") -> dict[str, dict]:
    """One provider of ``database`` and every consumer in ``consumers`` requiring it."""
    out = {provider_id: provider(provider_id)}
    for mid in consumers:
        out[mid] = consumer(mid)
    return out


# ---------------------------------------------------------------------------- reading the store


def dump_tables(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, in rowid order, read without writing anything."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        names = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
            )
        ]
        return {n: conn.execute(f'SELECT * FROM "{n}" ORDER BY rowid').fetchall() for n in names}


def generation_rows(db: Path) -> dict[tuple[str, int], tuple[Any, ...]]:
    """The generations table keyed by (pair, generation), each row exactly as stored."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        return {
            (row[0], row[1]): row
            for row in conn.execute(
                "SELECT pair, generation, consumer_sealed, provider_sealed, digest, created_at,"
                " discarded_at FROM generations"
            )
        }


# ---------------------------------------------------------------------------- the CLI


@dataclass
class CliResult:
    """What one ``meshtui`` run returned and printed."""

    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


Runner = Callable[..., CliResult]


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]) -> Runner:
    """Run ``meshtui.cli.main`` in this process and capture what it printed."""

    def run(*args: str | Path) -> CliResult:
        capsys.readouterr()
        code = cli.main([str(a) for a in args])
        out, err = capsys.readouterr()
        return CliResult(code, out, err)

    return run


# ---------------------------------------------------------------------------- the mesh


@dataclass
class Mesh:
    """A controller state folder, node key folders, and a place for declarations."""

    root: Path
    state: Path
    node_dirs: dict[str, Path]
    run: Runner
    addresses: dict[str, str] = field(default_factory=dict)

    @property
    def inventory(self) -> Path:
        return self.state / INVENTORY

    def node(self, name: str) -> dict[str, str]:
        """The ``[nodes.NAME]`` table of a node made by the factory."""
        return {
            "address": self.addresses[name],
            "agent": f"unix:{self.root}/run/{name}.sock",
            "keys": f"nodes/{name}/node.pub",
        }

    def spec(self, mods: Mapping[str, Any], nodes: Iterable[str] | None = None) -> dict[str, Any]:
        """A whole declaration dict: the named nodes (default: all) and ``mods``."""
        names = list(self.node_dirs) if nodes is None else list(nodes)
        return {"nodes": {n: self.node(n) for n in names}, "modules": dict(mods)}

    def write(self, spec: Mapping[str, Any], name: str = "mesh.toml", extra: str = "") -> Path:
        """Write a declaration beside the node folders; ``extra`` is appended verbatim."""
        path = self.root / name
        path.write_text(to_toml(spec) + extra, encoding="utf-8")
        return path

    def keys(self, node: str) -> crypto.PrivateKeys:
        """A node's private keys, as its agent would load them."""
        return crypto.load_private(self.node_dirs[node] / "node.key")

    def add_node(self, name: str, address: str) -> Path:
        """Make another node's key folder (``meshtui host init``)."""
        folder = self.root / "nodes" / name
        identity.init(name, folder, self.state / "controller.pub")
        self.node_dirs[name] = folder
        self.addresses[name] = address
        return folder

    def cli(self, *args: str | Path) -> CliResult:
        """``meshtui --state STATE ARGS…``."""
        return self.run("--state", self.state, *args)

    def tables(self) -> dict[str, list[tuple[Any, ...]]]:
        return dump_tables(self.inventory)

    def generations(self) -> dict[tuple[str, int], tuple[Any, ...]]:
        return generation_rows(self.inventory)


MeshFactory = Callable[..., Mesh]


@pytest.fixture
def mesh_factory(tmp_path: Path, run_cli: Runner) -> MeshFactory:
    """Make meshes: controller keys (``meshtui init``) and a key folder per node."""
    count = 0

    def make(nodes: Mapping[str, str] | Iterable[str] = ADDRESSES) -> Mesh:
        nonlocal count
        count += 1
        root = tmp_path / f"mesh{count}"
        state = root / "state"
        init_keys(state)
        mesh = Mesh(root=root, state=state, node_dirs={}, run=run_cli)
        addresses = (
            dict(nodes)
            if isinstance(nodes, Mapping)
            else {n: f"10.213.0.{i + 2}" for i, n in enumerate(nodes)}
        )
        for name, address in addresses.items():
            mesh.add_node(name, address)
        return mesh

    return make


@pytest.fixture
def mesh(mesh_factory: MeshFactory) -> Mesh:
    """The default mesh: db1, app1, app2 with keys, nothing declared yet."""
    return mesh_factory()
