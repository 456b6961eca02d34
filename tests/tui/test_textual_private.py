"""The private Textual internals behind meshtui/tui/textual_private.py still exist as used.

When a Textual upgrade renames or reshapes one of them, this fails and names it; fix the
adapter (or find the public API that replaced it) before moving the pin.
"""

from __future__ import annotations

import inspect
import tomllib
from pathlib import Path

import textual
from textual.geometry import Size
from textual.reactive import Reactive
from textual.widget import Widget
from textual.widgets import Footer

from meshtui.tui import textual_private

ROOT = Path(__file__).resolve().parents[2]


def test_the_adapter_was_checked_against_the_pinned_textual() -> None:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert f"textual=={textual_private.PINNED_TEXTUAL}" in deps
    assert textual.__version__ == textual_private.PINNED_TEXTUAL


def test_footer_bindings_ready_is_a_false_reactive() -> None:
    ready = Footer.__dict__.get("_bindings_ready")
    assert isinstance(ready, Reactive), "Footer._bindings_ready is gone or no longer a reactive"
    assert ready._default is False
    assert "_bindings_ready" in inspect.getsource(Footer.compose), (
        "Footer.compose no longer waits for _bindings_ready: footer_ready may be useless"
    )


def test_widget_scroll_update_takes_the_virtual_size() -> None:
    update = Widget.__dict__.get("_scroll_update")
    assert callable(update), "Widget._scroll_update is gone"
    params = list(inspect.signature(update).parameters)
    assert params == ["self", "virtual_size"], params
    hints = inspect.get_annotations(update, eval_str=True)
    assert hints.get("virtual_size") is Size
