"""The commands for a module's own secrets: ``secret status``, ``secret put``, ``secret rotate``,
``secret drill``, ``secret share-key``.

``secret put MODULE NAME`` reads the value from a no-echo prompt on a terminal, or from stdin
when it is not one; never from argv or the environment. It is sealed to the vault's node at
once and dropped; the inventory keeps who supplied which version when, and its digest.
"""

from __future__ import annotations

import argparse
import getpass
import os
import pwd
import sys

from meshtui.cli.context import EXIT_FAILED, EXIT_INPUT, EXIT_OK, controller

MAX_VALUE_BYTES = 65536


def cmd_secret_status(args: argparse.Namespace) -> int:
    with controller(args, read_only=True) as ctl:
        rows = ctl.secrets()
    from meshtui.cli import render  # start-up: secret.py is imported with the parser

    if args.json:
        render.print_json([r.to_json() for r in rows])
    else:
        render.own_secrets(rows)
    return EXIT_OK if all(r.state == "working" for r in rows) else EXIT_FAILED


def _read_value(module: str, name: str) -> bytes:
    """The value from a no-echo prompt (a terminal) or from stdin, one trailing newline cut."""
    if sys.stdin.isatty():
        text = getpass.getpass(f"value of {module} secret {name} (not shown): ")
        return text.encode("utf-8")
    data = sys.stdin.buffer.read(MAX_VALUE_BYTES + 1)
    if len(data) > MAX_VALUE_BYTES:
        raise ValueError(f"the value on stdin is longer than {MAX_VALUE_BYTES} bytes")
    return data[:-1] if data.endswith(b"\n") else data


def cmd_secret_put(args: argparse.Namespace) -> int:
    try:
        value = _read_value(args.module, args.name)
    except (ValueError, EOFError) as exc:
        print(f"meshtui secret put: {exc}; nothing was sealed", file=sys.stderr)
        return EXIT_INPUT
    who = pwd.getpwuid(os.geteuid()).pw_name
    with controller(args) as ctl:
        version = ctl.secret_put(args.module, args.name, value, who)
        del value
        row = next(r for r in ctl.secrets() if (r.module, r.name) == (args.module, args.name))
    print(f"{args.module} secret {args.name}: version {version} sealed to its vault; {row.reason}")
    return EXIT_OK if row.state == "working" else EXIT_FAILED


def cmd_secret_rotate(args: argparse.Namespace) -> int:
    with controller(args) as ctl:
        version = ctl.secret_rotate(args.module, args.name)
        row = next(r for r in ctl.secrets() if (r.module, r.name) == (args.module, args.name))
    print(f"{args.module} secret {args.name}: version {version}; {row.reason}")
    return EXIT_OK if row.state == "working" else EXIT_FAILED


def cmd_secret_drill(args: argparse.Namespace) -> int:
    with controller(args) as ctl:
        report = ctl.secret_drill(args.module, args.name)
    from meshtui.cli import render  # start-up: secret.py is imported with the parser

    if args.json:
        render.print_json(report.to_json())
    else:
        render.secret_drill(report)
    return EXIT_OK if report.ok else EXIT_FAILED


def cmd_secret_share_key(args: argparse.Namespace) -> int:
    with controller(args) as ctl:
        shared = ctl.share_digest_key(args.controllers or None, anew=args.anew)
    if args.anew:
        print("a new mesh digest key was made; put or rotate each own secret stale after it")
    if shared:
        print(f"the mesh's digest key is now sealed to {', '.join(shared)}")
    elif args.controllers:
        print(f"{', '.join(args.controllers)} hold the mesh's digest key already; nothing changed")
    else:
        print("every controller this one knows holds the mesh's digest key already")
    return EXIT_OK


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``meshtui secret status|put|rotate``."""
    group = sub.add_parser("secret", help="a module's own secrets, kept in its vault")
    words = group.add_subparsers(dest="secret_command", metavar="ACTION", required=True)
    s = words.add_parser("status", help="every own secret: the versions its vault and file hold")
    s.add_argument("--json", action="store_true", help="print every secret as JSON")
    s.set_defaults(func=cmd_secret_status)
    s = words.add_parser(
        "put",
        help="supply a secret's value (no-echo prompt, or stdin; never argv)",
        description="Read the value of a supplied secret from a no-echo prompt (or stdin when "
        "it is not a terminal), seal it to the vault's node, and deliver it.",
    )
    s.add_argument("module", metavar="MODULE", help="the module, NODE/NAME (app1/gitea)")
    s.add_argument("name", metavar="NAME", help="the secret's name in its secrets entry")
    s.set_defaults(func=cmd_secret_put)
    s = words.add_parser("rotate", help="mint a new version of a minted secret and deliver it")
    s.add_argument("module", metavar="MODULE", help="the module, NODE/NAME (app1/gitea)")
    s.add_argument("name", metavar="NAME", help="the secret's name in its secrets entry")
    s.set_defaults(func=cmd_secret_rotate)
    s = words.add_parser(
        "drill",
        help="rotate a minted secret and prove the old value is gone from its file and vault",
        description="Rotate a minted secret, then prove from the module's node that its file "
        "and the vault's current version hold the new value and neither holds the old one.",
    )
    s.add_argument("module", metavar="MODULE", help="the module, NODE/NAME (app1/gitea)")
    s.add_argument("name", metavar="NAME", help="the secret's name in its secrets entry")
    s.add_argument("--json", action="store_true", help="print each check as JSON")
    s.set_defaults(func=cmd_secret_drill)
    s = words.add_parser(
        "share-key",
        help="seal the mesh's digest key to controllers that have no copy (push does it too)",
        description="Seal the mesh's digest key (what a module's own secrets are digested "
        "with) to each named controller, or to every controller this one knows "
        "(controllers/NAME.pub) that has no copy; a push does the same.",
    )
    s.add_argument(
        "controllers", metavar="CONTROLLER", nargs="*", help="a controller's name (default: all)"
    )
    s.add_argument(
        "--anew",
        action="store_true",
        help="first make a new key in place of one no controller can open any more (its "
        "secrets then read stale until put or rotated)",
    )
    s.set_defaults(func=cmd_secret_share_key)
