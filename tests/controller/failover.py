"""Real ``meshtui watch`` processes of several controllers on one PostgreSQL, for the failover
tests and the failover benchmark: start one per controller (optionally inside a network
namespace), read who leads from each one's ``watch.json``, and time a takeover."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from meshtui.atomic import write_private
from meshtui.controller.read.heartbeat import Heartbeat
from meshtui.lab import netns

LEASE = {"length_s": 3.0, "renew_s": 1.0, "deadline_s": 2.0, "retry_s": 0.5}
"""Short lease numbers for tests, in the same proportions as the defaults (15, 5, 10, 2)."""


def lease_table(numbers: dict[str, float]) -> str:
    return "[lease]\n" + "".join(f"{k} = {v}\n" for k, v in numbers.items())


def controller_folder(
    base: Path,
    name: str,
    conninfo: str,
    numbers: dict[str, float],
    namespace: str | None = None,
) -> Path:
    """A state folder for controller ``name``: its keys (``init``, inside ``namespace`` when
    PostgreSQL is reached from there) and a config naming the PostgreSQL (a 0600 conninfo file
    of its own) and the lease's numbers."""
    folder = base / name
    folder.mkdir(mode=0o700)
    write_private(folder / "inventory.conninfo", (conninfo + "\n").encode())
    (folder / "controller.toml").write_text(
        f'name = "{name}"\n[inventory]\npostgres = "inventory.conninfo"\n' + lease_table(numbers)
    )
    argv = [sys.executable, "-m", "meshtui.cli", "--state", str(folder), "init"]
    done = subprocess.run(
        netns.exec_argv(namespace, argv) if namespace else argv,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return folder


@dataclass
class WatchProcess:
    """One controller's ``meshtui watch``, running."""

    name: str
    folder: Path
    proc: subprocess.Popen[bytes]
    log: Path

    def beat(self) -> Heartbeat | None:
        return Heartbeat.read(self.folder)

    def role(self) -> str | None:
        beat = self.beat()
        if beat is None or beat.pid != self.proc.pid or self.proc.poll() is not None:
            return None
        return beat.role

    def leading_cycles(self) -> int:
        """Cycles it ran (a standby runs none)."""
        beat = self.beat()
        return beat.cycles if beat is not None and beat.pid == self.proc.pid else 0

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


@dataclass
class Watches:
    """Several controllers' watches; :meth:`stop_all` ends every one still running."""

    running: list[WatchProcess] = field(default_factory=list)

    def start(
        self,
        name: str,
        folder: Path,
        *,
        namespace: str | None = None,
        tick: float = 0.2,
        extra: Sequence[str] = (),
    ) -> WatchProcess:
        log = folder / "watch.log"
        argv = [sys.executable, "-m", "meshtui.cli", "--state", str(folder), "watch"]
        argv += ["--tick", str(tick), *extra]
        if namespace is not None:
            argv = netns.exec_argv(namespace, argv)
        with log.open("ab") as out:
            proc = subprocess.Popen(
                argv,
                stdout=out,
                stderr=out,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        w = WatchProcess(name, folder, proc, log)
        self.running.append(w)
        return w

    def leaders(self) -> list[WatchProcess]:
        return [w for w in self.running if w.role() == "leader"]

    def wait_roles(self, timeout: float) -> list[WatchProcess]:
        """Wait until every live watch has said its role and exactly one leads; the leaders."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            live = [w for w in self.running if w.proc.poll() is None]
            roles = [w.role() for w in live]
            if live and None not in roles and roles.count("leader") == 1:
                return self.leaders()
            time.sleep(0.05)
        raise AssertionError(f"no single leader in {timeout} s: {self.describe()}")

    def takeover(self, among: Sequence[WatchProcess], timeout: float) -> tuple[WatchProcess, float]:
        """Wait for one of ``among`` to lead and finish a cycle as leader; (it, seconds from now)."""
        began = time.monotonic()
        before = {w.name: w.leading_cycles() for w in among}
        while time.monotonic() - began < timeout:
            for w in among:
                if w.role() == "leader" and w.leading_cycles() > before[w.name]:
                    return w, time.monotonic() - began
            time.sleep(0.02)
        raise AssertionError(f"no takeover in {timeout} s: {self.describe()}")

    def describe(self) -> str:
        out = []
        for w in self.running:
            tail = w.log.read_text(errors="replace").splitlines()[-4:] if w.log.exists() else []
            out.append(f"{w.name} pid {w.proc.pid} rc {w.proc.poll()} role {w.role()}: {tail}")
        return "; ".join(out)

    def stop_all(self) -> None:
        for w in self.running:
            w.kill(signal.SIGTERM)
        self.running.clear()


def metrics_leader(text: str) -> float | None:
    """``meshtui_watch_leader``'s value in a Prometheus page."""
    for line in text.splitlines():
        if line.startswith("meshtui_watch_leader "):
            return float(line.split()[1])
    return None


def heartbeat_json(folder: Path) -> dict[str, object]:
    return dict(json.loads((folder / "watch.json").read_text()))
