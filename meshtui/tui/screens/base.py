"""What every meshtui screen shares: the typed app, the read-only guard and its scope's keys."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, cast

from textual.screen import ModalScreen, Screen

if TYPE_CHECKING:
    from meshtui.tui.app import MeshApp


class MeshScreen(Screen[Any]):
    """A full screen of the dashboard; ``SCOPE`` names its bindings in the action registry."""

    SCOPE: ClassVar[str] = ""

    @property
    def mesh(self) -> MeshApp:
        """The app, typed."""
        return cast("MeshApp", self.app)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return self.mesh.allows(action)

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
