"""Drill window: 20 drills on the lab (namespaces when root), p50/p90 of the window.

The window is the time in which a rotated pair's consumer could not authenticate: from the
provider's agent having applied the new verifier (its provisioner returned, a few tenths of a
ms after the commit) to the consumer's credential file holding the new one (its rename; the
folder's fsync follows, before the agent answers).
Baseline, side by side in the same process and lab: the same rotation done as two acts, as the
seeds did it (the provider applies and the answer is recorded; then a separate push brings the
consumer along). Prints both distributions and the ratio.

    python benchmarks/bench_drill.py [--drills 20]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from bench_rotate import fsync_ms  # noqa: E402  (the same measure, one copy)

from meshtui.controller.client import Agents
from meshtui.controller.core import Controller
from meshtui.controller.deliver import Planner
from meshtui.controller.recording import Delivered
from meshtui.controller.rotate import journal
from meshtui.controller.sending import send_providers
from meshtui.inventory import now
from meshtui.lab import mesh as lab_mesh

GOAL_MS = 3.0  # issue 25 (issue 13: 5 ms)
FSYNCS_IN_WINDOW = 0
"""Durable writes on the consumer inside the window: none. The credential itself and the
delivery's guard line are written ahead, with the consumer's ``prepare``, while the provider
applies (meshtui/controller/ahead.py); the folder's fsync comes after the rename that ends the
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


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--drills", type=int, default=20)
    args = parser.parse_args()
    state = Path(tempfile.mkdtemp(prefix="meshtui-bench-drill-"))
    state.chmod(0o711)
    try:
        built = lab_mesh.up(state)
        with Controller.open(state) as ctl:
            ctl.declare(built.declaration)
            assert ctl.push().ok
            pairs = ctl.live_pairs()
            ours, base, failed = [], [], 0
            for i in range(args.drills):
                (report,) = ctl.drill([pairs[i % len(pairs)]])
                if report.ok and report.window_ms is not None:
                    ours.append(report.window_ms)
                else:
                    failed += 1
                base.append(two_acts(ctl, pairs[(i + 1) % len(pairs)]))
        print(
            f"lab mode: {built.mode}; {args.drills} drills over {len(pairs)} pairs; {failed} failed"
        )
        print(f"{'':28}{'p50 ms':>10}{'p90 ms':>10}{'max ms':>10}")
        for name, values in (
            ("meshtui rotate (one act)", ours),
            ("two acts (record, then push)", base),
        ):
            print(
                f"{name:28}{statistics.median(values):10.2f}{pct(values, 0.9):10.2f}{max(values):10.2f}"
            )
        p50 = statistics.median(ours)
        print(f"ratio one act / two acts (p50): {p50 / statistics.median(base):.2f}")
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
