"""One controller step in this fresh process, as an operator's command runs it: its peak RSS.

``ru_maxrss`` only grows, so a step measured in a process that ran others first shows the
largest of them; ``bench_scale.py`` runs each of declare, push and rotate all here instead.
Only the controller is imported (as ``meshtui push`` would), then one JSON line is printed:
seconds, the RSS right after the imports, the peak RSS (``VmHWM``), and with ``--trace`` tracemalloc's peak.

    PYTHONPATH=. .venv/bin/python benchmarks/controller_step.py push STATE [--trace]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
import tracemalloc
from pathlib import Path

from meshtui.controller.act import sending
from meshtui.controller.core import Controller


def rss_mib() -> float:
    """This program's peak resident set so far, in MiB: the kernel's high-water mark of this
    image (``VmHWM``). Not ``ru_maxrss``: it carries over the parent's resident set that the
    fork copied, so a child of a large benchmark would report at least the benchmark's size."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


PHASES = {
    "controller.rotate": ("store", "send_providers", "send_consumers", "_finish"),
    "controller.push": (
        "Planner",
        "ask_state",
        "settle",
        "held_generations",
        "_drift",
        "send_providers",
        "send_consumers",
        "revoke",
    ),
    "controller.declare": (),
}
"""With ``--trace``: the functions whose traced peak is printed (each from its start), by
module; what runs between them is printed as "between"."""


def trace_phases(step: str) -> list[tuple[str, float]]:
    """Wrap each of :data:`PHASES`' functions of ``step``'s module so tracemalloc's peak is
    noted per phase: the list it fills, (phase, peak MiB), in the order they ran."""
    import functools
    import importlib

    noted: list[tuple[str, float]] = []
    name = {"rotate-all": "controller.rotate"}.get(step, f"controller.{step}")
    module = importlib.import_module(f"meshtui.{name}")
    for fn in PHASES[name]:
        real = getattr(module, fn)

        @functools.wraps(real)
        def wrapped(*a: object, _real=real, _fn=fn, **kw: object) -> object:  # type: ignore[no-untyped-def]
            noted.append(("before " + _fn, tracemalloc.get_traced_memory()[1] / 2**20))
            tracemalloc.reset_peak()
            try:
                return _real(*a, **kw)
            finally:
                noted.append((_fn, tracemalloc.get_traced_memory()[1] / 2**20))
                tracemalloc.reset_peak()

        setattr(module, fn, wrapped)
    return noted


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("step", choices=("declare", "push", "rotate-all"))
    ap.add_argument("state", type=Path)
    ap.add_argument("--decl", type=Path, help="the declaration (declare)")
    ap.add_argument("--trace", action="store_true", help="tracemalloc's peak (slower)")
    ap.add_argument("--old", action="store_true",
                    help="the path before batches: every payload built (and signed) at once")  # fmt: skip
    args = ap.parse_args(argv)
    imported = rss_mib()
    if args.old:
        sending.BATCH = sys.maxsize
    phases: list[tuple[str, float]] = []
    if args.trace:
        tracemalloc.start()
        phases = trace_phases(args.step)
    t0 = time.perf_counter()
    with Controller.open(args.state) as ctl:
        if args.step == "declare":
            ctl.declare(args.decl)
        elif args.step == "push":
            report = ctl.push()
            assert report.ok, report.behind
        else:
            rotated = ctl.rotate(ctl.live_pairs())
            assert rotated.outcome == "done", rotated.reason
    took = time.perf_counter() - t0
    traced = None
    if args.trace:
        phases.append(("end", tracemalloc.get_traced_memory()[1] / 2**20))
        traced = max(peak for _, peak in phases)
        for phase, peak in phases:
            print(f"# traced peak {peak:7.1f} MiB  {phase}", file=sys.stderr)
    print(json.dumps({"took": took, "imported": imported, "peak": rss_mib(), "traced": traced}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
