"""docs/troubleshooting.md has a row for every error class meshtui raises, with its exit code."""

from __future__ import annotations

import inspect

import pytest

from meshtui import errors
from tests.docs.manual import ROOT

PAGE = (ROOT / "docs" / "troubleshooting.md").read_text()
CLASSES = [
    cls
    for _name, cls in inspect.getmembers(errors, inspect.isclass)
    if issubclass(cls, errors.MeshtuiError)
]


def test_there_are_errors_to_document() -> None:
    assert len(CLASSES) > 20


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
def test_every_error_has_its_row_and_exit_code(cls: type[errors.MeshtuiError]) -> None:
    row = f"| `{cls.__name__}` | {cls.exit_code} |"
    assert row in PAGE, f"docs/troubleshooting.md: no row {row!r}"
