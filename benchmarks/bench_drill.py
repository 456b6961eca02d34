"""Drill window: 20 drills on the lab (namespaces when root), p50/p90 of the window.

The window is the time in which a rotated pair's consumer could not authenticate: from the
provider's agent having applied the new verifier (its provisioner returned, a few tenths of a
ms after the commit) to the consumer's credential file holding the new one (its rename; the
folder's fsync follows, before the agent answers).
Side by side in the same process and lab, ``--rounds`` rounds of ``--drills`` drills each,
alternating: the agents' transport as shipped (``httptools`` under ``uvloop``, ``POST /v1``
answered without Starlette's router, the controller's kept
:class:`~meshtui.controller.agents.channel.Channel`) and as before: every agent restarted on
``--before``'s code (h11 under asyncio, Starlette, anyio's threads) and the controller's client
switched to httpx here, in the benchmark only. ``--two-acts``: also the seeds' baseline,
the same rotation done as two acts (the provider applies and the answer is recorded; then a
separate push brings the consumer along).

    python benchmarks/bench_drill.py [--drills 20] [--rounds 3] [--before ba753ff] [--two-acts]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from bench_rotate import checkout, fsync_ms  # noqa: E402  (the same measure, one copy)

from meshtui import runas
from meshtui.controller.act.recording import Delivered
from meshtui.controller.act.rotate import journal
from meshtui.controller.act.sending import send_providers
from meshtui.controller.agents import client as client_module
from meshtui.controller.agents.client import AgentClient, Agents, SignedRequest
from meshtui.controller.core import Controller
from meshtui.controller.plan.planner import Planner
from meshtui.inventory import now
from meshtui.lab import mesh as lab_mesh
from meshtui.lab.wait import poll

GOAL_MS = 3.0  # the drill's window goal, in milliseconds
FSYNCS_IN_WINDOW = 0
"""Durable writes on the consumer inside the window: none. The credential itself and the
delivery's guard line are written ahead, with the consumer's ``prepare``, while the provider
applies (meshtui/controller/act/ahead.py); the folder's fsync comes after the rename that ends the
window (the agent answers after it)."""


def two_acts(ctl: Controller, pid: str) -> float:
    """Provider first, recorded; the consumer caught up by a push: the baseline window."""
    (row,) = ctl.inventory.pairs([pid])
    rotation = journal(ctl, [row])
    (item,) = rotation["items"]
    with Agents(ctl.inventory.nodes(), ctl.keys()) as agents:
        plan = Planner(ctl.inventory)
        result = Delivered()
        send_providers(
            agents,
            ctl.inventory,
            plan.provider_sets([(row["provider"], row["provision"])], {pid: item["to"]}),
            result,
        )
    with ctl.inventory.transaction("bench") as tx:  # the record says the new generation is due
        tx.set_generation(pid, item["to"], now())
        tx.update_rotation(
            rotation["id"], {"state": "done", "finished_at": "bench", "outcome": "done"}
        )
    ctl.push()
    written = Path(row["file"]).stat().st_mtime
    return (written - result.applied_at[pid]) * 1000.0


def restart_agents(state: Path, code: Path | None) -> None:
    """Every lab agent stopped and started again: on the code in ``code`` (another revision's
    ``meshtui``, first on the path), or as shipped (None)."""
    lab = lab_mesh.load(state)
    assert lab is not None
    for node, pid in lab.pids.items():
        os.kill(pid, signal.SIGTERM)
        poll(lambda pid=pid: not lab_mesh._alive(pid), 10)
        argv = [sys.executable, "-m", "meshtui.cli", "host", "serve"]
        argv += [
            "--state",
            str(lab.folder / "nodes" / node),
            "--listen",
            f"unix:{lab.socket(node)}",
        ]
        if lab.mode == "loopback":
            argv.append("--allow-loopback")
        if code is not None:
            argv = ["env", f"PYTHONPATH={code}", *argv]
        log = lab_mesh._open_log(lab.folder / f"{node}.agent.log")
        proc = runas.spawn(argv, None, netns=lab.namespace(node), stdout=log, stderr=log, cwd="/")
        log.close()
        lab.pids[node] = proc.pid
    lab_mesh._save(lab)
    for node in lab.pids:
        lab_mesh._wait_agent(lab, node)


class _HttpxChannel:
    """The controller's transport before: an httpx client (its pool keeps the connection)."""

    def __init__(self, agent: str, tls: Any) -> None:
        timeout = client_module.DEFAULT_TIMEOUT_S
        if agent.startswith("unix:"):
            transport = httpx.HTTPTransport(uds=agent[len("unix:") :], verify=tls)
            self.http = httpx.Client(
                transport=transport, base_url="http://agent", timeout=timeout, verify=tls
            )
        else:
            self.http = httpx.Client(base_url=agent, timeout=timeout, verify=tls)

    def close(self) -> None:
        self.http.close()


def _httpx_request(self: AgentClient, signed: SignedRequest) -> Any:
    return self._channel.http.build_request("POST", "/v1", json=signed.envelope)  # type: ignore[attr-defined]


def _httpx_post(self: AgentClient, request: Any, timeout: float) -> Any:
    request.extensions["timeout"] = httpx.Timeout(timeout).as_dict()
    return self._channel.http.send(request)  # type: ignore[attr-defined]


@contextmanager
def httpx_client() -> Iterator[None]:
    """The controller's agent client on httpx, as before (the benchmark's switch only)."""
    saved = client_module.Channel, AgentClient._request, AgentClient._post
    client_module.Channel = _HttpxChannel  # type: ignore[assignment, misc]
    AgentClient._request = _httpx_request  # type: ignore[method-assign]
    AgentClient._post = _httpx_post  # type: ignore[method-assign]
    try:
        yield
    finally:
        client_module.Channel, AgentClient._request, AgentClient._post = saved  # type: ignore[misc]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


NEW = "httptools+uvloop agents, kept channel"
OLD = "before (h11, Starlette, anyio; httpx)"


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--drills", type=int, default=20, help="drills a round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each transport")
    parser.add_argument(
        "--before", default="ba753ff", help="the agents' code before (a git revision)"
    )
    parser.add_argument("--two-acts", action="store_true", help="also the two-acts baseline")
    args = parser.parse_args()
    state = Path(tempfile.mkdtemp(prefix="meshtui-bench-drill-"))
    state.chmod(0o711)
    try:
        before = checkout(args.before, state / "before-code")
        built = lab_mesh.up(state)
        with Controller.open(state) as ctl:
            ctl.declare(built.declaration)
            assert ctl.push().ok
            pairs = ctl.live_pairs()
            runs: dict[str, list[list[float]]] = {NEW: [], OLD: []}
            base: list[float] = []
            failed, i = 0, 0
            for _ in range(args.rounds):
                for name in (NEW, OLD):
                    restart_agents(state, before if name == OLD else None)
                    ours: list[float] = []
                    with httpx_client() if name == OLD else _nothing():
                        for _ in range(args.drills):
                            (report,) = ctl.drill([pairs[i % len(pairs)]])
                            i += 1
                            if report.ok and report.window_ms is not None:
                                ours.append(report.window_ms)
                            else:
                                failed += 1
                            if args.two_acts and name == NEW:
                                base.append(two_acts(ctl, pairs[i % len(pairs)]))
                    runs[name].append(ours)
                    print(
                        f"  round {len(runs[name])} {name}: p50 {statistics.median(ours):.2f} ms"
                        f" (load {os.getloadavg()[0]:.2f})",
                        flush=True,
                    )
        print(
            f"lab mode: {built.mode}; {args.rounds} rounds x {args.drills} drills a transport "
            f"over {len(pairs)} pairs; {failed} failed"
        )
        print(f"{'':40}{'p50 ms':>9}{'p90 ms':>9}{'max ms':>9}{'p50s of rounds':>24}")
        rows = [(name, runs[name]) for name in (NEW, OLD)]
        if base:
            rows.append(("two acts (record, then push)", [base]))
        for name, rounds in rows:
            values = [v for r in rounds for v in r]
            each = " ".join(f"{statistics.median(r):.2f}" for r in rounds)
            print(
                f"{name:40}{statistics.median(values):9.2f}{pct(values, 0.9):9.2f}"
                f"{max(values):9.2f}   {each}"
            )
        p50 = statistics.median([v for r in runs[NEW] for v in r])
        old = statistics.median([v for r in runs[OLD] for v in r])
        print(f"ratio shipped / before (p50): {p50 / old:.2f}")
        sync = fsync_ms(state, 20)
        print(
            f"floor: fsync p50 {sync:.2f} ms x {FSYNCS_IN_WINDOW} durable writes on the consumer "
            f"= {FSYNCS_IN_WINDOW * sync:.2f} ms, plus the provider's answer and the consumer's "
            f"request (two signed trips on this machine); load average {os.getloadavg()[0]:.2f}"
        )
        print(
            f"goal: p50 under {GOAL_MS:.0f} ms -> {'met' if p50 < GOAL_MS else 'NOT met'} ({p50:.2f} ms)"
        )
        return 0 if failed == 0 else 1
    finally:
        lab_mesh.down(state, purge=True)
        shutil.rmtree(state, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
