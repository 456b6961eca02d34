"""``meshtui backup`` and ``meshtui restore`` (the controller's state folder in one encrypted
file, and back), and ``meshtui host rekey`` (a node told, on the node, to obey a new controller
key). The passphrase comes from a file only its owner can read, or from a no-echo prompt on a
terminal: never from the command line or the environment."""

from __future__ import annotations

import argparse
import getpass
import sys
from pathlib import Path

from meshtui.cli import render
from meshtui.cli.context import EXIT_OK, state_dir
from meshtui.errors import BackupError


def _passphrase(args: argparse.Namespace, *, twice: bool) -> bytes:
    """``--passphrase-file``, else a no-echo prompt when stdin is a terminal."""
    from meshtui.controller.records.backup import read_passphrase

    if args.passphrase_file is not None:
        return read_passphrase(Path(args.passphrase_file))
    if not sys.stdin.isatty():
        raise BackupError(
            "no passphrase: give --passphrase-file FILE (a file only you can read, chmod 600), "
            "or run on a terminal to be asked"
        )
    first = getpass.getpass("backup passphrase: ").encode()
    if not first:
        raise BackupError("an empty passphrase protects nothing; nothing was done")
    if twice and getpass.getpass("again: ").encode() != first:
        raise BackupError("the two passphrases differ; nothing was done")
    return first


def cmd_backup(args: argparse.Namespace) -> int:
    from meshtui.controller.records.backup import KdfParams, as_text, take

    passphrase = _passphrase(args, twice=True)
    summary = take(state_dir(args), Path(args.file), passphrase, KdfParams())
    if args.json:
        render.print_json(summary.to_json())
    else:
        print(as_text(summary))
    return EXIT_OK


def cmd_restore(args: argparse.Namespace) -> int:
    from meshtui.controller.records.restore import restore

    passphrase = _passphrase(args, twice=False)
    report = restore(state_dir(args), Path(args.file), passphrase)
    if args.json:
        render.print_json(report.to_json())
        return EXIT_OK
    print(
        f"restored into {report.state}: a backup taken at {report.taken_at} holding audit "
        f"events 1..{report.events} and {report.pairs} pairs; the restore is event {report.event}"
    )
    if report.gap:
        print(
            f"the nodes had seen up to event {report.gap[1]}: events {report.gap[0]}..{report.gap[1]} "
            "are the gap, on record in the restore event"
        )
    for n in report.nodes:
        seen = f"had seen event {n.seen_seq}" if n.seen_seq is not None else n.reason
        print(f"  {n.node}: {seen}")
    print(
        "next: meshtui push (it names every end and every own secret ahead of this inventory "
        "and converges them)"
    )
    unasked = [n.node for n in report.nodes if n.reason.startswith("not asked")]
    if unasked:
        print(f"not asked (unreachable): {', '.join(unasked)}; push shows them the restore later")
    return EXIT_OK
