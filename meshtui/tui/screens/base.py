"""What every meshtui screen shares: the typed app, the read-only guard, its scope's keys, and
the one way the dashboard does work in the background (:func:`run_in_background`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, cast

from textual.dom import DOMNode
from textual.message import Message
from textual.screen import ModalScreen, Screen
from textual.worker import Worker, WorkerState

if TYPE_CHECKING:
    from meshtui.controller.core import Controller
    from meshtui.tui.dashboard import Dashboard


def run_in_background(
    owner: DOMNode,
    work: Callable[[], Message],
    *,
    name: str,
    context: str,
    exclusive: bool = True,
    failed: Callable[[Exception], Message] | None = None,
) -> None:
    """Run ``work`` in a thread worker of ``owner`` and post the message it returns to ``owner``.

    The dashboard's one background loader (the app's loads and jobs, every screen's reads).
    ``exclusive``: a newer worker of the same ``name`` replaces an older one. When ``work``
    raises, ``failed`` turns the error into the message posted instead; without it the worker
    ends in error and its owner reports it once, through the app's error boundary, as
    "``context`` failed" (the worker's description carries the context).
    """

    def run() -> None:
        try:
            message = work()
        except Exception as exc:
            if failed is None:
                raise
            message = failed(exc)
        owner.post_message(message)

    owner.run_worker(
        run,
        name=name,
        group=name,
        description=context,
        exclusive=exclusive,
        thread=True,
        exit_on_error=False,
    )


def failure_context(worker: Worker[Any]) -> str:
    """What a failed worker was doing, for "… failed" (see :func:`run_in_background`)."""
    return worker.description or worker.name or "background work"


class MeshScreen(Screen[Any]):
    """A full screen of the dashboard; ``SCOPE`` names its bindings in the action registry."""

    SCOPE: ClassVar[str] = ""

    @property
    def mesh(self) -> Dashboard:
        """The app, typed."""
        return cast("Dashboard", self.app)

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
        mesh = self.mesh
        run_in_background(self, lambda: mesh.read(read, reader=reader), name=name, context=context)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        worker: Worker[Any] = event.worker
        if event.state is WorkerState.ERROR and worker.error is not None:
            self.mesh.report_error(worker.error, failure_context(worker))

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
    def mesh(self) -> Dashboard:
        """The app, typed."""
        return cast("Dashboard", self.app)

    def action_cancel(self) -> None:
        """Close, doing nothing."""
        self.dismiss(False)
