"""The private Textual internals the dashboard relies on, in one place.

Textual has no public way to do these things, and each saves a whole layout or compose
pass on a hot path. tests/tui/test_textual_private.py checks every name and signature used
here against the pinned Textual (pyproject.toml), so an upgrade that changes them fails loudly
there instead of quietly slowing the dashboard down or breaking its footer.
"""

from __future__ import annotations

from textual.geometry import Size
from textual.widget import Widget
from textual.widgets import Footer

PINNED_TEXTUAL = "8.2.8"
"""The Textual version these internals were checked against."""


def footer_ready(footer: Footer) -> bool:
    """Whether a Footer has its bindings (``_bindings_ready``): it starts empty until then, and
    fills itself after the screen's first refresh."""
    return bool(footer._bindings_ready)


def update_scrollbars(widget: Widget, virtual_size: Size) -> None:
    """Resize a widget's scrollbars and clamp its scroll for ``virtual_size``, with no layout.

    Setting ``virtual_size`` (a layout reactive) re-arranges the whole screen, and for a
    ScrollView that ends only in ``Widget._scroll_update``: call that part directly.
    """
    widget._scroll_update(virtual_size)
