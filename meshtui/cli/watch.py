"""``meshtui watch``: the unattended loop, with its alert command and metrics endpoint."""

from __future__ import annotations

import argparse
import signal

from meshtui.cli.context import controller
from meshtui.errors import InputError, ReadOnlyError


def cmd_watch(args: argparse.Namespace) -> int:
    from meshtui.controller.metrics import Metrics, parse_listen
    from meshtui.controller.notify import Notifier
    from meshtui.controller.watch import Watch, log_line

    listen = (
        parse_listen(args.metrics, allow_remote=args.metrics_allow_remote) if args.metrics else None
    )
    notifier = Notifier(args.notify, log_line, timeout=args.notify_timeout) if args.notify else None
    metrics = Metrics() if listen else None
    with controller(args) as ctl:
        if ctl.read_only:
            raise ReadOnlyError("watch")
        if metrics is not None and listen is not None:
            try:
                host, port = metrics.serve(*listen)
            except OSError as exc:
                raise InputError(
                    f"--metrics {args.metrics}: cannot listen: {exc.strerror}"
                ) from exc
            log_line(f"metrics at http://{host}:{port}/metrics")
        watch = Watch(ctl, notify=notifier, metrics=metrics, tick=args.tick)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: watch.stop.set())
        try:
            return watch.run()
        finally:
            if notifier is not None:
                notifier.close()
            if metrics is not None:
                metrics.close()
