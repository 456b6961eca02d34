"""Each folder is one room: who may import whom, checked on the source with ``ast``.

The floors, bottom up:

- the core (:data:`CORE`): ``model``, ``errors``, ``freeform``, ``crypto``, ``atomic``, ``folders``,
  ``terminal`` (outside text made safe to print), ``runas`` (the one way to start a program as
  another user), and the kinds' registry (``kinds/kind.py``, ``kinds/registry.py``, each kind
  package's ``__init__.py`` and its ``values`` check, e.g. ``kinds/redis/acl.py``): the words, the
  shapes and the pure functions everyone shares. The core imports nothing of meshtui above it.
- the protocol (``meshtui/protocol/``): what the controller, the agent and the provisioner agree
  on (the signed envelope, every request and answer, the manifest). It imports the core only.
- the contracts (``meshtui/contracts/``): what a kind implements (the adapter, the loan of a kept
  session, the probe's types and target gate, the provider's files). They import the core and
  the protocol only.
- a kind's package (``meshtui/kinds/<kind>/``) imports the core, the protocol, the contracts and
  itself (its ``lab.py`` also the lab's building blocks, :data:`LAB_CONTRACTS`). Its modules are
  cut across the floors by their names (:func:`kind_floor`): ``probe.py`` and ``doctor.py`` serve
  the agent (host), ``lab.py`` the lab, the rest the provisioner. Every other module reaches a
  kind through the registry only (``Kind``'s lazy references), never by importing its package.
- the inventory (``meshtui/inventory/``): the only code that imports ``sqlite3`` or
  ``sqlite_utils``, and the only place an inventory SQL statement is written.
- the controller (``meshtui/controller/``) decides; its subpackages import each other only as
  :data:`CONTROLLER_ROOMS` allows. The hands (``host/``, ``provisioner/``) act and never import
  the controller or the inventory; the agent's subpackages import each other only as
  :data:`HOST_ROOMS` allows. ``lab/`` builds meshes and never imports the controller but for its
  key files (``controller/keys.py``, which imports only the core).
- the dashboard (``meshtui/tui/``) imports only the controller, the core and itself, and is
  the only code that imports Textual or Rich; neither it nor the command line (``meshtui/cli/``)
  imports the inventory: both read the controller's typed reports.
- SQL is written only in the inventory, and (PostgreSQL's own) in the hands and the lab's
  modules that talk to PostgreSQL through ``psycopg``.
- no circle: no module reaches itself through its imports, type-only and function-local ones
  included (they are the coupling); a package's modules may import its ``__init__``.
- no two modules share a name, but where the name says which contract, command or screen a
  module implements (:data:`NAMED_FOR_WHAT_THEY_IMPLEMENT`).
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
    "meshtui.errors",
    "meshtui.freeform",
    "meshtui.crypto",
    "meshtui.atomic",
    "meshtui.folders",
    "meshtui.cafile",
    "meshtui.terminal",
    "meshtui.runas",
    "meshtui.kinds",
    "meshtui.kinds.kind",
    "meshtui.kinds.registry",
)
"""The bottom floor (see the module docstring); each kind's record and what it imports of its own
package (its values check) join it: :func:`kind_records`."""

PROTOCOL = "meshtui.protocol"
CONTRACTS = "meshtui.contracts"

KIND_FLOORS = {"probe": "host", "doctor": "host", "lab": "lab"}
"""The floor a kind's module serves, by its name; any other name serves the provisioner."""

LAB_CONTRACTS = (
    "meshtui.lab.netns",
    "meshtui.lab.wait",
    "meshtui.lab.foreign",
    "meshtui.lab.toml_writer",
    "meshtui.lab.accounts",
    "meshtui.lab.certificates",
)
"""What a kind's ``lab.py`` may import of the lab to raise its server."""

REACHES_KINDS = ("meshtui/kinds/",)
"""Who may import a kind's package by name: the kinds themselves. Everything else, the lab
included (it raises each kind's server through ``Kind.lab``), goes through the registry."""

CONTROLLER_ROOMS = {
    "agents": (),
    "plan": ("agents",),
    "read": ("plan", "agents", "act.own_secrets"),
    "act": ("plan", "agents", "read"),
    "records": ("plan", "agents", "read", "act", "core"),
    "unattended": ("plan", "agents", "read", "act"),
}
"""Which of the controller's rooms each may import (besides its own modules and the leaves at
the controller's top: ``reports``, ``lock``, ``freshness``, ``keys``, ``reach``, ``config``). ``core.py``
(the front door) imports them; none of them imports it back, but records' restore and backup,
which need its state folder's names (a pair's detail reads a module's own secrets through their
one module until they become a feature package of their own)."""

CONTROLLER_LEAVES = ("reports", "lock", "freshness", "keys", "reach", "config", "turn")

HOST_ROOMS = {
    "policy": (),
    "state": (),
    "receive": ("policy", "state"),
    "top": ("policy", "state", "receive"),
    "server": ("policy", "state", "receive", "top"),
}
"""Which of the agent's rooms each may import (``top`` is the modules at ``host/``'s top: its
probe runner, the doctor's checks, a module's own secrets), besides its leaves."""

HOST_LEAVES = ("log", "credential_files")
"""The agent's modules every room may use: its log, and how a credential file is read, written
and examined (a delivery writes one, the holdings examine it, a probe reads it)."""

NAMED_FOR_WHAT_THEY_IMPLEMENT = ("meshtui/kinds/", "meshtui/cli/", "meshtui/tui/screens/")
"""Where a module's name repeats another's on purpose: a kind's modules are named for the
contract they implement (``probe.py``, ``adapter.py``), the command line's for the commands they
run (``cli/watch.py``), the dashboard's screens for what they show (``screens/audit.py``)."""


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

ACTING = (
    "meshtui.controller.act",
    "meshtui.controller.agents",
    "meshtui.controller.unattended",
    "meshtui.controller.records.export",
    "meshtui.controller.plan.planner",
    "meshtui.controller.plan.resolve",
    "meshtui.controller.lock",
)
"""The controller's rooms and modules that act: the CLI and the dashboard reach them through
``controller/core.py`` (the front door), never by importing them."""


def room(name: str, floor: str) -> str | None:
    """The room of ``floor`` (``controller`` or ``host``) an imported name is in: its subpackage;
    at the floor's top, ``core`` (the controller's front door), ``leaf`` (a controller leaf),
    ``log`` (the agent's log) or ``top`` (another module at the agent's top); None outside the
    floor, and for a room's package itself (``from meshtui.controller.act import push`` also
    names ``meshtui.controller.act``, which holds nothing)."""
    parts = name.split(".")
    if parts[:2] != ["meshtui", floor] or len(parts) < 3:
        return None
    rooms = CONTROLLER_ROOMS if floor == "controller" else HOST_ROOMS
    if parts[2] in rooms:
        return parts[2] if len(parts) > 3 else None
    if floor == "controller":
        if parts[2] == "core":
            return "core"
        return "leaf" if parts[2] in CONTROLLER_LEAVES else parts[2]
    return "leaf" if parts[2] in HOST_LEAVES else "top"


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
            elif rule == "keys" and where == "meshtui/controller/keys.py":
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
                bad = under(name, "meshtui.controller") and name not in (
                    "meshtui.controller.keys",
                    "meshtui.controller.config",
                )
            elif rule == "protocol" and under(here, PROTOCOL):
                bad = under(name, "meshtui") and name != "meshtui"
                bad = bad and not under(name, PROTOCOL, *core)
            elif rule == "contracts" and under(here, CONTRACTS):
                bad = under(name, "meshtui") and name != "meshtui"
                bad = bad and not under(name, CONTRACTS, PROTOCOL, *core)
            elif rule == "rooms" and room(here, "controller") not in (None, "core", "leaf"):
                mine, theirs = room(here, "controller"), room(name, "controller")
                allowed_rooms = CONTROLLER_ROOMS.get(mine or "", ())
                bad = theirs not in (None, mine, "leaf") and not any(
                    theirs == r.split(".")[0]
                    and (r == theirs or under(name, f"meshtui.controller.{r}"))
                    for r in allowed_rooms
                )
                bad = bad and name != "meshtui.controller"
            elif rule == "rooms" and room(here, "host") not in (None, "leaf"):
                mine, theirs = room(here, "host"), room(name, "host")
                bad = theirs not in (None, mine, "leaf")
                bad = bad and theirs not in HOST_ROOMS.get(mine or "", ())
                bad = bad and name != "meshtui.host"
            elif rule == "kind" and floor is not None and package is not None:
                lab = LAB_CONTRACTS if floor == "lab" else ()
                allowed = (package, *core, PROTOCOL, CONTRACTS, *lab)
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
    assert "meshtui.controller.read.status" in imports(PACKAGE / "controller" / "core.py")


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


def test_the_protocol_imports_only_the_core() -> None:
    assert violations("protocol") == []


def test_the_contracts_import_only_the_core_and_the_protocol() -> None:
    assert violations("contracts") == []


def test_the_controllers_and_the_agents_rooms_import_only_what_they_may() -> None:
    assert violations("rooms") == []


def circles() -> list[list[str]]:
    """Every set of modules that reach each other through their imports (each import counts:
    type-only and function-local ones are the coupling too). A module's import of its own
    package (``from meshtui.cli import render`` inside ``meshtui.cli``) is not an arrow back: a
    package's ``__init__`` runs before any of its modules, whoever imports them."""
    graph = import_graph()
    graph = {
        m: {t for t in ts if t in graph and not (m.startswith(t + ".") and t != m)}
        for m, ts in graph.items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1 or v in graph[v]:
                found.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_module_reaches_itself_through_its_imports() -> None:
    assert circles() == []


def test_a_circle_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "meshtui"
    (fake / "controller" / "act").mkdir(parents=True)
    (fake / "controller" / "core.py").write_text("from meshtui.controller.act import push\n")
    (fake / "controller" / "act" / "push.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from meshtui.controller.core import Controller\n"
    )
    (fake / "cli").mkdir()
    (fake / "cli" / "__init__.py").write_text("from meshtui.cli import render\n")
    (fake / "cli" / "render.py").write_text("from meshtui.cli import __name__\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    monkeypatch.setattr(sys.modules[__name__], "FILES", sorted(fake.rglob("*.py")))
    assert circles() == [["meshtui.controller.act.push", "meshtui.controller.core"]]


LAZY = {
    "meshtui/cli/__init__.py": "start-up: `--version` answers before argparse or any command loads",
    "meshtui/cli/context.py": "start-up: the controller loads only for a command that opens one",
    "meshtui/cli/host.py": "start-up: a node's commands load only the agent's part they run",
    "meshtui/cli/lab.py": "start-up: the lab and the dashboard load only for `lab` and `demo`",
    "meshtui/cli/mesh.py": "start-up: the dashboard and the restore records stay out of `status`",
    "meshtui/cli/provision.py": "start-up: the harness loads only for `provision`",
    "meshtui/cli/recovery.py": "start-up: backup and restore load only for their commands",
    "meshtui/cli/secret.py": "start-up: the renderer stays out of building the parser",
    "meshtui/cli/watch.py": "start-up: the controller loads only when `watch` runs",
    "meshtui/controller/core.py": (
        "start-up: `status` uses the front door but never acts: the actions, the agents' "
        "transport (httpx), the doctor, the records and the unattended loop load when called"
    ),
    "meshtui/controller/lock.py": (
        "start-up: the lease (psycopg) loads only for a controller whose inventory is PostgreSQL"
    ),
    "meshtui/controller/read/doctor.py": (
        "start-up: the dashboard imports the doctor's report shapes; the agents' transport "
        "(httpx) and a module's own secrets load when the doctor runs"
    ),
    "meshtui/inventory/store.py": (
        "start-up: the lease (psycopg) loads only when a PostgreSQL write checks it"
    ),
    "meshtui/tui/app.py": "first paint: each screen but the pairs' loads when it is opened",
    "meshtui/tui/palette.py": "first paint: the palette's commands load the main screen when run",
    "meshtui/tui/screens/main.py": "first paint: a pair's screen loads when one is opened",
}
"""Every module that imports meshtui inside a function, and why (each reason is the start-up
of a command or the dashboard's first paint: no import is deferred to hide a circle)."""


def lazy_importers() -> set[str]:
    """Every module that imports a meshtui module inside a function."""
    found = set()
    for path in FILES:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(fn):
                named = (
                    [node.module or ""]
                    if isinstance(node, ast.ImportFrom)
                    else [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else []
                )
                if any(under(n, "meshtui") for n in named):
                    found.add(rel(path))
    return found


def test_every_function_local_import_is_listed_with_its_reason() -> None:
    assert lazy_importers() == set(LAZY)


def test_an_unlisted_function_local_import_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "meshtui"
    (fake / "controller" / "act").mkdir(parents=True)
    (fake / "controller" / "act" / "push.py").write_text(
        "def push():\n    from meshtui.controller.act import rotate\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    monkeypatch.setattr(sys.modules[__name__], "FILES", sorted(fake.rglob("*.py")))
    assert lazy_importers() == {"meshtui/controller/act/push.py"}


def shared_names(files: list[Path]) -> dict[str, list[str]]:
    """File names two modules share, outside :data:`NAMED_FOR_WHAT_THEY_IMPLEMENT`."""
    by_name: dict[str, list[str]] = {}
    for path in files:
        if path.name != "__init__.py" and not rel(path).startswith(NAMED_FOR_WHAT_THEY_IMPLEMENT):
            by_name.setdefault(path.name, []).append(rel(path))
    return {n: ws for n, ws in by_name.items() if len(ws) > 1}


def test_no_two_modules_share_a_name() -> None:
    assert shared_names(FILES) == {}


def test_a_shared_name_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "meshtui"
    for where in ("host/receive/manifest.py", "protocol/manifest.py", "kinds/redis/probe.py",
                  "kinds/postgres/probe.py"):  # fmt: skip
        (fake / where).parent.mkdir(parents=True, exist_ok=True)
        (fake / where).write_text("")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    files = sorted(fake.rglob("*.py"))
    assert shared_names(files) == {
        "manifest.py": ["meshtui/host/receive/manifest.py", "meshtui/protocol/manifest.py"]
    }


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
    "kind-probe": ("kinds/redis/probe.py", "from meshtui.host.server.routes import Agent\n"),
    "kind-lab": ("kinds/redis/lab.py", "from meshtui.host.state import identity\n"),
    "registry": ("host/x.py", "from meshtui.kinds.redis.probe import probe_target\n"),
    "registry-provisioner": ("provisioner/x.py", "import meshtui.kinds.postgres.adapter\n"),
    "hands": ("kinds/postgres/adapter.py", "from meshtui.inventory import Inventory\n"),
    "provisioner": (
        "provisioner/x.py",
        "from meshtui.host.credential_files import read_credential\n",
    ),
    "provisioner-kind": (
        "kinds/redis/adapter.py",
        "from meshtui.host.server import routes as agent\n",
    ),
    "keys": ("controller/keys.py", "from meshtui.inventory import Inventory\n"),
    "faces-watch": ("cli/x.py", "from meshtui.controller.unattended.watch import Watch\n"),
    "faces-export": ("tui/x.py", "from meshtui.controller.records.export import write_export\n"),
    "protocol": ("protocol/x.py", "from meshtui.controller.core import Controller\n"),
    "protocol-host": ("protocol/x.py", "from meshtui.host.state import guard\n"),
    "contracts": ("contracts/x.py", "from meshtui.provisioner.harness import reconcile\n"),
    "kind-host": ("kinds/redis/probe.py", "from meshtui.host.probe_runner import run\n"),
    "rooms": ("controller/agents/x.py", "from meshtui.controller.act.push import push\n"),
    "rooms-core": ("controller/act/x.py", "from meshtui.controller.core import Controller\n"),
    "rooms-plan": ("controller/plan/x.py", "from meshtui.controller.read import status\n"),
    "rooms-host": ("host/state/x.py", "from meshtui.host.receive import delivery\n"),
    "rooms-server": ("host/receive/x.py", "from meshtui.host.server.routes import Agent\n"),
    "registry-own-secrets": ("controller/act/x.py", "from meshtui.kinds.openbao import client\n"),
    "lab-keys": ("lab/x.py", "from meshtui.controller.plan import declaration\n"),
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
        ("controller", "controller/x.py", "from meshtui.host.server import routes as agent\n"),
        ("provisioner", "provisioner/x.py", "import meshtui.host.credential_files\n"),
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
