"""``meshtui doctor`` names a node whose clock is off: a real agent whose process clock is
skewed (a seam in this test only: ``time.time`` shifted before the agent starts)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest

from meshtui.lab.mesh import agent_answers
from tests.fix_agents import Mesh

pytestmark = pytest.mark.slow

SKEWED = """
import sys, time
real = time.time
time.time = lambda: real() + float(sys.argv[1])
from meshtui.cli import main
sys.exit(main(["host", "serve", "--state", sys.argv[2], "--listen", "unix:" + sys.argv[3]]))
"""


@pytest.fixture
def start_skewed(mesh_with_agents: Callable[..., Mesh]) -> Iterator[Callable[[float], Mesh]]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(skew: float) -> Mesh:
        mesh = mesh_with_agents(
            consumers={"app1": ["gitea"]}, port=5432, admin=None, provisioner=["/bin/true"]
        )
        mesh.stop("app1")
        log = open(mesh.root / "app1.skewed.log", "ab")  # noqa: SIM115
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    SKEWED,
                    str(skew),
                    str(mesh.nodes["app1"]),
                    str(mesh.sockets["app1"]),
                ],
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
            )
        )
        deadline = time.monotonic() + 15
        while not agent_answers(mesh.sockets["app1"]):
            assert time.monotonic() < deadline, (mesh.root / "app1.skewed.log").read_text()
            time.sleep(0.05)
        return mesh

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=10)


def problems(mesh: Mesh) -> tuple[int, list[tuple[str, str, str]], str]:
    done = mesh.cli("doctor")
    rows = [line.split()[:3] for line in done.stdout.splitlines()[1:-1]]
    return done.returncode, [(r[0], r[1], r[2]) for r in rows], done.stdout


@pytest.mark.parametrize("skew", [20.0, -45.0])
def test_a_node_whose_clock_is_off(start_skewed: Callable[[float], Mesh], skew: float) -> None:
    mesh = start_skewed(skew)
    code, found, out = problems(mesh)
    assert code == 1
    assert ("app1", "clock", "app1") in found, out
    assert "synchronise the clocks" in out
    if skew == 20.0:  # answered: the offset is measured from its signed answer
        assert "clock is +20." in out or "clock is +19." in out, out
    else:  # past the window: every message is refused, and doctor says why
        assert "off this clock" in out, out
    assert [f for f in found if f[1] == "clock"] == [("app1", "clock", "app1")]  # not db1
