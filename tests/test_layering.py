"""Each folder is one room: who may import whom, checked on the source with ``ast``.

The floors, bottom up:

- the core (:data:`CORE`): ``model``, ``naming``, ``errors``, ``crypto``, ``wire``, ``atomic``,
  ``declaration``, ``terminal`` (outside text made safe to print), ``runas`` (the one way to
  start a program as another user), ``messages``, and the kinds'
  registry (``kinds/kind.py``, ``kinds/registry.py``, each kind package's ``__init__.py`` and its
  ``values`` check, e.g. ``kinds/redis/acl.py``): the words, the shapes and the pure functions
  everyone shares. The core imports nothing of meshtui above it.
- a kind's package (``meshtui/kinds/<kind>/``) is cut across the floors by its modules' names
  (:func:`kind_floor`): ``probe.py`` and ``doctor.py`` serve the agent (host), ``lab.py`` the
  lab, the rest the provisioner. Each module imports only the core, its own package and the
  contracts of the floor it serves (:data:`KIND_CONTRACTS`); every other module reaches a kind
  through the registry only (``Kind``'s lazy references), never by importing its package.
- the inventory (``meshtui/inventory/``): the only code that imports ``sqlite3`` or
  ``sqlite_utils``, and the only place an inventory SQL statement is written.
- the controller (``meshtui/controller/``) decides; the hands (``host/``, ``provisioner/``) act
  and never import the controller or the inventory; ``lab/`` builds meshes and never imports the
  controller (the controller's key files come from ``meshtui/keys.py``).
- the dashboard (``meshtui/tui/``) imports only the controller, the core and itself, and is
  the only code that imports Textual or Rich; neither it nor the command line (``meshtui/cli/``)
  imports the inventory: both read the controller's typed reports.
- SQL is written only in the inventory, and (PostgreSQL's own) in the hands and the lab's
  modules that talk to PostgreSQL through ``psycopg``.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

import meshtui

PACKAGE = Path(meshtui.__file__).parent
FILES = sorted(PACKAGE.rglob("*.py"))


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path) -> set[str]:
    """Every module ``path`` imports, absolute, at any depth (lazy imports count too)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    here = module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            found.add(prefix)
            found.update(f"{prefix}.{alias.name}" for alias in node.names)
    return found


CORE = (
    "meshtui.model",
    "meshtui.naming",
    "meshtui.errors",
    "meshtui.crypto",
    "meshtui.wire",
    "meshtui.atomic",
    "meshtui.folders",
    "meshtui.cafile",
    "meshtui.declaration",
    "meshtui.terminal",
    "meshtui.runas",
    "meshtui.messages",
    "meshtui.bao",
    "meshtui.runas",
    "meshtui.kinds",
    "meshtui.kinds.kind",
    "meshtui.kinds.registry",
)
"""The bottom floor (see the module docstring); each kind's record and what it imports of its own
package (its values check) join it: :func:`kind_records`."""

KIND_FLOORS = {"probe": "host", "doctor": "host", "lab": "lab"}
"""The floor a kind's module serves, by its name; any other name serves the provisioner."""

KIND_CONTRACTS = {
    # lent: the loan of a kept admin session, which a kind's pool subclasses (it imports only
    # the adapter contract)
    "provisioner": (
        "meshtui.provisioner.adapter",
        "meshtui.provisioner.manifest",
        "meshtui.provisioner.lent",
    ),
    "host": (
        "meshtui.host.probe_types",
        "meshtui.host.probe_address",
        "meshtui.provisioner.files",
    ),
    "lab": (
        "meshtui.lab.netns",
        "meshtui.lab.wait",
        "meshtui.lab.foreign",
        "meshtui.lab.toml_writer",
        "meshtui.lab.service",
        "meshtui.lab.accounts",
        "meshtui.lab.certificates",
    ),
}
"""What a kind's module may import beyond the core and its own package, by the floor it serves."""

REACHES_KINDS = ("meshtui/kinds/", "meshtui/lab/mesh.py")
"""Who may import a kind's package by name: the kinds themselves, and the demo mesh, which
chooses which servers the lab raises. Everything else goes through the registry."""


def kind_package(name: str) -> str | None:
    """``meshtui.kinds.<kind>`` for a module inside a kind's package (else None)."""
    parts = name.split(".")
    if (
        len(parts) >= 3
        and parts[:2] == ["meshtui", "kinds"]
        and parts[2] not in ("kind", "registry")
    ):
        return ".".join(parts[:3])
    return None


def kind_records() -> tuple[str, ...]:
    """Each kind package's ``__init__`` and the modules of its own package it imports (its
    values check): the part of a kind the core holds."""
    out: list[str] = []
    for path in FILES:
        name = module_name(path)
        if path.name == "__init__.py" and kind_package(name) == name:
            out.append(name)
            out += [i for i in imports(path) if under(i, name) and i != name]
    return tuple(out)


def kind_floor(name: str) -> str:
    """The floor a kind's module serves (see :data:`KIND_FLOORS`)."""
    return KIND_FLOORS.get(name.rpartition(".")[2], "provisioner")


SQL = re.compile(r"\b(SELECT|INSERT INTO|DELETE FROM|PRAGMA|CREATE TABLE)\b|\bUPDATE \w+ SET\b")
"""What an SQL statement looks like in a string (the inventory's dialect is upper case)."""

POSTGRES_SPEAKERS = ("meshtui/host/", "meshtui/provisioner/", "meshtui/lab/", "meshtui/kinds/")
"""Where SQL may be written outside the inventory: the hands, the lab and the kinds, in a module
that imports ``psycopg`` (PostgreSQL's SQL sent to PostgreSQL, never to the inventory), or for a
kind's module, in a package of which one does (the PostgreSQL adapter is split by job)."""


def sql_strings(path: Path) -> list[str]:
    """Every string constant in ``path`` that looks like an SQL statement."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and SQL.search(node.value)
    ]


def under(name: str, *roots: str) -> bool:
    return any(name == r or name.startswith(r + ".") for r in roots)


def rel(path: Path) -> str:
    return path.relative_to(PACKAGE.parent).as_posix()


TRANSITIVE = frozenset({"controller", "hands", "provisioner", "lab", "core", "keys"})
"""The rules checked on everything a module reaches, not only on what it imports itself: an
arrow one hop away (host -> a core module -> the controller) breaks them as surely."""

ACTING = tuple(
    f"meshtui.controller.{m}"
    for m in (
        "watch", "metrics", "notify", "export", "push", "rotate", "probe", "drill",
        "deliver", "sending", "recording", "client", "resolve", "lock", "ahead",
    )
)  # fmt: skip
"""The controller's modules that act: the CLI and the dashboard reach them through
``controller/core.py`` (the front door), never by importing them."""


def import_graph() -> dict[str, set[str]]:
    """Each meshtui module -> what it imports (``from pkg import name`` counts as ``pkg.name``
    when that is a module, else as ``pkg``); what is not a meshtui module is a leaf."""
    modules = {module_name(p): p for p in FILES}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found = set()
        for imp in imports(path):
            target = imp if imp in modules else imp.rpartition(".")[0]
            if target not in modules:
                target = imp  # not a module here (a third party's): a leaf
            if target not in (name, "meshtui"):
                found.add(target)
        graph[name] = found
    return graph


def reached(graph: dict[str, set[str]], start: str) -> dict[str, str]:
    """Every module ``start`` reaches -> the chain of imports that reaches it."""
    chains = {start: start}
    todo = [start]
    while todo:
        here = todo.pop(0)
        for nxt in sorted(graph.get(here, ())):
            if nxt not in chains:
                chains[nxt] = f"{chains[here]} -> {nxt}"
                todo.append(nxt)
    del chains[start]
    return chains


def violations(rule: str) -> list[str]:
    out = []
    core = (*CORE, *kind_records())
    graph = import_graph() if rule in TRANSITIVE else {}
    for path in FILES:
        where = rel(path)
        here = module_name(path)
        package = kind_package(here)
        floor = kind_floor(here) if package and here not in core else None
        chains = reached(graph, here) if rule in TRANSITIVE else {n: "" for n in imports(path)}
        for name in sorted(chains):
            if rule == "ui" and not where.startswith("meshtui/tui/"):
                bad = under(name, "textual", "rich")
            elif rule == "controller" and where.startswith("meshtui/controller/"):
                bad = under(name, "meshtui.host", "meshtui.provisioner", "meshtui.tui")
            elif rule == "hands" and (
                where.startswith(("meshtui/host/", "meshtui/provisioner/"))
                or floor in ("host", "provisioner")
            ):
                bad = under(name, "meshtui.controller", "meshtui.inventory")
            elif rule == "provisioner" and (
                where.startswith("meshtui/provisioner/") or floor == "provisioner"
            ):
                bad = under(name, "meshtui.host", "meshtui.controller", "meshtui.inventory")
            elif rule == "keys" and where == "meshtui/keys.py":
                bad = under(name, "meshtui") and not under(name, *core)
            elif rule == "nacl" and where != "meshtui/crypto.py":
                bad = under(name, "nacl")
            elif rule == "sqlite" and not where.startswith("meshtui/inventory/"):
                bad = under(name, "sqlite3", "sqlite_utils")
            elif rule == "tui" and where.startswith("meshtui/tui/"):
                bad = under(name, "meshtui") and not under(
                    name, "meshtui.tui", "meshtui.controller", *core
                )
                bad = bad and name != "meshtui"
            elif rule == "faces" and where.startswith(("meshtui/cli/", "meshtui/tui/")):
                bad = under(name, "meshtui.inventory", *ACTING)
            elif rule == "lab" and (where.startswith("meshtui/lab/") or floor == "lab"):
                bad = under(name, "meshtui.controller")
            elif rule == "kind" and floor is not None and package is not None:
                allowed = (package, *core, *KIND_CONTRACTS[floor])
                bad = (
                    under(name, "meshtui")
                    and not under(name, *allowed)
                    and not any(a.startswith(name + ".") for a in allowed)  # `from pkg import`
                )
            elif rule == "registry" and not where.startswith(REACHES_KINDS):
                bad = kind_package(name) is not None
            elif rule == "core" and here in core:
                bad = under(name, "meshtui") and name != "meshtui" and not under(name, *core)
            else:
                bad = False
            if bad:
                via = f" ({chains[name]})" if chains[name] else ""
                out.append(f"{where} {'reaches' if via else 'imports'} {name}{via}")
        if rule == "sql" and not where.startswith("meshtui/inventory/"):
            talking = (  # the module, or for a kind's module any module of its package
                [p for p in FILES if kind_package(module_name(p)) == package]
                if package is not None
                else [path]
            )
            speaks_postgres = where.startswith(POSTGRES_SPEAKERS) and any(
                under(name, "psycopg") for p in talking for name in imports(p)
            )
            if not speaks_postgres:
                out += [f"{where} writes SQL: {text.strip()[:60]!r}" for text in sql_strings(path)]
    return out


def test_the_walk_sees_the_package() -> None:
    names = {rel(p) for p in FILES}
    assert {"meshtui/crypto.py", "meshtui/controller/core.py", "meshtui/cli/__init__.py"} <= names
    assert "nacl.public" in imports(PACKAGE / "crypto.py")
    assert "meshtui.controller.status" in imports(PACKAGE / "controller" / "core.py")


def test_relative_imports_are_resolved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "meshtui"
    (fake / "host").mkdir(parents=True)
    (fake / "host" / "x.py").write_text("from ..controller import core\nfrom . import y\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    found = imports(fake / "host" / "x.py")
    assert "meshtui.controller.core" in found and "meshtui.host.y" in found


def test_nothing_outside_tui_imports_textual_or_rich() -> None:
    assert violations("ui") == []


def test_the_controller_never_imports_host_provisioner_or_tui() -> None:
    assert violations("controller") == []


def test_host_and_provisioner_never_import_controller_or_inventory() -> None:
    assert violations("hands") == []


def test_only_crypto_imports_nacl() -> None:
    assert violations("nacl") == []


def test_only_the_inventory_imports_sqlite() -> None:
    assert violations("sqlite") == []


def test_no_inventory_sql_outside_the_inventory() -> None:
    assert violations("sql") == []


def test_cli_and_tui_never_import_the_inventory() -> None:
    assert violations("faces") == []


def test_tui_imports_only_the_controller_and_the_core() -> None:
    assert violations("tui") == []


def test_lab_never_imports_the_controller() -> None:
    assert violations("lab") == []


def test_the_core_imports_nothing_above_it() -> None:
    assert violations("core") == []


def test_the_provisioner_never_reaches_the_host() -> None:
    assert violations("provisioner") == []


def test_the_key_files_know_nothing_of_the_inventory() -> None:
    assert violations("keys") == []


def test_a_kind_imports_only_the_core_and_its_floors_contracts() -> None:
    assert violations("kind") == []


def test_layers_reach_a_kind_only_through_the_registry() -> None:
    assert violations("registry") == []


INJECTED = {
    "sqlite": ("controller/x.py", "import sqlite3\n"),
    "sql": ("controller/x.py", 'Q = "SELECT id FROM pairs"\n'),
    "sql-cli": ("cli/x.py", 'Q = "SELECT id FROM pairs"\n'),
    "sql-preflight": ("preflight.py", 'Q = "UPDATE pairs SET generation = 2"\n'),
    "sql-controller-psycopg": ("controller/x.py", 'import psycopg\nQ = "SELECT 1"\n'),
    "sql-host-without-psycopg": ("host/x.py", 'Q = "DELETE FROM audit"\n'),
    "faces": ("cli/x.py", "from meshtui.inventory.audit import ChainCheck\n"),
    "faces-tui": ("tui/x.py", "import meshtui.inventory\n"),
    "tui": ("tui/x.py", "from meshtui.inventory import Inventory\n"),
    "lab": ("lab/x.py", "from meshtui.controller.core import Controller\n"),
    "core": ("model.py", "from meshtui.controller import core\n"),
    "kind": ("kinds/postgres/adapter.py", "from meshtui.provisioner.harness import reconcile\n"),
    "kind-probe": ("kinds/redis/probe.py", "from meshtui.host.agent import Agent\n"),
    "kind-lab": ("kinds/redis/lab.py", "from meshtui.provisioner.adapter import Done\n"),
    "registry": ("host/x.py", "from meshtui.kinds.redis.probe import probe_target\n"),
    "registry-provisioner": ("provisioner/x.py", "import meshtui.kinds.postgres.adapter\n"),
    "hands": ("kinds/postgres/adapter.py", "from meshtui.inventory import Inventory\n"),
    "provisioner": ("provisioner/x.py", "from meshtui.host.files import read_credential\n"),
    "provisioner-kind": ("kinds/redis/adapter.py", "from meshtui.host import agent\n"),
    "keys": ("keys.py", "from meshtui.inventory import Inventory\n"),
    "faces-watch": ("cli/x.py", "from meshtui.controller.watch import Watch\n"),
    "faces-export": ("tui/x.py", "from meshtui.controller.export import write_export\n"),
}


@pytest.mark.parametrize("rule", sorted(INJECTED))
def test_each_rule_fails_on_an_injected_violation(
    rule: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "meshtui"
    where, source = INJECTED[rule]
    (fake / where).parent.mkdir(parents=True, exist_ok=True)
    (fake / where).write_text(source)
    allowed = fake / "inventory" / "store.py"  # the same code inside the inventory is fine
    allowed.parent.mkdir(parents=True, exist_ok=True)
    allowed.write_text("import sqlite3\nQ = 'SELECT id FROM pairs'\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    monkeypatch.setattr(sys.modules[__name__], "FILES", sorted(fake.rglob("*.py")))
    found = violations(rule.split("-")[0])
    assert found and all(f.startswith(f"meshtui/{where}") for f in found), found


@pytest.mark.parametrize(
    ("rule", "start", "hop"),
    [
        ("hands", "host/x.py", "from meshtui.controller import core\n"),
        ("controller", "controller/x.py", "from meshtui.host import agent\n"),
        ("provisioner", "provisioner/x.py", "import meshtui.host.files\n"),
        ("core", "model.py", "from meshtui.inventory import Inventory\n"),
        ("lab", "lab/x.py", "from meshtui.controller.core import Controller\n"),
    ],
)
def test_an_arrow_one_hop_away_is_caught(
    rule: str, start: str, hop: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "meshtui"
    (fake / start).parent.mkdir(parents=True, exist_ok=True)
    (fake / start).write_text("from meshtui import hop\n")  # the hop itself breaks no rule
    (fake / "hop.py").write_text(hop)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    monkeypatch.setattr(sys.modules[__name__], "FILES", sorted(fake.rglob("*.py")))
    found = [f for f in violations(rule) if f.startswith(f"meshtui/{start}")]
    assert any("meshtui.hop -> " in f for f in found), found


def test_postgres_sql_in_the_hands_is_allowed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "meshtui"
    (fake / "provisioner").mkdir(parents=True)
    (fake / "provisioner" / "x.py").write_text('import psycopg\nQ = "SELECT 1 FROM pg_roles"\n')
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    monkeypatch.setattr(sys.modules[__name__], "FILES", sorted(fake.rglob("*.py")))
    assert violations("sql") == []


def test_importing_controller_and_cli_loads_no_ui() -> None:
    code = (
        "import sys, meshtui.controller.core, meshtui.cli\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'rich')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]", out.stdout


def test_every_module_is_named_in_the_architecture_doc() -> None:
    """docs/ARCHITECTURE.md lists each module with its one job; a new module gets a line there."""
    doc = (PACKAGE.parent / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`(?:[\w/]+/)?(\w+\.py)`", doc))
    missing = [rel(p) for p in FILES if p.name != "__init__.py" and p.name not in named]
    assert missing == [], f"not in docs/ARCHITECTURE.md: {missing}"


def test_the_architecture_doc_names_no_missing_file() -> None:
    """Every ``*.py`` docs/ARCHITECTURE.md names exists: a path relative to the package or the
    repository, or (a bare name) some file of that name in the package, the tests or the
    benchmarks. A moved or deleted module takes its doc line with it."""
    root = PACKAGE.parent
    doc = (root / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    names = {p.name for d in ("meshtui", "tests", "benchmarks") for p in (root / d).rglob("*.py")}
    missing = []
    for token in sorted(set(re.findall(r"`([\w/.]*?\w+\.py)`", doc))):
        if "/" in token:
            found = any((base / token).is_file() for base in (root, PACKAGE))
        else:
            found = token in names
        if not found:
            missing.append(token)
    assert missing == [], f"docs/ARCHITECTURE.md names files that do not exist: {missing}"
