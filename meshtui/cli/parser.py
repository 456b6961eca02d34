"""The whole command line as one argparse tree; each command's handler is its ``func``.

Handlers live in one module per group (mesh.py, actions.py, host.py, lab.py, provision.py,
watch.py, doctor.py); this module only says which words and options exist and what they mean.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from meshtui.cli import actions, doctor, host, lab, mesh, provision, recovery, secret, watch
from meshtui.kinds import registry

DISTRIBUTION = "meshtui-credentials"
"""This project's distribution name (PyPI's "meshtui" is another program)."""


def installed_version() -> str:
    """``meshtui-credentials 0.1.0``: which distribution this ``meshtui`` command comes from."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"{DISTRIBUTION} {version(DISTRIBUTION)}"
    except PackageNotFoundError:
        return f"{DISTRIBUTION} (run from a checkout, not installed)"


EXIT_TABLE: tuple[tuple[str, str, str], ...] = (
    ("meshtui (dashboard)", "quit normally", "it could not start"),
    ("init", "keys written (or already there)", "they could not be written"),
    ("declare FILE", "loaded", "--check-nodes: a node's policy refuses, or a node did not answer"),
    (
        "status",
        "listed (stale and unknown pairs included)",
        "a pair is in ALARM (withdrawn, and its login still works)",
    ),
    (
        "status --check",
        "every active pair and every module's own secret is working",
        "any active pair is stale, refused or unknown, any own secret is not working, or an ALARM",
    ),
    ("status --due", "nothing is overdue", "a pair is overdue for rotation"),
    ("audit", "listed / exported", "--verify: the chain, or a node's anchor, disagrees"),
    (
        "push",
        "every end holds what the inventory says (all ends agree)",
        "an end is behind, unreachable or not as declared",
    ),
    (
        "rotate",
        "rotated, every end holds the new generation",
        "not rotated (nothing minted), or an end is still behind",
    ),
    (
        "probe [PAIR…]",
        "every probed pair was accepted and is working (with no PAIR: every own secret too)",
        "any probed pair was refused, unknown or is stale (an end behind, a file not as declared), or an own secret is not working",
    ),
    ("drill PAIR…", "every drill passed its three logins", "any drill failed"),
    (
        "doctor",
        "no problems",
        "problems named, one line each (a world-readable credential file is one)",
    ),
    ("watch", "stopped by SIGTERM or SIGINT", "it could not start"),
    ("host init, host rekey", "done", "it could not be done"),
    ("host serve", "stopped by SIGTERM", "it could not start"),
    (
        "provision",
        "every consumer in the manifest is as delivered",
        "a login could not be made true",
    ),
    ("lab up, lab status", "every lab server is up", "one is not"),
    ("lab down, demo", "done", "it could not be done"),
    ("backup, restore", "written / restored", "it could not be done"),
    ("secret status", "every own secret is working", "any is not"),
    (
        "secret put, secret rotate",
        "the new version is in the vault and the file",
        "it is not (yet)",
    ),
    ("secret drill", "passed", "failed"),
)
"""Each command, when it exits 0 and when 1 (2 is always bad input): docs/exit-codes.md's
table, word for word (a test holds them together), and the end of ``meshtui --help``."""


def exit_codes() -> str:
    """``--help``'s epilog: :data:`EXIT_TABLE` as text."""
    lines = ["exit codes (docs/exit-codes.md): 0 done and good, 1 failed or not good, 2 bad input"]
    for command, ok, failed in EXIT_TABLE:
        lines += [f"  {command}", f"      0: {ok}", f"      1: {failed}"]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    """The whole command line (docs/ARCHITECTURE.md lists the commands; ``--help`` every option)."""
    p = argparse.ArgumentParser(
        prog="meshtui",
        description="The operator's console for the credentials of a small service mesh.",
        epilog=exit_codes(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--state", help="state folder (default ./state, or $MESHTUI_STATE)")
    p.add_argument(
        "--version",
        action="version",
        version=installed_version(),
        help="the installed distribution and its version, then exit",
    )
    p.add_argument(
        "--read-only",
        action="store_true",
        help="open the inventory read-only; every action is refused",
    )
    p.set_defaults(func=mesh.cmd_dashboard)
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for group in GROUPS:
        group(sub)
    return p


def _mesh(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = sub.add_parser("init", help="write the controller's keys")
    s.set_defaults(func=mesh.cmd_init)

    s = sub.add_parser("declare", help="load a declaration (TOML)")
    s.add_argument("file", type=Path)
    s.add_argument("--json", action="store_true")
    s.add_argument(
        "--check-nodes",
        action="store_true",
        help="then ask every node whether its policy allows what is declared (nothing is pushed)",
    )
    s.set_defaults(func=mesh.cmd_declare)

    s = sub.add_parser("status", help="every pair, its state and who is behind")
    s.add_argument("pairs", nargs="*", metavar="PAIR")
    s.add_argument("--json", action="store_true")
    s.add_argument(
        "--due", action="store_true", help="each pair's policy, age and when it is due (overdue)"
    )
    s.add_argument(
        "--check",
        action="store_true",
        help="for a monitor: exit 1 unless every active pair and own secret is working",
    )
    s.set_defaults(func=mesh.cmd_status)

    s = sub.add_parser("audit", help="the read-only audit view, or the log as text/JSON/CSV")
    s.add_argument("--verify", action="store_true", help="check the hash chain; exit 1 when broken")
    s.add_argument("--json", action="store_true")
    s.add_argument(
        "--list", action="store_true", help="print the events instead of opening the view"
    )
    s.add_argument("--export", choices=["json", "csv"], help="write every event to stdout")
    s.set_defaults(func=mesh.cmd_audit)


def _host(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    group = sub.add_parser("host", help="the agent on a node").add_subparsers(
        dest="host_command", metavar="COMMAND", required=True
    )
    s = group.add_parser("init", help="write this node's keys and pin the controller key")
    s.add_argument("--name", required=True)
    s.add_argument("--state", dest="state_dir", required=True, help="the node's state folder")
    s.add_argument("--controller", required=True, help="the controller's .pub file")
    s.set_defaults(func=host.cmd_host_init)
    s = group.add_parser("serve", help="run the agent")
    s.add_argument("--state", dest="state_dir", required=True, help="the node's state folder")
    s.add_argument("--listen", required=True, help="HOST:PORT or unix:PATH")
    s.add_argument(
        "--allow-loopback",
        action="store_true",
        help="let probes target loopback (lab fallback only)",
    )
    s.set_defaults(func=host.cmd_host_serve)
    s = group.add_parser(
        "rekey",
        help="pin a new controller key on this node (the old one was lost); run on the node",
        description="Make this node obey a new controller key: run on the node itself with its "
        "agent stopped, after checking the key's fingerprint. The audit head it kept under the "
        "old key is kept as history; what it accepted stays refused as a replay.",
    )
    s.add_argument("--state", dest="state_dir", required=True, help="the node's state folder")
    s.add_argument("--controller", required=True, help="the new controller's .pub file")
    s.add_argument("--yes", action="store_true", help="the fingerprint was checked: do it")
    s.set_defaults(func=host.cmd_host_rekey)


def _actions(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = sub.add_parser("push", help="converge every end")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=actions.cmd_push)
    s = sub.add_parser("rotate", help="all-or-nothing rotation")
    s.add_argument("pairs", nargs="*", metavar="PAIR")
    s.add_argument("--provider", metavar="NODE/MODULE")
    s.add_argument("--all", action="store_true")
    s.add_argument("--due", action="store_true", help="the pairs whose policy says rotate now")
    s.add_argument("--yes", action="store_true", help="do not ask")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=actions.cmd_rotate)
    s = sub.add_parser("probe", help="live logins from each consumer's node")
    s.add_argument("pairs", nargs="*", metavar="PAIR")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=actions.cmd_probe)
    s = sub.add_parser("drill", help="rotation + three logins, with the window")
    s.add_argument("pairs", nargs="+", metavar="PAIR")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=actions.cmd_drill)


def _lab(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    group = sub.add_parser("lab", help="the lab alone (for scripts and tests)").add_subparsers(
        dest="lab_command", metavar="COMMAND", required=True
    )
    s = group.add_parser(
        "up", help="build the lab: PostgreSQL, Redis (when installed), namespaces, agents"
    )
    s.add_argument("--loopback", action="store_true", help="no namespaces even when root")
    s.add_argument(
        "--provisioner",
        help="a provisioner command for the database node "
        "(default: built-in; also $MESHTUI_LAB_PROVISIONER); {admin} is replaced by the admin file",
    )
    s.set_defaults(func=lab.cmd_lab)
    s = group.add_parser("down", help="stop and remove every process and namespace the lab made")
    s.add_argument("--purge", action="store_true", help="also delete the lab folder")
    s.set_defaults(func=lab.cmd_lab)
    s = group.add_parser("status", help="what is up: agents, PostgreSQL, Redis")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=lab.cmd_lab)


def _provision(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    _titles = " or ".join(k.title for k in registry.KINDS.values())
    s = sub.add_parser("demo", help="embedded lab + dashboard; quitting tears the lab down")
    s.add_argument("--loopback", action="store_true", help="no namespaces even when root")
    s.add_argument("--keep", action="store_true", help="leave the lab up after quitting")
    s.set_defaults(func=lab.cmd_demo)

    s = sub.add_parser(
        "provision",
        help=f"reconcile one {_titles} with a manifest (built-in provisioner)",
        description=f"Make one {_titles} hold exactly the logins its manifest names "
        f"(the manifest's kind says which; {registry.kind_of(None).title} by default).",
    )
    s.add_argument("--manifest", required=True, help="the manifest (mesh.json)")
    s.add_argument(
        "--admin",
        required=True,
        help="a 0600 file holding the "
        + " or the ".join(
            f"{k.admin_word} ({k.title}: {k.admin_example})" for k in registry.KINDS.values()
        ),
    )
    s.add_argument(
        "--watch", action="store_true", help="keep reconciling on change and against drift"
    )
    s.add_argument("--interval", type=float, default=2.0, help="seconds between polls (--watch)")
    s.add_argument(
        "--drift-every", type=float, default=300.0, help="seconds between drift checks (--watch)"
    )
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=provision.cmd_provision)


def _watch(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = sub.add_parser("watch", help="the unattended loop: rotate by policy, probe, converge")
    s.add_argument(
        "--notify",
        nargs="+",
        metavar="CMD",
        help="argv run (no shell) on every alert, the alert as JSON on stdin; put it last",
    )
    s.add_argument("--notify-timeout", type=float, default=10.0, help="seconds (default 10)")
    s.add_argument("--metrics", metavar="HOST:PORT", help="serve Prometheus text at /metrics")
    s.add_argument(
        "--metrics-allow-remote",
        action="store_true",
        help="let --metrics bind an address other than loopback",
    )
    s.add_argument(
        "--tick", type=float, default=1.0, help="longest sleep between two looks (seconds)"
    )
    s.set_defaults(func=watch.cmd_watch)


def _doctor(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = sub.add_parser(
        "doctor", help="preflight: keys, folders, users, reloads, admin, ports, clocks"
    )
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=doctor.cmd_doctor)


def _recovery(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    phrase = "a file holding the passphrase, only its owner may read it (chmod 600); "
    s = sub.add_parser(
        "backup",
        help="the inventory, the controller's keys and sequence, encrypted, in one new file",
        description="Write an encrypted backup of the state folder (safe while watch runs): "
        "Argon2id (3 passes, 256 MiB) of the passphrase keys an XSalsa20-Poly1305 secret box. "
        "Never over an existing file; mode 0600.",
    )
    s.add_argument("file", type=Path, help="the backup to write (must not exist)")
    s.add_argument("--passphrase-file", help=phrase + "without it, asked on a terminal")
    s.add_argument("--json", action="store_true", help="say what it holds as JSON")
    s.set_defaults(func=recovery.cmd_backup)
    s = sub.add_parser(
        "restore",
        help="put a backup back into an empty state folder, as a signed audit event",
        description="Restore a backup into --state, which must be empty or absent. Checks the "
        "passphrase and the whole file first: nothing is written when either fails.",
    )
    s.add_argument("file", type=Path, help="the backup to restore")
    s.add_argument("--passphrase-file", help=phrase + "without it, asked on a terminal")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=recovery.cmd_restore)


GROUPS: list[Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None]] = [
    _mesh,
    _host,
    _actions,
    _lab,
    _provision,
    _watch,
    _doctor,
    _recovery,
    secret.add_commands,
]
"""The groups of commands, in the order ``meshtui --help`` lists them."""
