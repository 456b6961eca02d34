"""An overlap rotation beside a swap of the same pair: what the missing window costs.

One lab (``meshtui lab up``'s builder in real namespaces, root: an overlap logs in from the
consumer's node twice), one kind at a time (Redis, OpenBao, PostgreSQL); its ``app1/gitea``
pair is rotated ``--repeat`` times as a swap and as an overlap, in alternating turns after a
warm-up of each, so a moment of noise on this shared machine falls on both. Between turns the
pair is declared again with or without ``rotation = "overlap"`` (untimed). PostgreSQL's
overlap alternates two logins and a pair that alternated cannot go back to a swap, so there
``app1/gitea`` (overlap, with its connection file) is timed beside ``app1/grafana``, a swap
pair of the same consumer node and server, both declared once. Timed: ``Controller.rotate`` of the pair, the
CLI's code path. An overlap does more: a login from the consumer's node before (the old), the
provider twice (add, remove), a login with the new and one with the old after.

Printed per kind: p50/max of each, the ratio of the p50s, and the overlap's "both accepted"
span (the new added -> the old removed, as the rotation reports it) p50 and max; with the load
average before and after.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_overlap.py [--repeat 10] [--kind redis]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from meshtui.controller.core import Controller
from meshtui.lab import mesh as lab_mesh

PROVISIONS = {"redis": "cache", "openbao": "secret", "postgres": "database"}
SWAPPED_BESIDE = {"postgres": "database:app1/grafana->db1/postgres"}
"""A kind whose overlap pair cannot go back to swap: the swap pair timed beside it."""


def _overlap_text(kind: str, text: str) -> str:
    """The lab's declaration with the kind's ``app1/gitea`` pair declared an overlap."""
    if kind != "postgres":
        needle = f'kind = "{kind}"'
        return text.replace(needle, f'{needle}, rotation = "overlap"', 1)
    text, found = re.subn(  # PostgreSQL's overlap changes the login: a connection file says it
        r'(file = "([^"]*/srv/app1/gitea/)db\.password") }',
        r'\1, rotation = "overlap", connection = { file = "\2db.conn", format = "json" } }',
        text,
    )
    assert found == 1, text
    return text


def run(kind: str, repeat: int) -> None:
    folder = Path(tempfile.mkdtemp(prefix=f"meshtui-bench-overlap-{kind}-"))
    folder.chmod(0o711)
    try:
        built = lab_mesh.up(folder, kinds={k: k == kind for k in ("redis", "openbao", "seaweedfs")})
        overlap = folder / "overlap.toml"
        overlap.write_text(_overlap_text(kind, built.declaration.read_text()))
        pair = f"{PROVISIONS[kind]}:app1/gitea->db1/{kind}"
        beside = SWAPPED_BESIDE.get(kind)  # declared once, its swap pair beside it
        swap = overlap if beside else built.declaration
        turns = (("swap", swap, beside or pair), ("overlap", overlap, pair))
        times: dict[str, list[float]] = {"swap": [], "overlap": []}
        spans: list[float] = []
        with Controller.open(folder) as ctl:
            ctl.declare(swap)
            assert ctl.push().ok
            for turn in range(repeat + 1):
                for how, declaration, rotated in turns:
                    if not beside:
                        ctl.declare(declaration)
                    started = time.perf_counter()
                    report = ctl.rotate([rotated])
                    took = (time.perf_counter() - started) * 1000
                    assert report.ok, report
                    if turn:  # the first turn warms up
                        times[how].append(took)
                        if how == "overlap" and report.pairs[0].both_accepted_ms is not None:
                            spans.append(report.pairs[0].both_accepted_ms)
        p50 = {how: statistics.median(t) for how, t in times.items()}
        print(
            f"{kind}: {repeat} rotations of {pair} each" + (f" (swap: {beside})" if beside else "")
        )
        for how, t in times.items():
            print(f"  {how:<8} p50 {p50[how]:7.1f} ms  max {max(t):7.1f} ms")
        print(f"  overlap / swap (p50): {p50['overlap'] / p50['swap']:.2f}x")
        print(f"  both accepted: p50 {statistics.median(spans):.1f} ms  max {max(spans):.1f} ms")
    finally:
        lab_mesh.down(folder, purge=True)
        shutil.rmtree(folder, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--kind", choices=sorted(PROVISIONS), action="append")
    args = parser.parse_args()
    print(f"load before: {os.getloadavg()}")
    for kind in args.kind or sorted(PROVISIONS):
        run(kind, args.repeat)
    print(f"load after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
