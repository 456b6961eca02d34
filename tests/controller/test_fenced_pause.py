"""The classic failure, with real processes: a controller pauses (SIGSTOP) in the middle of a
rotation it prepared under epoch 4; meanwhile another controller delivers under epoch 5; the
first wakes and sends what it prepared: every node refuses it, and no credential changes. The
same when the other holds the same epoch (the lease's database lost the first's holding in a
switch): a node keeps whose the epoch it accepted is.

The epochs are set by hand here (as the lease sets them when it is held)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from meshtui import crypto
from meshtui.controller.agents.client import AgentClient
from meshtui.protocol import messages, wire
from meshtui.protocol.fence import Fence
from tests.fix_agents import Mesh

GITEA = "database:app1/gitea->db1/postgres"
CREDENTIAL = "srv/app1/gitea/db.password"

PAUSED_ROTATION = textwrap.dedent(
    """
    import os, signal, sys
    from meshtui.controller.core import Controller
    from meshtui.protocol.fence import Fence

    ctl = Controller.open(sys.argv[1])
    ctl.fence = Fence("ctl-a", 4)

    def pause():
        print("paused", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)

    ctl.faults["after-journal"] = pause
    report = ctl.rotate([sys.argv[2]])
    print("outcome", report.outcome, report.reason, flush=True)
    """
)


def stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped (its state in /proc is T)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return fields[0] in ("T", "t")


@pytest.mark.parametrize(
    ("taken", "said"),
    [
        (5, "controller ctl-a's epoch 4 is behind epoch 5"),
        # the same epoch: the lease's database switched to a standby that had lost a holding
        (4, "controller ctl-a's epoch 4 was already taken on this node"),
    ],
)
def test_a_controller_woken_after_another_took_a_higher_epoch_delivers_nothing(
    mesh_with_agents: Callable[..., Mesh], taken: int, said: str
) -> None:
    m = mesh_with_agents(
        consumers={"app1": ["gitea"]}, port=5432, admin=None, provisioner=["/bin/true"]
    )
    assert m.cli("push").returncode == 0
    held = m.secret(CREDENTIAL)
    child = subprocess.Popen(
        [sys.executable, "-c", PAUSED_ROTATION, str(m.state), GITEA],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "paused"
        deadline = time.monotonic() + 10
        while not stopped(child.pid):
            assert time.monotonic() < deadline, "the rotation did not pause"
            time.sleep(0.02)

        # another controller leads now: it delivers under its epoch to every node
        keys = crypto.load_private(m.state / "controller.key")
        with m.controller(read_only=True) as ctl:
            rows = ctl.inventory.nodes()
        for node in m.nodes:
            other = AgentClient(
                rows[node], keys, sequence=wire.Sequence(), fence=lambda: Fence("ctl-b", taken)
            )
            assert other.call(messages.WITHDRAW, {"consumer": []}) == {"consumer": []}

        child.send_signal(signal.SIGCONT)
        out, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 0, err
    assert "outcome done" not in out
    assert said in out, out + err
    assert m.secret(CREDENTIAL) == held  # nothing the paused controller prepared was delivered
