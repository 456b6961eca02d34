"""``meshtui host``: the agent's commands on a node (its keys, and serving)."""

from __future__ import annotations

import argparse
from pathlib import Path

from meshtui.cli.context import EXIT_OK


def cmd_host_init(args: argparse.Namespace) -> int:
    from meshtui.host.policy.node_policy import write_default
    from meshtui.host.state.identity import init

    pub, created = init(args.name, Path(args.state_dir), Path(args.controller))
    print(
        f"{'wrote' if created else 'kept'} keys of node {args.name}: {pub} "
        '(name it in the declaration: keys = "...")'
    )
    policy, wrote = write_default(Path(args.state_dir), args.name)
    if wrote:
        print(
            f"wrote the node policy {policy}: it allows nothing yet; add what this node may do "
            "(its comments show how), then meshtui host serve"
        )
    else:
        print(f"kept the node policy {policy}")
    return EXIT_OK


def cmd_host_serve(args: argparse.Namespace) -> int:
    from meshtui.host.server.serve import serve

    return serve(Path(args.state_dir), args.listen, allow_loopback=args.allow_loopback)


def cmd_host_rekey(args: argparse.Namespace) -> int:
    from meshtui.host.state.rekey import rekey

    done = rekey(Path(args.state_dir), Path(args.controller), confirmed=args.yes)
    if not done.changed:
        print(f"node {done.node} already pins controller key {done.new}; nothing changed")
        return EXIT_OK
    aside = (
        f"; the audit head it kept (event {done.head_kept_aside}) is kept as history"
        if done.head_kept_aside is not None
        else ""
    )
    print(
        f"node {done.node} now pins controller key {done.new} (was {done.old}){aside}. "
        "Start its agent again; the new controller's next push brings it up to date."
    )
    return EXIT_OK
