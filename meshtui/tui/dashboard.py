"""What a screen asks of the dashboard app: its state and the few calls that start work or show
an outcome. Screens and the palette hold this shape, not the app class, so the app imports its
screens and no screen imports the app back (Harlequin's components reach their app the same way).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    from textual.actions import ActionParseResult
    from textual.dom import DOMNode

    from meshtui.controller.core import Controller
    from meshtui.controller.reports import Summary
    from meshtui.tui.events import Job
    from meshtui.tui.pairs import PairModel

Clock = Callable[[], datetime]
"""The dashboard's idea of now (tests pass a fixed one)."""

Read = TypeVar("Read")


class Dashboard(Protocol):
    """The dashboard app as its screens see it."""

    state_dir: Path
    read_only: bool
    clock: Clock
    model: PairModel
    summary: Summary | None
    loaded_once: bool
    note: str
    job: Job | None
    job_progress: tuple[str, int, int] | None
    watch_line: str
    keymap: dict[str, str]
    keymap_sources: list[Path]
    keymap_problems: list[str]

    def read(self, read: Callable[[Controller], Read], *, reader: bool = True) -> Read:
        """Run ``read`` on a read-only controller of the state folder."""
        ...

    def allows(self, action: str) -> bool:
        """Whether ``action`` may run here (read-only refuses the ones that change anything)."""
        ...

    def reload(self) -> None:
        """Read the inventory again."""
        ...

    def plan_job(self, job: Job) -> None:
        """Resolve what ``job`` would touch, then ask before running it."""
        ...

    def start_job(self, job: Job) -> None:
        """Run ``job`` in the background."""
        ...

    def confirm_job(self, job: Job, question: str) -> None:
        """Ask ``question`` (Cancel by default), then run ``job``."""
        ...

    def report_error(self, error: BaseException, context: str) -> None:
        """Show ``error`` as "``context`` failed" (the one error boundary)."""
        ...

    def copy_value(self, what: str, value: str) -> None:
        """Copy ``value`` to the clipboard, naming ``what`` was copied."""
        ...

    def live_ids(self, keys: Iterable[str]) -> list[str]:
        """The pairs among ``keys`` that are not withdrawn."""
        ...

    def action_pairs(self) -> None:
        """Show the pairs' list."""
        ...

    async def run_action(
        self, action: str | ActionParseResult, default_namespace: DOMNode | None = None
    ) -> bool:
        """Textual's: run an action by its string."""
        ...
