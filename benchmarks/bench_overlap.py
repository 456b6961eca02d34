"""An overlap rotation beside a swap of the same pair: what the missing window costs.

One lab (``meshtui lab up``'s builder in real namespaces, root: an overlap logs in from the
consumer's node twice), one kind at a time (Redis, OpenBao, PostgreSQL, SeaweedFS); its
``app1/gitea`` pair is rotated ``--repeat`` times as a swap and as an overlap, in alternating
turns after a warm-up of each, so a moment of noise on this shared machine falls on both.
Between turns the pair is declared again with or without ``rotation = "overlap"`` (untimed). A
pair of a kind that alternates between two logins cannot go back to swap, so PostgreSQL and
SeaweedFS rotate two pairs of one server instead, both declared once: PostgreSQL's
``app1/gitea`` as an overlap (its credential file a libpq service file) beside
``app1/grafana`` as a swap; SeaweedFS's ``app1/grafana`` as an overlap (its credential file the
AWS credentials file) beside ``app2/wiki`` as a swap. Timed: ``Controller.rotate`` of the pair, the
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

PROVISIONS = {"redis": "cache", "openbao": "secret", "postgres": "database", "seaweedfs": "objects"}
ALTERNATING = {
    "postgres": ("database:app1/grafana->db1/postgres", "database:app1/gitea->db1/postgres"),
    "seaweedfs": ("objects:app2/wiki->db1/s3", "objects:app1/grafana->db1/s3"),
}
"""A kind whose overlap pair cannot be a swap again: its (swap pair, overlap pair)."""
UNITS = {
    "postgres": (r'(file = "[^"]*/srv/app1/gitea/db\.password") }', "pg_service"),
    "seaweedfs": (r'(file = "[^"]*/srv/app1/grafana/s3\.secret") }', "aws"),
}
"""The overlap pair's requirement in the lab's declaration, and its credential file's format."""


def _declarations(kind: str, text: str) -> tuple[str, str]:
    """The swap and the overlap declarations' texts."""
    if kind not in ALTERNATING:
        needle = f'kind = "{kind}"'
        return text, text.replace(needle, f'{needle}, rotation = "overlap"', 1)
    needle, unit = UNITS[kind]
    overlap, found = re.subn(needle, rf'\1, rotation = "overlap", format = "{unit}" }}', text)
    assert found == 1, text
    return overlap, overlap


def run(kind: str, repeat: int) -> None:
    folder = Path(tempfile.mkdtemp(prefix=f"meshtui-bench-overlap-{kind}-"))
    folder.chmod(0o711)
    try:
        built = lab_mesh.up(folder, kinds={k: k == kind for k in ("redis", "openbao", "seaweedfs")})
        swap, overlap = folder / "swap.toml", folder / "overlap.toml"
        swap_text, overlap_text = _declarations(kind, built.declaration.read_text())
        swap.write_text(swap_text)
        overlap.write_text(overlap_text)
        gitea = f"{PROVISIONS[kind]}:app1/gitea->db1/{kind}"
        pairs = dict(zip(("swap", "overlap"), ALTERNATING.get(kind, (gitea, gitea)), strict=True))
        times: dict[str, list[float]] = {"swap": [], "overlap": []}
        spans: list[float] = []
        with Controller.open(folder) as ctl:
            ctl.declare(swap)
            assert ctl.push().ok
            for turn in range(repeat + 1):
                for how, declaration in (("swap", swap), ("overlap", overlap)):
                    ctl.declare(declaration)
                    started = time.perf_counter()
                    report = ctl.rotate([pairs[how]])
                    took = (time.perf_counter() - started) * 1000
                    assert report.ok, report
                    if turn:  # the first turn warms up
                        times[how].append(took)
                        if how == "overlap" and report.pairs[0].both_accepted_ms is not None:
                            spans.append(report.pairs[0].both_accepted_ms)
        p50 = {how: statistics.median(t) for how, t in times.items()}
        print(f"{kind}: {repeat} rotations of {' and '.join(sorted(set(pairs.values())))} each")
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
