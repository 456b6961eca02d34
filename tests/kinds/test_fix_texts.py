"""What doctor and the kinds tell an operator to do never sends them into the source tree: an
operator who installed the wheel has none. Every string literal of a kind's doctor and of the
controller's doctor is read (through the AST, so a new message is covered without a list), and
none may name a ``.py`` file or a path under ``meshtui/``."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import meshtui

ROOT = Path(meshtui.__file__).parent
SOURCE = re.compile(r"meshtui/\S+|\b\w+\.py\b")


def _doctor_modules() -> list[Path]:
    return sorted([*ROOT.glob("kinds/*/doctor.py"), ROOT / "controller/read/doctor.py"])


def test_every_doctor_is_read() -> None:
    found = {p.parent.name for p in _doctor_modules()}
    assert {"openbao", "read"} <= found, found


def test_no_fix_names_a_source_file() -> None:
    named: list[str] = []
    for path in _doctor_modules():
        tree = ast.parse(path.read_text())
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.FunctionDef | ast.ClassDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docstrings
                and SOURCE.search(node.value)
            ):
                named.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    assert not named, "\n".join(named)
