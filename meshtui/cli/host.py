"""``meshtui host``: the agent's commands on a node (its keys, and serving)."""

from __future__ import annotations

import argparse
from pathlib import Path

from meshtui.cli.context import EXIT_OK


def cmd_host_init(args: argparse.Namespace) -> int:
    from meshtui.host.identity import init

    pub, created = init(args.name, Path(args.state_dir), Path(args.controller))
    print(
        f"{'wrote' if created else 'kept'} keys of node {args.name}: {pub} "
        '(name it in the declaration: keys = "...")'
    )
    return EXIT_OK


def cmd_host_serve(args: argparse.Namespace) -> int:
    from meshtui.host.serve import serve

    return serve(Path(args.state_dir), args.listen, allow_loopback=args.allow_loopback)
