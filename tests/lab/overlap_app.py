"""What the lab's overlap tests with a reconnecting app share: the pair declared an overlap with
its credential file a unit (the login with the password), and the app run in the consumer's
namespace while the test acts, its output read back.

The app prints its connections and refusals on its first line, then each (login, SHA-256 of
the password) it read together, one per line. A *straddled* read is a password read beside a
login other than its own: each password is one generation's, held by one login."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from meshtui.controller.core import Controller
from meshtui.model import node_of


def declare_overlap(state: Path, built: Any, pattern: str, replacement: str) -> None:
    """The lab's declaration with its one requirement matching ``pattern`` rewritten (made an
    overlap with its unit), declared and pushed."""
    text, needs = re.subn(pattern, replacement, built.declaration.read_text())
    assert needs == 1, text
    overlapped = state / "overlap.toml"
    overlapped.write_text(text)
    with Controller.open(state) as ctl:
        ctl.declare(overlapped)
        assert ctl.push().ok


def ready(stop: Path, proc: subprocess.Popen[str], within_s: float = 60.0) -> None:
    """Wait until the app beside ``stop`` has made its first connection (it creates
    ``<stop>.ready`` then): on a loaded machine its start alone can take seconds, and a test
    that acts before it connects counts nothing."""
    marker = Path(f"{stop}.ready")
    deadline = time.monotonic() + within_s
    while not marker.exists():
        if proc.poll() is not None:
            said = proc.stderr.read()[-3000:] if proc.stderr is not None else ""
            raise AssertionError(f"the app ended before its first connection: {said}")
        if time.monotonic() > deadline:
            raise AssertionError(f"the app made no connection within {within_s:g} s")
        time.sleep(0.05)


@dataclass(frozen=True)
class Counted:
    """What the app saw while the test acted, and what each act returned."""

    tries: int
    refused: int
    straddled: int
    results: list[Any]


def run_app(
    state: Path,
    built: Any,
    pair: str,
    app: str,
    args: list[str],
    held: Callable[[], tuple[str, str]],
    act: Callable[[], Any],
    rounds: int = 1,
) -> Counted:
    """Run ``app`` (its source, with ``args`` and a stop file last) in ``pair``'s consumer's
    namespace and ``act`` ``rounds`` times meanwhile; ``held``: what the unit holds now."""
    folder = Path(tempfile.mkdtemp(prefix="meshtui-overlap-app-"))
    stop = folder / "stop"
    with Controller.open(state, read_only=True) as ctl:
        consumer = ctl.inventory.pairs([pair])[0]["consumer"]
    proc = subprocess.Popen(
        ["ip", "netns", "exec", built.namespace(node_of(consumer)), sys.executable, "-c", app,
         *args, str(stop)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    seen_held = {held()}
    results = []
    try:
        ready(stop, proc)
        for _ in range(rounds):
            results.append(act())
            seen_held.add(held())
        time.sleep(0.5)
    finally:
        stop.touch()
        out, err = proc.communicate(timeout=120)
        shutil.rmtree(folder, ignore_errors=True)
    assert proc.returncode == 0, err[-3000:]
    print(err[-3000:])
    first, *lines = out.splitlines()
    tries, refused = map(int, first.split())
    read = {(login, digest) for login, digest in (line.split() for line in lines)}
    logins_of: dict[str, set[str]] = {}
    for login, digest in read | seen_held:
        logins_of.setdefault(digest, set()).add(login)
    straddled = sum(len(logins_of[digest]) > 1 for _login, digest in read)
    print(f"{tries} connections, {refused} refused, {straddled} straddled reads")
    return Counted(tries, refused, straddled, results)
