"""The key footer, rebuilt only when the keys it shows changed.

Textual's ``Footer`` removes and mounts all its key widgets again every time the screen's
bindings are refreshed: on every focus change and every screen switch, several times while
the dashboard starts (about 20 ms each, on the same interpreter that is reading 10,000 pairs).
Most of those refreshes change nothing the footer shows, so this one compares first.

Like the stock footer it starts empty and fills itself just after the screen's first frame:
its fifteen key widgets cost more to style and draw (about 55 ms) than the rest of the main
screen together, so the first frame, with the pairs, does not wait for them.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.widgets import Footer

from meshtui.tui.textual_private import footer_ready


class MeshFooter(Footer):
    """A compact ``Footer`` that skips a rebuild when its keys are the same as last time."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(compact=True, id=id)
        self._composed: object = None

    def _keys_shown(self) -> object:
        """Everything the footer's compose reads from the active bindings, as one value."""
        app = self.app
        return (
            self.show_command_palette and app.ENABLE_COMMAND_PALETTE,
            tuple(
                (
                    key,
                    binding.action,
                    binding.description,
                    app.get_key_display(binding),
                    binding.show,
                    binding.group,
                    enabled,
                    tooltip,
                )
                for key, (_, binding, enabled, tooltip) in self.screen.active_bindings.items()
                if binding.show or key == app.COMMAND_PALETTE_BINDING
            ),
        )

    def compose(self) -> ComposeResult:
        self._composed = self._keys_shown() if footer_ready(self) else None
        yield from super().compose()

    async def recompose(self) -> None:
        if not self.is_attached:
            return
        shown = self._keys_shown() if footer_ready(self) else None
        if shown is not None and shown == self._composed:
            return
        self._composed = shown
        await super().recompose()
