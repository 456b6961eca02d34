"""A real mesh on this machine: controller state, node key folders, a declaration, and real
agents (``meshtui host serve`` processes on Unix sockets). The provider is the session's
PostgreSQL through the built-in provisioner, or a command provisioner when a test asks.
"""

from __future__ import annotations

import os
import pwd
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from meshtui.controller.core import Controller, init_keys
from meshtui.host.policy import node_policy
from meshtui.host.state import identity
from meshtui.kinds import registry
from meshtui.lab.mesh import agent_answers

AGENT_START_S = 15.0


@dataclass
class Mesh:
    """A running test mesh: paths, agent processes, and helpers to drive it."""

    root: Path
    state: Path
    decl: Path
    nodes: dict[str, Path]
    sockets: dict[str, Path]
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    allow_loopback: bool = True
    wrap: dict[str, list[str]] = field(default_factory=dict)
    """node -> a command the node's agent is started under (e.g. a read-only mount)."""

    def start(self, node: str) -> None:
        """Start (or restart) one node's agent and wait until it answers."""
        self.start_all([node])

    def start_all(self, nodes: list[str]) -> None:
        """Start (or restart) these nodes' agents together, then wait until each answers: their
        interpreters start side by side rather than one after another."""
        for node in nodes:
            self.stop(node)
            self._spawn(node)
        for node in nodes:
            self._wait(node)

    def _spawn(self, node: str) -> None:
        log = open(self.root / f"{node}.agent.log", "ab")  # noqa: SIM115
        argv = [
            sys.executable,
            "-m",
            "meshtui.cli",
            "host",
            "serve",
            "--state",
            str(self.nodes[node]),
            "--listen",
            f"unix:{self.sockets[node]}",
        ]
        if self.allow_loopback:
            argv.append("--allow-loopback")
        argv = [*self.wrap.get(node, []), *argv]
        self.procs[node] = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        log.close()

    def _wait(self, node: str) -> None:
        deadline = time.monotonic() + AGENT_START_S
        while time.monotonic() < deadline:
            if agent_answers(self.sockets[node]):
                return
            if self.procs[node].poll() is not None:
                break
            time.sleep(0.02)
        raise RuntimeError(
            f"agent {node} did not start: {(self.root / f'{node}.agent.log').read_text()}"
        )

    def stop(self, node: str, sig: int = signal.SIGTERM) -> None:
        """Stop one node's agent (SIGKILL with ``sig=signal.SIGKILL``)."""
        proc = self.procs.pop(node, None)
        if proc is not None and proc.poll() is None:
            proc.send_signal(sig)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def allow(self, node: str, **entries: object) -> None:
        """Write ``node``'s policy as :func:`mesh_policy` with ``entries`` and restart its agent
        (a policy is read when the agent starts)."""
        node_policy.write(self.nodes[node], mesh_policy(node, self.root, **entries))  # type: ignore[arg-type]
        if node in self.procs:
            self.start(node)

    def controller(self, *, read_only: bool = False) -> Controller:
        """A fresh controller on the mesh's state folder (close it when done)."""
        return Controller.open(self.state, read_only=read_only)

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run the real ``meshtui`` CLI against this mesh."""
        return subprocess.run(
            [sys.executable, "-m", "meshtui.cli", "--state", str(self.state), *args],
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )

    def secret(self, relpath: str) -> str:
        """The content of a file under the mesh root (tests only: a credential file)."""
        return (self.root / relpath).read_text()

    def agent_logs(self) -> str:
        """Everything every agent has written to its log."""
        return "".join(p.read_text(errors="replace") for p in self.root.glob("*.agent.log"))


def agent_user() -> str:
    """The name of the user the test's agents run as."""
    return pwd.getpwuid(os.geteuid()).pw_name


def mesh_policy(
    node: str,
    root: Path,
    *,
    owners: tuple[str, ...] = (),
    groups: tuple[str, ...] = (),
    admin: tuple[str, ...] = (),
    kinds: tuple[str, ...] = registry.NAMES,
    reload: tuple[tuple[str, ...], ...] = (),
    provisioner: tuple[tuple[str, ...], ...] = (),
    user: str | None = None,
) -> str:
    """A test mesh node's policy: credential files and provider files below ``root/srv``, the
    given owners, groups, kinds (default: every registered kind) and admin files, and the given commands run as ``user`` (by
    default the agent's own)."""
    under = str(root / "srv")
    who = user or agent_user()
    return node_policy.render(
        node,
        credentials=[node_policy.CredentialRoot(under, frozenset(owners), frozenset(groups))],
        providers=[node_policy.ProviderRoot(under, frozenset(kinds), frozenset(admin))],
        reload=[node_policy.Command(argv, who) for argv in reload],
        provisioner=[node_policy.Command(argv, who) for argv in provisioner],
    )


def write_declaration(
    root: Path,
    *,
    port: int,
    admin: Path | None,
    consumers: dict[str, list[str]],
    provisioner: list[str] | None = None,
    address: str = "127.0.0.1",
) -> Path:
    """A declaration: db1 provides database; each consumer node runs the named modules."""
    lines = []
    for node in ["db1", *consumers]:
        lines += [
            f"[nodes.{node}]",
            f'address = "{address}"',
            f'agent = "unix:{root}/run/{node}.sock"',
            f'keys = "nodes/{node}/node.pub"',
            "",
        ]
    lines += [
        '[modules."db1/postgres"]',
        f'provides = [{{ name = "database", port = {port} }}]',
        'receives = { database = "srv/db1/postgres/mesh.json" }',
        'grants = { database = "srv/db1/postgres/grants" }',
    ]
    if admin is not None:
        lines.append(f'admin = "{admin}"')
    if provisioner is not None:
        lines.append("provisioner = [" + ", ".join(f'"{a}"' for a in provisioner) + "]")
    lines.append("")
    for node, modules in consumers.items():
        for m in modules:
            lines += [
                f'[modules."{node}/{m}"]',
                f'requires = [{{ name = "database", values = {{ database = "{m}_{node}" }}, '
                f'file = "srv/{node}/{m}/db.password" }}]',
                "",
            ]
    path = root / "mesh.toml"
    path.write_text("\n".join(lines))
    return path


@pytest.fixture
def mesh_with_agents(request: pytest.FixtureRequest) -> Iterator[Callable[..., Mesh]]:
    """Factory: ``make(consumers={"app1": ["gitea"]}, port=..., admin=..., provisioner=None)``."""
    made: list[Mesh] = []

    def make(
        *,
        consumers: dict[str, list[str]],
        port: int,
        admin: Path | None,
        provisioner: list[str] | None = None,
        start: bool = True,
    ) -> Mesh:
        root = Path(tempfile.mkdtemp(prefix="meshtui-mesh-"))
        root.chmod(0o711)
        state = root / "state"
        pub, _ = init_keys(state)
        nodes = {}
        for node in ["db1", *consumers]:
            nodes[node] = root / "nodes" / node
            identity.init(node, nodes[node], pub)
            node_policy.write(
                nodes[node],
                mesh_policy(
                    node,
                    root,
                    admin=(str(admin),) if admin is not None else (),
                    provisioner=(tuple(provisioner),) if provisioner else (),
                ),
            )
        decl = write_declaration(
            root, port=port, admin=admin, consumers=consumers, provisioner=provisioner
        )
        m = Mesh(
            root=root,
            state=state,
            decl=decl,
            nodes=nodes,
            sockets={n: root / "run" / f"{n}.sock" for n in nodes},
        )
        made.append(m)
        with m.controller() as ctl:
            ctl.declare(decl)
        if start:
            m.start_all(list(nodes))
        return m

    yield make
    for m in made:
        for node in list(m.procs):
            m.stop(node)
        if os.environ.get("MESHTUI_KEEP_TEST_MESH") is None:
            import shutil

            shutil.rmtree(m.root, ignore_errors=True)
