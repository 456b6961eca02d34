"""What every meshtui screen shares: the typed app, the read-only guard and its scope's keys."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, cast

from textual.message import Message
from textual.screen import ModalScreen, Screen
from textual.worker import Worker, WorkerState

if TYPE_CHECKING:
    from meshtui.controller.core import Controller
    from meshtui.tui.app import MeshApp


class MeshScreen(Screen[Any]):
    """A full screen of the dashboard; ``SCOPE`` names its bindings in the action registry."""

    SCOPE: ClassVar[str] = ""

    def __init__(self, name: str | None = None, id: str | None = None) -> None:
        super().__init__(name=name, id=id)
        self._contexts: dict[str, str] = {}  # background read's name -> what its error says

    @property
    def mesh(self) -> MeshApp:
        """The app, typed."""
        return cast("MeshApp", self.app)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return self.mesh.allows(action)

    def read_in_background(
        self,
        read: Callable[[Controller], Message],
        *,
        name: str,
        context: str,
        reader: bool = True,
    ) -> None:
        """Run ``read`` with a fresh controller in a thread and post the message it returns.

        A newer read of the same ``name`` replaces an older one; an error is reported once, by
        the app's error boundary, as "``context`` failed". ``reader`` False: the read asks the
        agents, so it opens the dashboard's own kind of controller.
        """
        self._contexts[name] = context

        def work() -> None:
            with self.mesh.open_controller(reader=reader) as ctl:
                message = read(ctl)
            self.post_message(message)

        self.run_worker(
            work, name=name, group=name, exclusive=True, thread=True, exit_on_error=False
        )

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        worker: Worker[Any] = event.worker
        if event.state is WorkerState.ERROR and worker.error is not None:
            name = worker.name or ""
            self.mesh.report_error(
                worker.error, self._contexts.get(name, name or "background work")
            )

    def pairs_changed(self, changes: Any, first: bool) -> None:
        """A fresh load arrived (screens showing pairs override this)."""

    def job_changed(self) -> None:
        """A job started, advanced or ended (screens showing it override this)."""

    def action_back(self) -> None:
        """Close this screen."""
        if len(self.app.screen_stack) > 1 and self.app.screen is self:
            self.app.pop_screen()


class MeshModal(ModalScreen[bool]):
    """A dialog that answers yes or no; escape and the default focus mean no."""

    SCOPE: ClassVar[str] = "dialog"

    @property
    def mesh(self) -> MeshApp:
        """The app, typed."""
        return cast("MeshApp", self.app)

    def action_cancel(self) -> None:
        """Close, doing nothing."""
        self.dismiss(False)
