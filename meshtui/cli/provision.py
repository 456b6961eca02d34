"""``meshtui provision``: the built-in provisioner, once or watching (runs on the database node)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from meshtui.cli.context import EXIT_FAILED, EXIT_OK
from meshtui.errors import MeshtuiError

if TYPE_CHECKING:
    from meshtui.provisioner.harness import Report


def cmd_provision(args: argparse.Namespace) -> int:
    from meshtui.provisioner.harness import reconcile, watch

    manifest, admin = Path(args.manifest), Path(args.admin)

    def show(report: Report) -> None:
        if args.json:
            print(report.to_json(), flush=True)
        else:
            print("\n".join(report.lines()), flush=True)

    if not args.watch:
        report = reconcile(manifest, admin)
        show(report)
        return EXIT_OK if report.ok else EXIT_FAILED

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())

    def complain(exc: MeshtuiError) -> None:
        print(f"meshtui provision: {exc}", file=sys.stderr, flush=True)

    watch(
        manifest,
        admin,
        interval=args.interval,
        drift_every=args.drift_every,
        stop=stop,
        on_report=show,
        on_error=complain,
    )
    return EXIT_OK
