"""Two small dialogs: a yes/no question that defaults to Cancel, and the unexpected-error modal.

Expected failures (a node down, a read-only refusal) are toasts; the error modal is for what the
code did not expect, with the exception's type and text shown literally.
"""

from __future__ import annotations

import traceback
from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Button, Label, Static

from meshtui.terminal import shown
from meshtui.tui import actions
from meshtui.tui.screens.base import MeshModal


class ConfirmScreen(MeshModal):
    """Ask before doing something; focus starts on Cancel and escape cancels."""

    BINDINGS: ClassVar[list[BindingType]] = actions.bindings("dialog")
    AUTO_FOCUS = "#cancel"

    def __init__(self, title: str, question: str, *, confirm: str = "Confirm") -> None:
        super().__init__()
        self.title_text, self.question, self.confirm_label = title, question, confirm

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label(Text(f"{self.title_text}?", style="bold"), id="dialog-title")
            yield Static(Text(self.question), id="dialog-question")
            with Horizontal(id="dialog-buttons"):
                yield Button("Cancel", id="cancel", variant="primary")
                yield Button(self.confirm_label, id="confirm", variant="error")

    def on_mount(self) -> None:
        self.query_one("#cancel", Button).focus()

    @on(Button.Pressed, "#cancel")
    def _cancel(self) -> None:
        self.dismiss(False)

    @on(Button.Pressed, "#confirm")
    def _confirm(self) -> None:
        self.dismiss(True)


class ErrorScreen(MeshModal):
    """Something failed that the code did not expect: what, and where."""

    BINDINGS: ClassVar[list[BindingType]] = actions.bindings("dialog")
    AUTO_FOCUS = "#close"

    def __init__(self, title: str, error: BaseException) -> None:
        super().__init__()
        self.title_text, self.error = title, error

    def compose(self) -> ComposeResult:
        lines = traceback.format_exception(type(self.error), self.error, self.error.__traceback__)
        with Vertical(id="dialog", classes="error"):
            yield Label(Text(self.title_text, style="bold"), id="dialog-title")
            said = shown(f"{type(self.error).__name__}: {self.error}")
            yield Static(Text(said), id="dialog-question")
            with VerticalScroll(id="error-trace"):
                yield Static(Text(shown("".join(lines[-12:])), style="dim"))
            with Horizontal(id="dialog-buttons"):
                yield Button("Close", id="close", variant="primary")

    @on(Button.Pressed, "#close")
    def _close(self) -> None:
        self.dismiss(False)
