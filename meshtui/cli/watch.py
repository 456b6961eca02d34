"""``meshtui watch``: the unattended loop, with its alert command and metrics endpoint."""

from __future__ import annotations

import argparse
import signal
import threading

from meshtui.cli.context import controller


def cmd_watch(args: argparse.Namespace) -> int:
    from meshtui.controller.core import Controller

    listen = (
        Controller.parse_listen(args.metrics, allow_remote=args.metrics_allow_remote)
        if args.metrics
        else None
    )
    stop = threading.Event()
    with controller(args) as ctl:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        return ctl.watch(
            stop=stop,
            notify=args.notify,
            notify_timeout=args.notify_timeout,
            listen=listen,
            tick=args.tick,
            revoke_old_overdue=args.revoke_old_overdue,
            drift_every=args.drift_every,
        )
