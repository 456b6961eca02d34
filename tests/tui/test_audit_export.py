"""The audit export is as private as the inventory: 0600 whatever the umask, written whole."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from meshtui.tui.events import Exported
from meshtui.tui.screens.audit import AuditScreen
from tests.tui.helpers import settle


@pytest.fixture
def permissive_umask() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


async def test_export_is_0600_under_a_permissive_umask(
    make_app: Any, tmp_path: Path, permissive_umask: None
) -> None:
    out = tmp_path / "exports"
    out.mkdir()
    messages: list[Any] = []
    app = make_app(read_only=True, screen="audit")
    async with app.run_test(size=(140, 36), message_hook=messages.append) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, AuditScreen)
        screen.export_folders = [out]
        await pilot.press("e")
        await settle(pilot)
        await pilot.press("x")
        await settle(pilot)
    paths = [Path(m.path) for m in messages if isinstance(m, Exported)]
    assert [p.suffix for p in paths] == [".json", ".csv"]
    for path in paths:
        assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600, path
    assert json.loads(paths[0].read_text())[0]["kind"] == "declare"
    # written whole through a temp file, and nothing left beside the exports
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in paths)


def test_export_never_replaces_a_file_and_names_it(tmp_path: Path, permissive_umask: None) -> None:
    from meshtui.controller.records.export import write_export

    target = tmp_path / "meshtui-audit.json"
    target.write_text("someone's file\n")
    with pytest.raises(FileExistsError) as err:
        write_export(target, "[]\n")
    assert str(target) in str(err.value)
    assert target.read_text() == "someone's file\n"
    dangling = tmp_path / "link.json"
    dangling.symlink_to(tmp_path / "nowhere.json")
    with pytest.raises(FileExistsError):
        write_export(dangling, "[]\n")
    assert not (tmp_path / "nowhere.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "meshtui-audit.json"]
    fresh = tmp_path / "new.csv"
    write_export(fresh, "seq\n1\n")
    assert fresh.read_text() == "seq\n1\n"
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o600
