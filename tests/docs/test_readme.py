"""The README stays a front page: short, its two set-up commands the ones CI runs, and every
link into the manual reaching a page the manual's navigation lists."""

from __future__ import annotations

import re
from pathlib import Path

from tests.docs.manual import ROOT, manual

README = (ROOT / "README.md").read_text()
LINKS = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)


def test_the_readme_is_short() -> None:
    assert len(README.splitlines()) <= 300


def test_the_test_command_is_the_one_ci_runs() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    pytest_line = next(line for line in ci.splitlines() if line.startswith(".venv/bin/pytest"))
    assert f"pip install -e '.[dev]' && {pytest_line}\n" in README
    assert (
        "pip install -e '.[lab]' && .venv/bin/meshtui --state /var/lib/meshtui-demo demo" in README
    )


def test_every_link_reaches_a_file_and_every_page_is_in_the_nav() -> None:
    pages = set(manual().nav_pages())
    assert LINKS
    for link in LINKS:
        if link.startswith("http"):
            continue
        assert (ROOT / link).exists(), link
        if link.startswith("docs/") and link.endswith(".md"):
            assert link.removeprefix("docs/") in pages, f"{link} is not in zensical.toml's nav"


def test_the_restore_the_node_policy_and_several_controllers_are_one_click_away() -> None:
    for page in ("docs/backup-restore.md", "docs/node-allows.md", "docs/several-controllers.md"):
        assert page in LINKS, page
    assert "## Restoring, at 3 a.m." in Path(ROOT / "docs" / "backup-restore.md").read_text()


def test_the_first_command_keeps_roots_state_where_only_root_can_write() -> None:
    first = re.search(r"meshtui --state (\S+) demo", README)
    assert first is not None, "README.md's first command runs the demo"
    folder = Path(first.group(1))
    assert folder.parent in (Path("/var/lib"), Path("/opt"), Path("/srv")), folder
