"""scripts/manual.py (the manual's build and command reference) loaded as a module for the tests."""

from __future__ import annotations

import importlib.util
import sys
from functools import cache
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).parents[2]


@cache
def manual() -> ModuleType:
    """The module scripts/manual.py, loaded once."""
    spec = importlib.util.spec_from_file_location("manual", ROOT / "scripts" / "manual.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["manual"] = module
    spec.loader.exec_module(module)
    return module
