"""``meshtui lab up|down|status``: a whole mesh on this machine, for the demo and the tests.

A real server of each registered kind (its ``Kind.lab``, a
:class:`~meshtui.contracts.lab_server.LabServer`) inside the provider node's network namespace,
one namespace per node on a private bridge with no default route, and an agent per node inside
its namespace, reached by the controller over a Unix socket. Without root it falls back to
loopback and says so: every probe result then reads ``loopback``. The lab knows no kind by
name: a kind added to the registry is raised here with no edit to this module.
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import shlex
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import httpx

from meshtui import runas
from meshtui.atomic import write_private
from meshtui.contracts.lab_server import LabConsumer, LabProvider, LabServer, LabSite
from meshtui.controller.keys import write_keys_once
from meshtui.errors import LabError
from meshtui.folders import trusted_path
from meshtui.freeform import LibraryKwargs
from meshtui.host.policy import node_policy
from meshtui.host.state import identity
from meshtui.kinds import registry
from meshtui.kinds.kind import Kind
from meshtui.lab import controllers as controllers_mod
from meshtui.lab import foreign, netns, shared_inventory, toml_writer
from meshtui.lab.wait import ended, poll

LAB = "lab"
SUBNET = "10.213.0.0/24"
DEFAULT_MESH: dict[str, list[str]] = {
    "app1": ["gitea", "keycloak", "grafana"],
    "app2": ["wiki", "gitea"],
}
PROVIDER_NODE = "db1"
AGENT_START_S = 20.0
AGENT_LOG_LINES = 8
"""How much of an agent's log a failed start shows."""
PROVISIONER_ENV = "MESHTUI_LAB_PROVISIONER"


@dataclass(frozen=True)
class Lab:
    """What ``lab up`` built, as recorded in ``<state>/lab/lab.json``."""

    folder: Path
    mode: str  # "netns" or "loopback"
    network: str
    addresses: dict[str, str]
    pids: dict[str, int]
    declaration: Path
    datadir: Path
    controllers: int = 1  # ctl-a, and ctl-b... in lab/controllers/ (meshtui.lab.controllers)

    def namespace(self, node: str) -> str | None:
        """The node's namespace (None in loopback mode)."""
        return f"{self.network}-{node}" if self.mode == "netns" else None

    def socket(self, node: str) -> Path:
        """Where the node's agent listens."""
        return self.folder / "run" / f"{node}.sock"


def lab_name(state_dir: Path) -> str:
    """A short prefix for namespaces, unique to the state folder."""
    return "mt" + hashlib.blake2b(str(state_dir.resolve()).encode(), digest_size=3).hexdigest()


def _alive(pid: int) -> bool:
    """Whether agent ``pid`` still runs. An agent this process started (``lab up`` and ``down``
    in one process, as the tests do) is reaped when it has ended: a zombie would answer
    ``kill(pid, 0)`` and ``down`` would wait its whole grace period for nothing."""
    return not ended(pid)


def agent_answers(sock: Path) -> bool:
    """True when an agent answers ``/health`` on the Unix socket ``sock``."""
    try:
        with httpx.Client(
            transport=httpx.HTTPTransport(uds=str(sock)), base_url="http://agent", timeout=1.0
        ) as client:
            return client.get("/health").status_code == 200
    except httpx.HTTPError:
        return False


def load(state_dir: Path) -> Lab | None:
    """The lab recorded in ``state_dir``, or None when none was built."""
    folder = state_dir / LAB
    try:
        data = json.loads((folder / "lab.json").read_text())
    except (OSError, ValueError):
        return None
    return Lab(
        folder=folder,
        mode=data["mode"],
        network=data["network"],
        addresses=data["addresses"],
        pids={k: int(v) for k, v in data["pids"].items()},
        declaration=Path(data["declaration"]),
        datadir=Path(data["datadir"]),
        controllers=int(data.get("controllers", 1)),
    )


def _save(lab: Lab) -> None:
    data = {
        "mode": lab.mode,
        "network": lab.network,
        "addresses": lab.addresses,
        "pids": lab.pids,
        "declaration": str(lab.declaration),
        "datadir": str(lab.datadir),
        "controllers": lab.controllers,
    }
    write_private(lab.folder / "lab.json", json.dumps(data, indent=1).encode())


def lab_servers() -> dict[str, tuple[Kind, LabServer]]:
    """Every registered kind's lab server, by kind name, in the registry's order."""
    return {name: (kind, kind.lab.load()) for name, kind in registry.KINDS.items()}


def up(
    state_dir: Path,
    *,
    mesh: dict[str, list[str]] | None = None,
    loopback: bool | None = None,
    provisioner: str | None = None,
    kinds: Mapping[str, bool] | None = None,
    controllers: int | None = None,
) -> Lab:
    """Build (or complete) the lab; safe to run twice. Returns what is running.

    Each registered kind's server (its ``Kind.lab``) runs on the provider node, ``db1/<its
    module>``, required by the modules of the mesh its lab server names. ``kinds`` turns a kind
    on (True) or off (False) by name; a kind it leaves out is on for the default mesh when this
    machine can run its server. The default kind's server, which every module requires, always
    runs; ``provisioner`` (or $MESHTUI_LAB_PROVISIONER) is its provider's provisioner command.
    ``controllers``: more than one raises the others beside the state folder's own
    (:mod:`meshtui.lab.controllers`), every node accepting each by its own key; None keeps
    those the lab was raised with (a ``lab up`` after ``lab down``: every node still accepts
    each, and keeps the audit head one of them signed).
    """
    wanted = kinds or {}
    chosen = {
        name: pair
        for name, pair in lab_servers().items()
        if name == registry.DEFAULT or wanted.get(name, mesh is None and pair[1].available())
    }

    mesh = mesh or DEFAULT_MESH
    # made here and checked first: no link or folder another user planted is worked through
    trusted_path(state_dir, create=0o711, own=True)
    state_dir = state_dir.resolve()
    folder = state_dir / LAB
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o711)
    if controllers is None:
        controllers = controllers_mod.raised(folder)
    others = [controllers_mod.state_of(folder, n) for n in controllers_mod.names(controllers)[1:]]
    if others:  # one inventory for all of them, on PostgreSQL: refused before anything is raised
        shared_inventory.check(state_dir, folder, others)
    use_netns = netns.available() if loopback is None else not loopback
    if use_netns and os.geteuid() != 0:
        raise LabError("network namespaces need root; run as root or pass --loopback")
    previous = load(state_dir)
    mode = "netns" if use_netns else "loopback"
    if previous is not None and previous.mode != mode:
        raise LabError(f"a {previous.mode} lab is up in {folder}; run meshtui lab down first")
    nodes = [PROVIDER_NODE, *mesh]
    name = lab_name(state_dir)
    if use_netns:
        net = netns.create(name, nodes, SUBNET)
        addresses = dict(net.nodes)
        networks: tuple[str, ...] = (net.cidr(),)
    else:
        addresses = {n: "127.0.0.1" for n in nodes}
        networks = ("127.0.0.1/32",)
    pub, _ = write_keys_once(state_dir)
    accepted = controllers_mod.make(state_dir, folder, controllers)
    if others or shared_inventory.names_own(state_dir, folder):
        shared_inventory.share(state_dir, folder, others)
    for node in nodes:
        identity.init(node, folder / "nodes" / node, pub)
    raised: dict[str, tuple[Kind, LabServer, LabProvider]] = {}
    for kind, server in chosen.values():
        module = f"{PROVIDER_NODE}/{server.module}"
        site = LabSite(
            folder=folder / server.folder,
            node_state=folder / "nodes" / PROVIDER_NODE,
            module=module,
            files=folder / "srv" / module,
            address=addresses[PROVIDER_NODE],
            netns=f"{name}-{PROVIDER_NODE}" if use_netns else None,
            networks=networks,
        )
        raised[kind.name] = (kind, server, server.raise_server(site))
    command = provisioner if provisioner is not None else os.environ.get(PROVISIONER_ENV)
    decl, changed = _write_declaration(
        folder,
        addresses,
        mesh,
        raised,
        provisioner=shlex.split(command) if command else None,
        controllers=accepted,
    )
    _make_credential_folders(folder / "srv", mesh)
    lab = Lab(
        folder=folder,
        mode=mode,
        network=name,
        addresses=addresses,
        pids=dict(previous.pids) if previous else {},
        declaration=decl,
        datadir=folder / chosen[registry.DEFAULT][1].folder,
        controllers=controllers,
    )
    for node in nodes:
        running = lab.pids.get(node)
        if running and _alive(running) and node in changed:  # a policy is read at its start
            _stop_agent(running)
        elif running and _alive(running) and agent_answers(lab.socket(node)):
            continue
        lab.pids[node] = _start_agent(lab, node)
    _save(lab)
    for node in nodes:
        _wait_agent(lab, node)
    return lab


def _start_agent(lab: Lab, node: str) -> int:
    sock = lab.socket(node)
    sock.parent.mkdir(parents=True, exist_ok=True)
    argv = [
        sys.executable,
        "-m",
        "meshtui.cli",
        "host",
        "serve",
        "--state",
        str(lab.folder / "nodes" / node),
        "--listen",
        f"unix:{sock}",
    ]
    if lab.mode == "loopback":
        argv.append("--allow-loopback")
    log = _open_log(lab.folder / f"{node}.agent.log")
    kwargs: LibraryKwargs = {
        "stdout": log,
        "stderr": log,
        "cwd": "/",
    }
    try:  # a session of its own (meshtui.runas), so no terminal of ours stays with it
        proc = runas.spawn(argv, None, netns=lab.namespace(node) or None, **kwargs)
    except OSError as exc:
        raise LabError(f"the agent of {node} could not be started: {exc}") from exc
    log.close()
    return proc.pid


def _stop_agent(pid: int) -> None:
    """Stop one agent (SIGTERM, then SIGKILL after a few seconds)."""
    os.kill(pid, signal.SIGTERM)
    if not poll(lambda: not _alive(pid), 10):
        os.kill(pid, signal.SIGKILL)


def _open_log(path: Path) -> BinaryIO:
    """Open an agent's log for appending, 0600 whatever the umask (the lab folder is 0711)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags, 0o600)
    os.fchmod(fd, 0o600)
    return os.fdopen(fd, "ab")


def _wait_agent(lab: Lab, node: str) -> None:
    sock, pid = lab.socket(node), lab.pids[node]
    if poll(lambda: agent_answers(sock), AGENT_START_S, unless=lambda: not _alive(pid)):
        return
    log = (lab.folder / f"{node}.agent.log").read_text(errors="replace")
    tail = "\n".join(log.splitlines()[-AGENT_LOG_LINES:])  # whole lines: its last says why
    raise LabError(
        f"the agent of {node} did not start; its log ends:\n{tail}\n"
        f"the rest of the lab is up: fix what the log's last line names and run "
        f"meshtui --state {lab.folder.parent} lab up again, or lab down to take it down"
    )


def _make_credential_folders(srv: Path, mesh: dict[str, list[str]]) -> None:
    """Each consumer's credential folder, as an operator makes it on a real node (root, 0755),
    so ``meshtui doctor`` on a fresh lab has nothing to report."""
    for node, modules in mesh.items():
        for module in modules:
            for folder in (srv, srv / node, srv / node / module):
                folder.mkdir(mode=0o755, exist_ok=True)


def _write_declaration(
    folder: Path,
    addresses: dict[str, str],
    mesh: dict[str, list[str]],
    raised: Mapping[str, tuple[Kind, LabServer, LabProvider]],
    *,
    provisioner: list[str] | None,
    controllers: Sequence[node_policy.ControllerKey] = (),
) -> tuple[Path, set[str]]:
    """The lab's declaration, and the nodes whose policy it changed."""
    srv = folder / "srv"
    tables: list[toml_writer.Table] = [
        (
            ("nodes", node),
            {
                "address": address,
                "agent": f"unix:{folder / 'run' / node}.sock",
                "keys": str(folder / "nodes" / node / "node.pub"),
            },
        )
        for node, address in addresses.items()
    ]
    for name, (_kind, server, provider) in raised.items():
        offers = dict(provider.table)
        if provisioner and name == registry.DEFAULT:
            offers["provisioner"] = list(provisioner)
        tables.append((("modules", f"{PROVIDER_NODE}/{server.module}"), offers))
    for node, modules in mesh.items():
        for module in modules:
            consumer = LabConsumer(node, module, srv / node / module, mesh)
            requires: list[toml_writer.Value] = []
            table: dict[str, toml_writer.Value] = {"requires": requires}
            for _kind, server, _provider in raised.values():
                need = server.need(consumer)
                if need is not None:
                    requires.append(need.requires)
                    table.update(need.more)
            tables.append((("modules", f"{node}/{module}"), table))
    handed = {  # the provisions whose login hands the server the credential
        str(entry["name"]): node_policy.Server(
            kind.name, provider.address, provider.port, str(provider.ca)
        )
        for kind, _server, provider in raised.values()
        if kind.hands_over
        for entry in _provides(provider)
    }
    changed = _write_policies(folder, list(addresses), tables, handed, controllers)
    path = folder / "mesh.toml"
    text = toml_writer.document(
        tables, comment="written by meshtui lab up: the lab's nodes, reached over Unix sockets"
    )
    write_private(path, text.encode())
    return path, changed


def kind_name(given: object) -> str:
    """A provides entry's kind by its registered name (absent: the default kind)."""
    return registry.name_of(str(given) if given else None)


def _write_policies(
    folder: Path,
    nodes: list[str],
    tables: list[toml_writer.Table],
    servers: Mapping[str, node_policy.Server],
    controllers: Sequence[node_policy.ControllerKey],
) -> set[str]:
    """Each node's policy: what the lab's declaration asks of it and no more. Credential files
    and provider files only below the node's own folder in ``srv/``, the kinds and admin files
    its providers declare, the lab's ``servers`` (by provision) its modules require whose login
    hands the server the credential (the vault, Redis), and a declared provisioner command run
    as the agent's own user; the lab's ``controllers`` when it has more than one. The nodes
    whose policy changed are returned (their agents read it when they start)."""
    me = pwd.getpwuid(os.geteuid()).pw_name
    changed: set[str] = set()
    for node in nodes:
        kinds: set[str] = set()
        admin: set[str] = set()
        groups: set[str] = set()  # the groups its modules' own secrets declare
        commands: list[node_policy.Command] = []
        sends_to: set[node_policy.Server] = set()
        for key, body in tables:
            if key[0] != "modules" or not key[1].startswith(f"{node}/"):
                continue
            needs = body.get("requires")
            if isinstance(needs, list):
                sends_to |= {
                    server
                    for n in needs
                    if isinstance(n, Mapping)
                    and (server := servers.get(str(n.get("name")))) is not None
                }
            offers = body.get("provides")
            if isinstance(offers, list):
                kinds |= {kind_name(o.get("kind")) for o in offers if isinstance(o, Mapping)}
            if isinstance(body.get("admin"), str):
                admin.add(str(body["admin"]))
            own = body.get("secrets")
            if isinstance(own, list):
                groups |= {str(e["group"]) for e in own if isinstance(e, Mapping) and "group" in e}
            argv = body.get("provisioner")
            if isinstance(argv, list):
                commands.append(node_policy.Command(tuple(str(a) for a in argv), me))
        under = str(folder / "srv" / node)
        text = node_policy.render(
            node,
            controllers=controllers,
            credentials=[node_policy.CredentialRoot(under, groups=frozenset(groups))],
            providers=[node_policy.ProviderRoot(under, frozenset(kinds), frozenset(admin))]
            if kinds
            else [],
            servers=sorted(sends_to, key=lambda s: s.kind),
            provisioner=commands,
        )
        path = node_policy.path_of(folder / "nodes" / node)
        if not path.exists() or path.read_text() != text:
            node_policy.write(folder / "nodes" / node, text)
            changed.add(node)
    return changed


def _provides(provider: LabProvider) -> list[Mapping[str, toml_writer.Value]]:
    """The ``provides`` entries of a raised server's module table."""
    offers = provider.table.get("provides")
    if not isinstance(offers, list):
        return []
    return [o for o in offers if isinstance(o, Mapping)]


def default_servers() -> dict[str, bool]:
    """The servers the default mesh of :func:`up` runs, by title, each with whether it is
    installed here (one not installed is left out of the mesh)."""
    return {kind.title: server.available() for kind, server in lab_servers().values()}


def down(
    state_dir: Path, *, purge: bool = False, waiting: Callable[[str], None] | None = None
) -> list[str]:
    """Stop every agent and server, remove the namespaces; ``purge`` deletes the lab folder.

    ``waiting`` is told, before each stop that may take a while, what is being waited for (a
    teardown that looks hung invites a Ctrl-C in the middle of it)."""
    say = waiting or (lambda _line: None)
    trusted_path(state_dir, own=True)  # its lab.json names the pids root signals
    state_dir = state_dir.resolve()
    lab = load(state_dir)
    done: list[str] = []
    if lab is not None:
        if any(_alive(pid) for pid in lab.pids.values()):
            say("stopping the agents ...")
        for node, pid in lab.pids.items():
            if _alive(pid):
                os.kill(pid, signal.SIGTERM)
                done.append(f"stopped agent {node} (pid {pid})")
        poll(lambda: not any(_alive(p) for p in lab.pids.values()), 10)
        for pid in lab.pids.values():
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        for node in lab.pids:
            lab.socket(node).unlink(missing_ok=True)
    folder = state_dir / LAB
    last = sorted(lab_servers().values(), key=lambda pair: pair[0].name == registry.DEFAULT)
    for kind, server in last:  # the mesh's database last
        if server.stop(folder / server.folder, purge=purge, say=say):
            done.append(f"stopped {kind.title}")
    done += shared_inventory.stop(state_dir, folder, purge=purge)
    name = lab_name(state_dir)
    if os.geteuid() == 0 and netns.exists(name):
        netns.destroy(name)
        done.append(f"removed namespaces {name}-*")
    if purge and folder.exists():
        done += controllers_mod.forget(state_dir, folder)
        # the data directory inside is the server user's: never follow what it left there
        foreign.remove_tree(folder)
        done.append(f"removed {folder}")
    elif lab is not None:
        (folder / "lab.json").unlink(missing_ok=True)
    return done


LabStatus = dict[str, Any]  # open: a key per registered kind beside the fixed ones
"""``lab status --json``: up, mode, network, declaration, agents (by node: pid, alive, answers,
address) and each kind's server by its name (running, or None: this lab has none of it)."""


def status(state_dir: Path) -> LabStatus:
    """What is up: mode, namespaces, agents, and each kind's server by kind name (None when the
    lab has none of it)."""
    lab = load(state_dir.resolve())
    if lab is None:
        return {"up": False}
    running = {
        name: server.running(lab.folder / server.folder)
        for name, (_kind, server) in lab_servers().items()
    }
    return {
        "up": True,
        "mode": lab.mode,
        "network": lab.network if lab.mode == "netns" else None,
        "declaration": str(lab.declaration),
        **running,
        "agents": {
            n: {
                "pid": p,
                "alive": _alive(p),
                "answers": agent_answers(lab.socket(n)),
                "address": lab.addresses.get(n),
            }
            for n, p in lab.pids.items()
        },
    }
