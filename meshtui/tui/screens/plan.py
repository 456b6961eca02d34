"""The rotation plan: which pairs, which nodes, and whether every node answered, before anything
is minted. Focus starts on Cancel; escape cancels; the confirm button stays disabled unless
every affected node resolved (a rotation is all-or-nothing, so a plan with a missing node could
only fail).
"""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Button, Label, LoadingIndicator, Static

from meshtui.controller.reports import RotationPlan
from meshtui.terminal import shown
from meshtui.tui import actions
from meshtui.tui.events import Job, JobKind, PlanReady
from meshtui.tui.screens.base import MeshModal, run_in_background

SHOWN_PAIRS = 12


def plan_text(plan: RotationPlan) -> Text:
    """The plan in words: pairs, then each node resolved (✓) or not (✗) with the reason."""
    text = Text()
    text.append(f"{len(plan.pairs)} pair{'' if len(plan.pairs) == 1 else 's'}\n", "bold")
    for pid in plan.pairs[:SHOWN_PAIRS]:
        text.append(f"  {pid}\n")
    if len(plan.pairs) > SHOWN_PAIRS:
        text.append(f"  … and {len(plan.pairs) - SHOWN_PAIRS} more\n", "dim")
    text.append(f"\n{len(plan.nodes)} nodes affected\n", "bold")
    for node in plan.nodes:
        mark, style = ("✓ resolved", "green") if node.ok else ("✗ NOT resolved", "bold red")
        text.append(f"  {mark:<15}", style)
        text.append(f"{node.node:<12} ")
        text.append(shown(node.reason), "dim")  # an agent's words: shown, never obeyed
        n = len(node.pairs)
        text.append(f"  ({n} pair{'' if n == 1 else 's'})\n", "dim")
    if plan.ok:
        text.append(
            "\nEvery node answered. A new credential is minted per pair, delivered to both "
        )
        text.append("ends, and the outcome of each pair is shown with its window.")
    else:
        text.append("\nNot every node answered: nothing will be minted or sent, ", "bold")
        text.append("and the old credentials keep working. Bring the node's agent back first.")
    return text


class PlanScreen(MeshModal):
    """The plan of a rotation or drill; dismisses True only when the operator confirms."""

    BINDINGS: ClassVar[list[BindingType]] = actions.bindings("dialog")
    AUTO_FOCUS = "#cancel"

    def __init__(self, job: Job) -> None:
        super().__init__()
        self.job = job
        self.plan: RotationPlan | None = None
        self.error: BaseException | None = None

    def compose(self) -> ComposeResult:
        verb = "Drill" if self.job.kind is JobKind.DRILL else "Rotate"
        with Vertical(id="dialog", classes="plan"):
            yield Label(Text(f"{self.job.title}?", style="bold"), id="dialog-title")
            yield Static(
                Text("Resolving every affected node (each agent must answer and prove its key)…"),
                id="plan-status",
            )
            yield LoadingIndicator(id="plan-loading")
            with VerticalScroll(id="plan-body"):
                yield Static(id="plan-text")
            with Horizontal(id="dialog-buttons"):
                yield Button("Cancel", id="cancel", variant="primary")
                yield Button(
                    f"{verb} {len(self.job.ids)}", id="confirm", variant="error", disabled=True
                )

    def on_mount(self) -> None:
        self.query_one("#cancel", Button).focus()
        ids, mesh = self.job.ids, self.mesh
        run_in_background(
            self,
            lambda: mesh.read(lambda ctl: PlanReady(ctl.plan_rotation(ids)), reader=False),
            name="plan",
            context="plan",
            failed=lambda exc: PlanReady(None, exc),  # shown here and by the app's boundary
        )

    @on(PlanReady)
    def _ready(self, message: PlanReady) -> None:
        message.stop()
        self.query_one("#plan-loading", LoadingIndicator).display = False
        status = self.query_one("#plan-status", Static)
        if message.plan is None:
            self.error = message.error
            status.update(Text(shown(f"The plan failed: {message.error}"), style="bold red"))
            if message.error is not None:
                self.mesh.report_error(message.error, "plan")
            return
        self.plan = message.plan
        status.update(
            Text("Ready: every node resolved.", style="green")
            if message.plan.ok
            else Text("Blocked: a node did not resolve.", style="bold red")
        )
        self.query_one("#plan-text", Static).update(plan_text(message.plan))
        self.query_one("#confirm", Button).disabled = not message.plan.ok

    @on(Button.Pressed, "#cancel")
    def _cancel(self) -> None:
        self.dismiss(False)

    @on(Button.Pressed, "#confirm")
    def _confirm(self) -> None:
        if self.plan is not None and self.plan.ok:
            self.dismiss(True)
