"""The manual builds strictly, and its real-mesh page renders in a real headless Chromium with
its navigation and its search (the search worker loads the site's index)."""

from __future__ import annotations

import functools
import http.server
import json
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.docs.manual import manual

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    project = tmp_path_factory.mktemp("manual")
    done = manual().build(project)
    assert done.returncode == 0, done.stdout + done.stderr
    return project / "site"


def test_every_page_is_in_the_nav_and_every_nav_entry_is_a_page() -> None:
    assert manual().pages_outside_nav() == []
    assert manual().missing_pages() == []


def test_a_page_outside_the_nav_is_found(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    shutil.copytree(manual().DOCS, docs, ignore=shutil.ignore_patterns("*.svg"))
    (docs / "kinds" / "stray.md").write_text("# Stray\n")
    assert manual().pages_outside_nav(docs=docs) == ["kinds/stray.md"]


def test_a_broken_link_fails_the_strict_build(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    shutil.copytree(manual().DOCS, docs, ignore=shutil.ignore_patterns("*.svg"))
    page = docs / "several-controllers.md"
    page.write_text(page.read_text() + "\nSee [the missing page](nowhere.md).\n")
    done = manual().build(tmp_path)
    said = re.sub(r"\x1b\[[0-9;]*m", "", done.stdout + done.stderr)
    assert done.returncode != 0
    assert "page does not exist" in said and "several-controllers.md" in said, said


def test_the_site_has_every_page_and_a_search_index(site: Path) -> None:
    for page in manual().nav_pages():
        built = page.removesuffix(".md")
        built = built.removesuffix("index") if built.endswith("index") else built + "/"
        assert (site / built / "index.html").is_file(), page
    index = json.loads((site / "search.json").read_text())
    assert any(item["location"].startswith("real-mesh/") for item in index["items"])


class _Recording(http.server.SimpleHTTPRequestHandler):
    """Serves the site and records every path asked for."""

    asked: list[str]

    def log_message(self, format: str, *args: object) -> None:
        self.asked.append(self.path)


@pytest.fixture
def served(site: Path) -> Iterator[tuple[str, list[str]]]:
    asked: list[str] = []
    handler = type("Handler", (_Recording,), {"asked": asked})
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(handler, directory=str(site))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", asked
    finally:
        server.shutdown()
        server.server_close()


def test_the_real_mesh_page_renders_in_chromium_with_its_navigation_and_search(
    served: tuple[str, list[str]],
) -> None:
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("Debian's chromium is not installed (.ci/run installs it)")
    url, asked = served
    with tempfile.TemporaryDirectory() as profile:
        done = subprocess.run(
            [
                chromium,
                *CHROMIUM_FLAGS,
                f"--user-data-dir={profile}",
                "--virtual-time-budget=10000",
                "--dump-dom",
                f"{url}/real-mesh/",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    dom = done.stdout
    assert done.returncode == 0, done.stderr[-2000:]
    assert re.search(r'<h1 id="a-real-mesh[^"]*">A real mesh', dom), dom[:2000]
    for page in ("node-allows/", "backup-restore/", "several-controllers/", "kinds/redis/"):
        assert f'href="../{page}"' in dom, page
    assert 'class="md-search' in dom
    assert "/search.json" in asked, asked
    assert any(path.startswith("/assets/javascripts/workers/search") for path in asked), asked
