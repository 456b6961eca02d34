"""Real agents that write down every request they receive, and a record of who opens the
controller's key: the evidence read-only tests need to show that nothing was sent.

Each agent is the real ``Agent`` behind the real Starlette app and uvicorn on a Unix socket, in
its own process, with one counting ASGI layer around the app that appends ``METHOD PATH`` to a
log before the app sees the request. Root reads any file whatever its mode, so ``chmod 000`` on
the key proves nothing here; instead a Python audit hook records every ``open`` of a file named
``controller.key`` in the test process (sqlite is not involved: keys are read through Python).

Run as ``python -m tests.fix_counted_agents STATE LISTEN LOG`` to serve one agent.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from meshtui.controller.core import Controller, init_keys
from meshtui.controller.read.status_image import IMAGE
from meshtui.host.policy import node_policy
from meshtui.host.state import identity
from meshtui.lab.mesh import agent_answers
from tests.fix_agents import mesh_policy, write_declaration

ROOT = Path(__file__).resolve().parents[1]
AGENT_START_S = 15.0
KEY_NAME = "controller.key"

Scope = MutableMapping[str, Any]
ASGI = Callable[[Scope, Any, Any], Awaitable[None]]


def _append(log: Path, line: str) -> None:
    """One line at the end of ``log``, on disk before the request is handled."""
    with open(log, "a", encoding="utf-8") as out:
        out.write(line + "\n")


def counting(app: ASGI, log: Path) -> ASGI:
    """``app`` with every HTTP request appended to ``log`` before it is handled."""

    async def counted(scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            _append(log, f"{scope['method']} {scope['path']}")
        await app(scope, receive, send)

    return counted


def serve_counted(state: Path, listen: str, log: Path) -> None:
    """Serve one real agent on ``listen`` with its requests counted in ``log``."""
    from meshtui.host.server.routes import Agent
    from meshtui.host.server.serve import _Server, build_app, uvicorn_config

    agent = Agent(identity.load(state), allow_loopback=True)
    app = counting(build_app(agent), log)
    _Server(uvicorn_config(app, listen)).run()  # type: ignore[arg-type]


# ---- who opens the controller's key ------------------------------------------------------
KEY_OPENS: list[str] = []
_hooked = False


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event == "open" and args:
        path = args[0]
        if isinstance(path, bytes):
            path = path.decode(errors="replace")
        if isinstance(path, str | os.PathLike) and os.fspath(path).endswith(KEY_NAME):
            KEY_OPENS.append(os.fspath(path))


def watch_key_opens() -> list[str]:
    """Start recording opens of ``controller.key`` (once per process); returns the record."""
    global _hooked
    if not _hooked:
        sys.addaudithook(_audit)
        _hooked = True
    KEY_OPENS.clear()
    return KEY_OPENS


def folder_digest(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (relative name -> sha256 of its bytes)."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


EMPTY = hashlib.sha256(b"").hexdigest()


def written(before: dict[str, str], after: dict[str, str]) -> dict[str, tuple[str, str]]:
    """Files changed, added or removed between two :func:`folder_digest` records.

    One thing is not a write: any reader of a WAL-mode SQLite file (``mode=ro`` included) makes
    the ``-shm`` lock index and an empty ``-wal`` beside it when they are missing; that is how
    it reads consistently while a writer commits. They hold no inventory data (the ``-wal`` must
    be empty) and are left out. Nor is the status image (``status-image.json``): what a read
    of every pair made, which a one-shot reader leaves for the next (it holds the statuses
    ``status`` prints, nothing else, and is checked against the inventory before any use);
    everything else must match byte for byte.
    """
    before = {n: d for n, d in before.items() if n != IMAGE}
    after = {n: d for n, d in after.items() if n != IMAGE}
    for name in [n for n in after if n.endswith("-shm") and n not in before]:
        del after[name]
    for name in [n for n in after if n.endswith("-wal") and n not in before]:
        if after[name] == EMPTY:
            del after[name]
    return {
        n: (before.get(n, "absent"), after.get(n, "absent"))
        for n in before.keys() | after.keys()
        if before.get(n) != after.get(n)
    }


@dataclass
class CountedMesh:
    """Controller state, node key folders and counting agents on Unix sockets."""

    root: Path
    state: Path
    decl: Path
    nodes: dict[str, Path]
    sockets: dict[str, Path]
    logs: dict[str, Path]
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self, node: str) -> None:
        """Start one counting agent and wait until it answers ``/health``."""
        err = open(self.root / f"{node}.agent.err", "ab")  # noqa: SIM115
        self.procs[node] = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.fix_counted_agents",
                str(self.nodes[node]),
                f"unix:{self.sockets[node]}",
                str(self.logs[node]),
            ],
            cwd=ROOT,
            stdout=err,
            stderr=err,
            stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + AGENT_START_S
        while time.monotonic() < deadline:
            if agent_answers(self.sockets[node]):
                return
            if self.procs[node].poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"agent {node} did not start: {err.name}")

    def stop_all(self) -> None:
        """Stop every agent this mesh started."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self.procs.clear()

    def requests(self) -> dict[str, list[str]]:
        """Every request each agent has received so far (health checks included)."""
        return {
            node: log.read_text().splitlines() if log.exists() else []
            for node, log in self.logs.items()
        }

    def controller(self, *, read_only: bool = False) -> Controller:
        """A fresh controller on the state folder."""
        return Controller.open(self.state, read_only=read_only)


GITEA = "database:app1/gitea->db1/postgres"
WIKI = "database:app1/wiki->db1/postgres"
GRAFANA = "database:app2/grafana->db1/postgres"


def counted_mesh() -> Iterator[CountedMesh]:
    """db1 provides; app1 runs gitea and wiki, app2 grafana; every agent counts requests.

    A generator for a test module's own fixture (``yield from counted_mesh()``)."""
    root = Path(tempfile.mkdtemp(prefix="meshtui-counted-"))
    root.chmod(0o711)
    state = root / "state"
    pub, _ = init_keys(state)
    consumers = {"app1": ["gitea", "wiki"], "app2": ["grafana"]}
    nodes = {}
    for node in ["db1", *consumers]:
        nodes[node] = root / "nodes" / node
        identity.init(node, nodes[node], pub)
        admin = (str(root / "db1.admin.conninfo"),)
        node_policy.write(nodes[node], mesh_policy(node, root, admin=admin))
    decl = write_declaration(
        root, port=5432, admin=root / "db1.admin.conninfo", consumers=consumers
    )  # no server: nothing here may reach one
    mesh = CountedMesh(
        root=root,
        state=state,
        decl=decl,
        nodes=nodes,
        sockets={n: root / "run" / f"{n}.sock" for n in nodes},
        logs={n: root / f"{n}.requests" for n in nodes},
    )
    with mesh.controller() as ctl:
        ctl.declare(decl)
    try:
        for node in nodes:
            mesh.start(node)
        yield mesh
    finally:
        mesh.stop_all()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    serve_counted(Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]))
