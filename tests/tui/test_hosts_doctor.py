"""The hosts screen runs ``meshtui doctor`` (``d``) and shows its lines: real agents, the
session's PostgreSQL through the built-in provisioner."""

from __future__ import annotations

from typing import Any

import pytest
from textual.widgets import Static

from meshtui.tui.screens.hosts import HostsScreen
from tests.tui.helpers import RecordingApp, settle

pytestmark = pytest.mark.slow


@pytest.fixture
def mesh(mesh_with_agents: Any, pg: Any, pg_clean: Any, pg_admin_file: Any) -> Any:
    m = mesh_with_agents(consumers={"app1": ["gitea"]}, port=pg.port, admin=pg_admin_file)
    with m.controller() as ctl:
        assert ctl.push().ok
    return m


async def doctor_lines(app: RecordingApp, pilot: Any) -> str:
    await pilot.press("d")
    for _ in range(300):
        await settle(pilot, rounds=1)
        text = str(app.screen.query_one("#host-doctor", Static).render())
        if "problems;" in text:
            return text
        await pilot.pause(0.05)
    raise AssertionError(f"doctor never finished: {app.toast_text()}")


async def test_the_hosts_screen_shows_doctors_lines(mesh: Any) -> None:
    app = RecordingApp(mesh.state, screen="hosts")
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, HostsScreen)
        clean = await doctor_lines(app, pilot)
        assert clean.startswith("doctor: 0 problems; 2 of 2 nodes answered"), clean
        mesh.stop("app1")
        broken = await doctor_lines(app, pilot)
    assert broken.startswith("doctor: 1 problems; 1 of 2 nodes answered"), broken
    assert "app1 reach app1: the agent does not answer" in broken
    assert "-> start meshtui host serve on app1" in broken
