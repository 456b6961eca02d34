"""``?``: every binding of every screen with the keys in force, and where keys are remapped.

It is built from the action registry and the loaded keymap, so it cannot drift from what the
keys do. In a read-only dashboard the actions that change things are not listed (they do not
exist there), and a line says so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, cast

from rich import box
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Label, Static

from meshtui.tui import actions
from meshtui.tui.keymap import config_paths

if TYPE_CHECKING:
    from meshtui.tui.dashboard import Dashboard


def help_table(keymap: dict[str, str], read_only: bool) -> Table:
    """One table: scope, keys, what it does, and the id to remap it with."""
    table = Table(box=box.SIMPLE_HEAD, expand=True)
    table.add_column("keys", no_wrap=True, style="bold")
    table.add_column("action")
    table.add_column("id (for the keymap)", style="dim", no_wrap=True)
    listed: set[str] = set()
    for scope, title in actions.SCOPES.items():
        acts = [
            a
            for a in actions.in_scope(scope)
            if not (read_only and a.action in actions.READ_ONLY_OFF) and a.id not in listed
        ]
        listed.update(a.id for a in acts)
        if not acts:
            continue
        table.add_row(Text(title, style="bold underline"), Text(""), Text(""))
        for a in acts:
            keys = actions.show_keys(keymap.get(a.id, a.keys))
            table.add_row(Text(keys), Text(f"{a.description}: {a.help}"), Text(a.id))
    table.add_row(Text("ctrl+q"), Text("Quit, whatever the keymap says"), Text(""))
    table.add_row(Text("ctrl+p"), Text("Command palette (also :)"), Text(""))
    return table


class HelpScreen(ModalScreen[None]):
    """Every key."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,question_mark,f1", "close", "Close", id="help-close"),
    ]

    def compose(self) -> ComposeResult:
        mesh = cast("Dashboard", self.app)
        with Vertical(id="help"):
            yield Label(Text("meshtui keys", style="bold"), id="help-title")
            with VerticalScroll(id="help-body"):
                if mesh.read_only:
                    yield Static(
                        Text(
                            "READ-ONLY: rotate, drill, probe, push and agent checks do not "
                            "exist here; the controller never loads its key and refuses "
                            "anything that would contact an agent.",
                            style="bold",
                        ),
                        id="help-readonly",
                    )
                yield Static(help_table(mesh.keymap, mesh.read_only), id="help-table")
                yield Static(self._keymap_text(mesh), id="help-keymap")

    def _keymap_text(self, mesh: Dashboard) -> Text:
        text = Text("\nRemap keys in a [keymap] table (later files win):\n", style="bold")
        for path in config_paths(mesh.state_dir):
            used = " (read)" if path in mesh.keymap_sources else ""
            text.append(f"  {path}{used}\n")
        text.append('e.g.  [keymap]\n       rotate = "ctrl+r"\n       help = "question_mark,f1"\n')
        for problem in mesh.keymap_problems:
            text.append(f"  ! {problem}\n", style="bold")
        return text

    def action_close(self) -> None:
        """Close help."""
        self.dismiss(None)
