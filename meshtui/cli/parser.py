"""The whole command line as one argparse tree; each command's handler is its ``func``.

Handlers live in one module per group (mesh.py, actions.py, host.py, lab.py, provision.py,
watch.py, doctor.py); this module only says which words and options exist and what they mean.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from pathlib import Path

from meshtui.cli import VERSION, secret
from meshtui.kinds import registry
from meshtui.model import Sessions

HANDLERS: dict[str, str] = {
    "": "mesh:cmd_dashboard",  # no command: the dashboard,
    "init": "mesh:cmd_init",
    "declare": "mesh:cmd_declare",
    "status": "mesh:cmd_status",
    "audit": "mesh:cmd_audit",
    "host init": "host:cmd_host_init",
    "host serve": "host:cmd_host_serve",
    "host rekey": "host:cmd_host_rekey",
    "push": "actions:cmd_push",
    "rotate": "actions:cmd_rotate",
    "probe": "actions:cmd_probe",
    "drill": "actions:cmd_drill",
    "lab up": "lab:cmd_lab",
    "lab down": "lab:cmd_lab",
    "lab status": "lab:cmd_lab",
    "lab sweep": "lab:cmd_lab",
    "demo": "lab:cmd_demo",
    "provision": "provision:cmd_provision",
    "watch": "watch:cmd_watch",
    "doctor": "doctor:cmd_doctor",
    "kind list": "kind:cmd_kind_list",
    "kind config": "kind:cmd_kind_config",
    "backup": "recovery:cmd_backup",
    "restore": "recovery:cmd_restore",
    "move-inventory": "mesh:cmd_move_inventory",
}
"""Each command's handler as ``"module:function"`` in ``meshtui.cli``, imported only when the
command runs. Why: the handler modules import the controller, the agent (Starlette, uvicorn),
the provisioner (psycopg, redis, botocore), the lab or the dashboard (Textual), and building the
parser must not pay for all of them: ``meshtui status`` imports what status reads and no more
(tests/test_cli_imports.py). The ``secret`` group's handlers sit beside its words in secret.py,
which is imported with the parser and so imports its own heavy modules when they run."""


def handler(command: str) -> Callable[[argparse.Namespace], int]:
    """The handler of ``command`` (a key of :data:`HANDLERS`), its module imported on call."""
    module, _, function = HANDLERS[command].partition(":")

    def run(args: argparse.Namespace) -> int:
        found: Callable[[argparse.Namespace], int] = getattr(
            importlib.import_module(f"meshtui.cli.{module}"), function
        )
        return found(args)

    run.__qualname__ = run.__name__ = function
    return run


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
    (
        "kind list, kind config",
        "printed / written",
        "--out: a file is there already, or cannot be written",
    ),
    ("backup, restore", "written / restored", "it could not be done"),
    ("move-inventory", "moved, the state folder reads PostgreSQL", "nothing was moved"),
    ("secret status", "every own secret is working", "any is not"),
    (
        "secret put, secret rotate",
        "the new version is in the vault and the file",
        "it is not (yet)",
    ),
    ("secret drill", "passed", "failed"),
    ("secret share-key", "sealed, or every controller holds it", "this controller holds no copy"),
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
        version=VERSION,
        help="the installed distribution and its version, then exit",
    )
    p.add_argument(
        "--read-only",
        action="store_true",
        help="open the inventory read-only; every action is refused",
    )
    p.set_defaults(func=handler(""))
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for group in GROUPS:
        group(sub)
    return p


def _mesh(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = sub.add_parser("init", help="write the controller's keys")
    s.add_argument(
        "--postgres",
        type=Path,
        metavar="FILE",
        help="keep the inventory in the PostgreSQL database this libpq conninfo file (0600) "
        "names, not in a SQLite file in the state folder",
    )
    s.add_argument(
        "--name",
        help="this controller's name in controller.toml (default: the host name), as each "
        "node's policy [[controllers]] names it",
    )
    s.set_defaults(func=handler("init"))

    s = sub.add_parser(
        "move-inventory", help="move this state folder's SQLite inventory into PostgreSQL"
    )
    s.add_argument(
        "--to-postgres",
        type=Path,
        metavar="FILE",
        required=True,
        help="a libpq conninfo file (0600) naming an empty database",
    )
    s.set_defaults(func=handler("move-inventory"))

    s = sub.add_parser("declare", help="load a declaration (TOML)")
    s.add_argument("file", type=Path, help="the declaration (TOML)")
    s.add_argument("--json", action="store_true", help="print the outcome as JSON")
    s.add_argument(
        "--check-nodes",
        action="store_true",
        help="then ask every node whether its policy allows what is declared (nothing is pushed)",
    )
    s.set_defaults(func=handler("declare"))

    s = sub.add_parser("status", help="every pair, its state and who is behind")
    s.add_argument(
        "pairs", nargs="*", metavar="PAIR", help="only these pairs (default: every pair)"
    )
    s.add_argument("--json", action="store_true", help="print every pair as JSON")
    s.add_argument(
        "--due", action="store_true", help="each pair's policy, age and when it is due (overdue)"
    )
    s.add_argument(
        "--check",
        action="store_true",
        help="for a monitor: exit 1 unless every active pair and own secret is working",
    )
    s.set_defaults(func=handler("status"))

    s = sub.add_parser("audit", help="the read-only audit view, or the log as text/JSON/CSV")
    s.add_argument("--verify", action="store_true", help="check the hash chain; exit 1 when broken")
    s.add_argument("--json", action="store_true", help="print the events (or the check) as JSON")
    s.add_argument(
        "--list", action="store_true", help="print the events instead of opening the view"
    )
    s.add_argument("--export", choices=["json", "csv"], help="write every event to stdout")
    s.set_defaults(func=handler("audit"))


def _host(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    group = sub.add_parser("host", help="the agent on a node").add_subparsers(
        dest="host_command", metavar="COMMAND", required=True
    )
    s = group.add_parser("init", help="write this node's keys and pin the controller key")
    s.add_argument("--name", required=True, help="the node's name, as the declaration says it")
    s.add_argument("--state", dest="state_dir", required=True, help="the node's state folder")
    s.add_argument("--controller", required=True, help="the controller's .pub file")
    s.set_defaults(func=handler("host init"))
    s = group.add_parser("serve", help="run the agent")
    s.add_argument("--state", dest="state_dir", required=True, help="the node's state folder")
    s.add_argument("--listen", required=True, help="HOST:PORT or unix:PATH")
    s.add_argument(
        "--allow-loopback",
        action="store_true",
        help="let probes target loopback (lab fallback only)",
    )
    s.set_defaults(func=handler("host serve"))
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
    s.set_defaults(func=handler("host rekey"))


def _actions(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = sub.add_parser("push", help="converge every end")
    s.add_argument("--json", action="store_true", help="print the outcome as JSON")
    s.set_defaults(func=handler("push"))
    s = sub.add_parser("rotate", help="all-or-nothing rotation")
    s.add_argument("pairs", nargs="*", metavar="PAIR", help="the pairs to rotate")
    s.add_argument("--provider", metavar="NODE/MODULE", help="every pair of this provider")
    s.add_argument("--all", action="store_true", help="every active pair")
    s.add_argument("--due", action="store_true", help="the pairs whose policy says rotate now")
    s.add_argument(
        "--revoke-old",
        action="store_true",
        help="break-glass: revoke the old credential even if a consumer cannot take the new "
        "one (it is locked out until a later push); see docs/rotation.md",
    )
    s.add_argument(
        "--sessions",
        choices=[c.value for c in Sessions],
        help="what becomes of the sessions and tokens opened with the old credential: ended "
        "at once (end), or left to drain and counted (drain); default: each pair's declared "
        "sessions, else end. See docs/sessions.md",
    )
    s.add_argument("--yes", action="store_true", help="do not ask")
    s.add_argument("--json", action="store_true", help="print the outcome as JSON")
    s.set_defaults(func=handler("rotate"))
    s = sub.add_parser("probe", help="live logins from each consumer's node")
    s.add_argument(
        "pairs", nargs="*", metavar="PAIR", help="only these pairs (default: every pair)"
    )
    s.add_argument("--json", action="store_true", help="print every probe as JSON")
    s.set_defaults(func=handler("probe"))
    s = sub.add_parser("drill", help="rotation + three logins, with the window")
    s.add_argument("pairs", nargs="+", metavar="PAIR", help="the pairs to drill")
    s.add_argument(
        "--sessions",
        choices=[c.value for c in Sessions],
        help="as rotate's: end or drain the sessions on the old credential (the drill counts "
        "them before and after); default: each pair's declared sessions, else end",
    )
    s.add_argument("--json", action="store_true", help="print each step as JSON")
    s.set_defaults(func=handler("drill"))


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
    s.add_argument(
        "--controllers",
        type=int,
        default=None,
        metavar="N",
        help="raise N controllers (ctl-a here, ctl-b... in lab/controllers/), each its own key, "
        "every node accepting each (default: those this lab was raised with, else 1)",
    )
    s.set_defaults(func=handler("lab up"))
    s = group.add_parser("down", help="stop and remove every process and namespace the lab made")
    s.add_argument("--purge", action="store_true", help="also delete the lab folder")
    s.set_defaults(func=handler("lab down"))
    s = group.add_parser(
        "sweep",
        help="kill every process, remove every namespace and temporary folder a killed test run "
        "left behind",
    )
    s.set_defaults(func=handler("lab sweep"))
    s = group.add_parser("status", help="what is up: agents, PostgreSQL, Redis")
    s.add_argument("--json", action="store_true", help="print it as JSON")
    s.set_defaults(func=handler("lab status"))


def _provision(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    _titles = " or ".join(k.title for k in registry.KINDS.values())
    s = sub.add_parser("demo", help="embedded lab + dashboard; quitting tears the lab down")
    s.add_argument("--loopback", action="store_true", help="no namespaces even when root")
    s.add_argument("--keep", action="store_true", help="leave the lab up after quitting")
    s.set_defaults(func=handler("demo"))

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
    s.add_argument("--json", action="store_true", help="print the report as JSON")
    s.set_defaults(func=handler("provision"))


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
    s.add_argument(
        "--drift-every",
        type=float,
        default=300.0,
        help="seconds between pushes made with every pair working, to find a login or a right "
        "changed outside meshtui (default 300; 0: never)",
    )
    s.add_argument(
        "--revoke-old-overdue",
        action="store_true",
        help="rotate an overdue pair as rotate --revoke-old does: a consumer that cannot take "
        "the new credential is locked out instead of keeping the old one valid",
    )
    s.set_defaults(func=handler("watch"))


def _doctor(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = sub.add_parser(
        "doctor", help="preflight: keys, folders, users, reloads, admin, ports, clocks"
    )
    s.add_argument("--json", action="store_true", help="print every problem as JSON")
    s.set_defaults(func=handler("doctor"))


def _kind(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    group = sub.add_parser(
        "kind", help="the kinds of provider, and each one's server configuration"
    ).add_subparsers(dest="kind_command", metavar="COMMAND", required=True)
    s = group.add_parser("list", help="every kind: its title, usual port and what a login is")
    s.add_argument("--json", action="store_true", help="print the list as JSON")
    s.set_defaults(func=handler("kind list"))
    with_config = [k.name for k in registry.KINDS.values() if k.server_config is not None]
    s = group.add_parser(
        "config",
        help="a kind's server configuration for the mesh: TLS, the provisioner's "
        "least-privilege admin, what expires",
        description="Print each file a real server of KIND needs (a heading, why, its text), "
        "the commands to run once and what expires; the lab's servers are written by the same "
        "code. No secret is ever printed: a file needing one holds a placeholder "
        "(<ADMIN-PASSWORD>, <ADMIN-TOKEN>, ...) and says how to make it and where it goes.",
    )
    s.add_argument("kind", choices=with_config, help="the kind (meshtui kind list)")
    s.add_argument("--address", help="the server's private address (its certificate names it)")
    s.add_argument("--port", type=int, help="the port consumers reach (default: the kind's)")
    s.add_argument("--tls-cert", metavar="FILE", help="the server's certificate on its node")
    s.add_argument("--tls-key", metavar="FILE", help="the server's private key on its node")
    s.add_argument("--ca", metavar="FILE", help="the CA that signed it, on every node")
    s.add_argument("--conf", metavar="DIR", help="the folder of the server's configuration")
    s.add_argument("--data", metavar="DIR", help="the folder of the server's data")
    s.add_argument(
        "--admin", metavar="NAME", help="the provisioner's admin (role, ACL user, policy, identity)"
    )
    s.add_argument("--admin-file", metavar="FILE", help="the declaration's admin file on the node")
    s.add_argument(
        "--network",
        action="append",
        metavar="CIDR",
        help="where consumers connect from (repeat for several; PostgreSQL's pg_hba.conf)",
    )
    s.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="write the files into DIR (made 0700 if missing), each with its mode; "
        "refuses when any is there already",
    )
    s.add_argument(
        "--json", action="store_true", help="print the files, steps and expiries as JSON"
    )
    s.set_defaults(func=handler("kind config"))


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
    s.set_defaults(func=handler("backup"))
    s = sub.add_parser(
        "restore",
        help="put a backup back into an empty state folder, as a signed audit event",
        description="Restore a backup into --state, which must be empty or absent. Checks the "
        "passphrase and the whole file first: nothing is written when either fails.",
    )
    s.add_argument("file", type=Path, help="the backup to restore")
    s.add_argument("--passphrase-file", help=phrase + "without it, asked on a terminal")
    s.add_argument("--json", action="store_true", help="print what was restored as JSON")
    s.set_defaults(func=handler("restore"))


GROUPS: list[Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None]] = [
    _mesh,
    _host,
    _actions,
    _lab,
    _provision,
    _watch,
    _doctor,
    _kind,
    _recovery,
    secret.add_commands,
]
"""The groups of commands, in the order ``meshtui --help`` lists them."""
