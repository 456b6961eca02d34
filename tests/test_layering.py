"""Each folder is one room: who may import whom, checked on the source with ``ast``."""

from __future__ import annotations

import ast
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


def under(name: str, *roots: str) -> bool:
    return any(name == r or name.startswith(r + ".") for r in roots)


def rel(path: Path) -> str:
    return path.relative_to(PACKAGE.parent).as_posix()


def violations(rule: str) -> list[str]:
    out = []
    for path in FILES:
        where = rel(path)
        for name in sorted(imports(path)):
            if rule == "ui" and not where.startswith("meshtui/tui/"):
                bad = under(name, "textual", "rich")
            elif rule == "controller" and where.startswith("meshtui/controller/"):
                bad = under(name, "meshtui.host", "meshtui.provisioner", "meshtui.tui")
            elif rule == "hands" and where.startswith(("meshtui/host/", "meshtui/provisioner/")):
                bad = under(name, "meshtui.controller", "meshtui.inventory")
            elif rule == "nacl" and where != "meshtui/crypto.py":
                bad = under(name, "nacl")
            else:
                bad = False
            if bad:
                out.append(f"{where} imports {name}")
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


def test_importing_controller_and_cli_loads_no_ui() -> None:
    code = (
        "import sys, meshtui.controller.core, meshtui.cli\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'rich')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]", out.stdout
