"""A test run's temporary folders carry its mark, and a sweep of that run removes them: the
folders of a run whose owner is gone, never those of a live run, an unmarked folder, or a link
that only looks like one."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from meshtui.lab import runs
from meshtui.runas import RUN_ENV


def _folder(mark: str | None) -> Path:
    folder = Path(tempfile.mkdtemp(prefix="meshtui-runfolders-"))
    if mark is not None:
        (folder / runs.FOLDER_MARK).write_text(mark)
    return folder


@pytest.fixture
def made() -> Iterator[list[Path]]:
    """Folders a test makes in the system's temp folder, removed after whatever happened."""
    folders: list[Path] = []
    yield folders
    for folder in folders:
        if folder.is_symlink():
            folder.unlink()
        else:
            shutil.rmtree(folder, ignore_errors=True)


def test_a_gone_runs_folders_are_swept_and_nothing_else(made: list[Path]) -> None:
    gone = runs.Run(pid=2**22 + 12345, started=1)  # no such process: its owner is gone
    live = runs.Run(os.getppid(), runs._started(os.getppid()) or 0)
    assert not gone.alive() and live.alive()
    swept = _folder(gone.mark)
    kept_live, unmarked = _folder(live.mark), _folder(None)
    target = _folder(gone.mark)  # the mark reached through a link: never followed
    link = target.with_name(f"{target.name}-link")
    link.symlink_to(target, target_is_directory=True)
    made += [swept, kept_live, unmarked, target, link]
    os.unlink(target / runs.FOLDER_MARK)
    (target / runs.FOLDER_MARK).symlink_to(swept / runs.FOLDER_MARK)  # a mark that is a link
    done = runs.sweep(lambda run: run == gone)
    assert f"removed {swept} of run {gone.mark}" in done
    assert not swept.exists()
    assert kept_live.is_dir() and unmarked.is_dir() and target.is_dir() and link.is_symlink()


def test_a_folder_is_marked_only_inside_a_run(
    made: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    outside = _folder(None)
    made.append(outside)
    monkeypatch.delenv(RUN_ENV, raising=False)
    runs.mark_folder(outside)
    assert not (outside / runs.FOLDER_MARK).exists()
    monkeypatch.setenv(RUN_ENV, "4242.7")
    runs.mark_folder(outside)
    assert (outside / runs.FOLDER_MARK).read_text() == "4242.7"
    assert runs.marked_folders(lambda run: run == runs.Run(4242, 7)) == {outside: runs.Run(4242, 7)}
