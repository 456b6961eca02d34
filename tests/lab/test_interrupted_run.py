"""An interrupted test run leaves nothing running: its servers, agents and networks go with it.

Each test runs the README's test command (``pytest -q -n 2 --dist loadfile``) on
``tests/lab/interrupted_run.py`` in a process group of its own, waits until that run has raised
its servers (PostgreSQL as the lab's user, Debian's PostgreSQL, a network; for SIGTERM a whole
lab with Redis, OpenBao, SeaweedFS and agents, every one in a session of its own), interrupts
it, and looks with its own eyes (pids, ``ip netns``) for anything left.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from meshtui.lab import runs
from meshtui.lab.wait import poll
from meshtui.runas import RUN_ENV
from tests.fix_lab import skip_without_netns
from tests.lab.interrupted_run import READY, WITH_LAB

pytestmark = [pytest.mark.root, pytest.mark.slow, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
START_S = 280.0


def _start(tmp_path: Path, *, with_lab: bool) -> tuple[subprocess.Popen[bytes], Path, Path]:
    ready, log = tmp_path / "ready.json", tmp_path / "run.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update({READY: str(ready), WITH_LAB: "1" if with_lab else ""})
    argv = [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadfile",
            "-p", "no:cacheprovider", "tests/lab/interrupted_run.py"]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    return proc, ready, log


def _running(tmp_path: Path, *, with_lab: bool) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
    """The interrupted run started and its servers up: the process and what it said it runs."""
    skip_without_netns()
    proc, ready, log = _start(tmp_path, with_lab=with_lab)
    if not poll(ready.exists, START_S, every=0.2, unless=lambda: proc.poll() is not None):
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        runs.sweep(runs.stale)
        pytest.fail(f"the run to interrupt never got ready:\n{log.read_text()[-3000:]}")
    facts: dict[str, Any] = json.loads(ready.read_text())
    assert facts["run"] != os.environ.get(RUN_ENV)  # the run marked itself, not as ours
    assert facts["pids"] and all(_alive(p) for p in facts["pids"])
    assert facts["folders"] and all(Path(f).is_dir() for f in facts["folders"])
    assert all(ns in _namespaces() for ns in facts["namespaces"])
    return proc, facts


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def _marked(run: str) -> list[int]:
    mine = runs.Run.parse(run)
    return list(runs.marked_processes(lambda r: r == mine))


def _nothing_left(facts: dict[str, Any]) -> None:
    assert [p for p in facts["pids"] if _alive(p)] == []
    assert sorted(set(facts["namespaces"]) & _namespaces()) == []
    assert _marked(facts["run"]) == []
    assert [f for f in facts["folders"] if Path(f).exists()] == []  # the servers' data too


@pytest.mark.parametrize(
    ("sig", "with_lab"), [(signal.SIGTERM, True), (signal.SIGINT, False)], ids=["TERM", "INT"]
)
def test_an_interrupted_run_leaves_no_server_agent_or_namespace(
    tmp_path: Path, sig: signal.Signals, with_lab: bool
) -> None:
    proc, facts = _running(tmp_path, with_lab=with_lab)
    os.kill(proc.pid, sig)  # to pytest alone, as `kill` does; a terminal's Ctrl-C reaches more
    assert proc.wait(timeout=120) == -sig
    try:
        _nothing_left(facts)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        runs.sweep(lambda r: r.mark == facts["run"])


def test_a_killed_runs_leftovers_are_swept_by_lab_sweep(tmp_path: Path) -> None:
    proc, facts = _running(tmp_path, with_lab=False)
    os.killpg(proc.pid, signal.SIGKILL)  # pytest and its workers, with no chance to clean up
    proc.wait()
    time.sleep(1)
    try:
        # the servers live in sessions of their own: a killed run leaves them running
        assert all(_alive(p) for p in facts["pids"])
        assert set(facts["namespaces"]) <= _namespaces()
        done = subprocess.run(
            [sys.executable, "-m", "meshtui.cli", "lab", "sweep"],
            capture_output=True, text=True, timeout=120, cwd=tmp_path,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert f"of run {facts['run']}" in done.stdout
        _nothing_left(facts)
    finally:
        runs.sweep(lambda r: r.mark == facts["run"])
