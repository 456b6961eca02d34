"""``meshtui lab`` (the lab alone, for scripts and tests) and ``meshtui demo`` (lab + dashboard)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from meshtui.cli import render
from meshtui.cli.context import EXIT_FAILED, EXIT_OK, state_dir
from meshtui.kinds import registry
from meshtui.terminal import require_terminal

if TYPE_CHECKING:
    from meshtui.lab.mesh import LabStatus


def cmd_lab(args: argparse.Namespace) -> int:
    from meshtui.lab import mesh as lab

    state = state_dir(args)
    if args.lab_command == "up":
        built = lab.up(
            state,
            loopback=True if args.loopback else None,
            provisioner=args.provisioner,
            controllers=args.controllers,
        )
        if built.mode == "loopback":
            print(
                "lab is up in LOOPBACK mode (no namespaces: not root?); every probe says loopback"
            )
        else:
            print(f"lab is up: namespaces {built.network}-*, private network {lab.SUBNET}")
        for node, address in built.addresses.items():
            print(
                f"  {node:6} {address:12} agent unix:{built.socket(node)} (pid {built.pids[node]})"
            )
        print(f"declaration: {built.declaration}")
        if built.controllers > 1:
            from meshtui.lab import controllers

            others = controllers.names(built.controllers)[1:]
            folders = [controllers.state_of(built.folder, name) for name in others]
            print(f"controllers: this state folder and {', '.join(map(str, folders))}")
            print("  every lab node accepts each by its own key (its policy's [[controllers]])")
            from meshtui.controller.config import load as load_config

            print(f"  one inventory for all, on PostgreSQL: conninfo {load_config(state).postgres}")
            for folder in folders:
                print(f"  each sees what the others do: meshtui --state {folder} status")
        print(
            f"next: meshtui --state {state} declare {built.declaration} && meshtui --state {state} push"
        )
        return EXIT_OK
    if args.lab_command == "sweep":
        from meshtui.lab import runs

        for line in runs.sweep(runs.stale) or ["no killed test run left anything behind"]:
            print(line)
        return EXIT_OK
    if args.lab_command == "down":
        done = lab.down(state, purge=args.purge, waiting=say_waiting)
        for line in done or ["nothing was running"]:
            print(line)
        return EXIT_OK
    info = lab.status(state)
    if args.json:
        render.print_json(info)
    else:
        render.lab_status(info)
    return EXIT_OK if lab_ok(info) else EXIT_FAILED


def say_waiting(line: str) -> None:
    """What ``lab down`` waits for, on stderr as it goes: a teardown silent for the many
    seconds SeaweedFS takes to stop looks hung, and invites a Ctrl-C in the middle of it."""
    print(line, file=sys.stderr, flush=True)


def lab_ok(info: LabStatus) -> bool:
    """Whether ``lab status`` is all up: every server the lab raised (one key per kind, None
    for a kind it has none of; the default kind's server is always there), and every agent."""
    return bool(
        info["up"]
        and info[registry.DEFAULT]
        and all(info.get(name) is not False for name in registry.NAMES)
        and all(a["answers"] for a in info["agents"].values())
    )


def cmd_demo(args: argparse.Namespace) -> int:
    require_terminal(
        "meshtui demo (a lab and its dashboard)",
        "meshtui lab up, then meshtui status, probe or audit --list, which print text",
    )
    from meshtui.controller.core import Controller
    from meshtui.lab import mesh as lab
    from meshtui.tui.app import run_dashboard

    state = state_dir(args)
    servers = lab.default_servers()
    started = ", ".join(name for name, here in servers.items() if here)
    missing = [name for name, here in servers.items() if not here]
    print(
        f"meshtui demo: building the lab ({started}, namespaces, agents)"
        + (f"; not installed, left out: {', '.join(missing)}" if missing else "")
        + " ...",
        file=sys.stderr,
    )
    built = lab.up(state, loopback=True if args.loopback else None)
    try:
        if built.mode == "loopback":
            print("LOOPBACK mode (no namespaces): every probe says loopback", file=sys.stderr)
        with Controller.open(state) as ctl:
            ctl.declare(built.declaration)
            ctl.push()
            ctl.probe()
        return run_dashboard(state, read_only=False)
    finally:
        if args.keep:
            print(
                f"the lab is still up; meshtui --state {state} lab down removes it", file=sys.stderr
            )
        else:
            for line in lab.down(state, waiting=say_waiting):
                print(line, file=sys.stderr)
