"""watch(): reconcile now, on a changed manifest or secret, against drift; stop on the event."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator

import pytest

from meshtui.errors import MeshtuiError
from meshtui.provisioner.harness import Report, watch
from tests.fix_pg import free_port

from .conftest import Mesh, outcomes


class Watcher:
    """watch() in a thread, its reports and errors in queues."""

    def __init__(self, mesh: Mesh, *, drift_every: float = 3600.0) -> None:
        self.reports: queue.Queue[Report] = queue.Queue()
        self.errors: queue.Queue[MeshtuiError] = queue.Queue()
        self.stop = threading.Event()
        self.thread = threading.Thread(
            target=watch,
            args=(mesh.manifest, mesh.admin),
            kwargs={
                "interval": 0.05,
                "drift_every": drift_every,
                "stop": self.stop,
                "on_report": self.reports.put,
                "on_error": self.errors.put,
            },
            daemon=True,
        )
        self.thread.start()

    def next_report(self, timeout: float = 10.0) -> Report:
        return self.reports.get(timeout=timeout)

    def close(self) -> float:
        """Set the event; how long the thread took to finish."""
        started = time.monotonic()
        self.stop.set()
        self.thread.join(timeout=10)
        assert not self.thread.is_alive()
        return time.monotonic() - started


@pytest.fixture
def started(mesh: Mesh) -> Iterator[tuple[Mesh, Watcher]]:
    mesh.add("app1", "gitea", database="gitea")
    mesh.write()
    watcher = Watcher(mesh)
    try:
        yield mesh, watcher
    finally:
        watcher.close()


def test_watch_reacts_to_secret_and_manifest_changes(started: tuple[Mesh, Watcher]) -> None:
    mesh, watcher = started
    assert outcomes(watcher.next_report()) == {"gitea_app1_x": "created"}
    old = mesh.password("app1", "gitea")
    time.sleep(0.2)
    assert watcher.reports.empty()  # nothing changed: no run

    # the secret file changes first (the manifest still names the old digest): waiting
    secret_file = mesh.folder / mesh.consumers["app1/gitea"]["secret"]
    secret_file.write_bytes(b"half-delivered")
    report = watcher.next_report()
    assert outcomes(report) == {"gitea_app1_x": "waiting"}
    assert mesh.can_login("gitea_app1_x", old, "gitea")  # waiting touched nothing

    # then the manifest and the secret agree again on a new secret: updated
    mesh.rotate("app1", "gitea")
    mesh.write()
    report = watcher.next_report()
    if outcomes(report) == {"gitea_app1_x": "waiting"}:
        report = watcher.next_report()  # it polled between the secret's and the manifest's write
    assert outcomes(report) == {"gitea_app1_x": "updated"}
    assert mesh.can_login("gitea_app1_x", mesh.password("app1", "gitea"), "gitea")
    assert not mesh.can_login("gitea_app1_x", old, "gitea")
    assert watcher.close() < 2.0


def test_watch_reports_a_broken_manifest_and_carries_on(started: tuple[Mesh, Watcher]) -> None:
    mesh, watcher = started
    watcher.next_report()
    before = mesh.authid()
    mesh.manifest.write_text('{"version": 1, "consum')
    error = watcher.errors.get(timeout=10)
    assert "not valid JSON" in str(error)
    time.sleep(0.2)
    assert watcher.errors.empty()  # a broken manifest is reported once, not every poll
    assert mesh.authid() == before
    mesh.write()
    assert outcomes(watcher.next_report()) == {"gitea_app1_x": "unchanged"}


def test_watch_corrects_drift_on_schedule(mesh: Mesh) -> None:
    mesh.add("app1", "gitea")
    mesh.write()
    watcher = Watcher(mesh, drift_every=0.3)
    try:
        assert outcomes(watcher.next_report()) == {"gitea_app1_x": "created"}
        with mesh.admin_conn() as conn:
            conn.execute("ALTER ROLE gitea_app1_x PASSWORD 'typed-by-hand'")
        deadline = time.monotonic() + 10
        seen = []
        while time.monotonic() < deadline:
            seen.append(outcomes(watcher.next_report())["gitea_app1_x"])
            if seen[-1] == "updated":
                break
        assert seen[-1] == "updated"
        assert mesh.can_login("gitea_app1_x", mesh.password("app1", "gitea"))
        assert not mesh.can_login("gitea_app1_x", "typed-by-hand")
    finally:
        watcher.close()


def test_watch_stops_promptly_on_the_event(mesh: Mesh) -> None:
    mesh.add("app1", "gitea")
    mesh.write()
    stop = threading.Event()
    stop.set()
    reports: list[Report] = []
    started = time.monotonic()
    watch(
        mesh.manifest,
        mesh.admin,
        interval=60,
        drift_every=60,
        stop=stop,
        on_report=reports.append,
    )
    assert time.monotonic() - started < 1
    assert reports == []  # already stopped: did not even start a run


def test_watch_retries_an_unreachable_server_and_complains_once(mesh: Mesh) -> None:
    good = mesh.admin.read_text()
    mesh.admin.write_text(f"host=127.0.0.1 port={free_port()} user=postgres")
    mesh.add("app1", "gitea")
    mesh.write()
    watcher = Watcher(mesh)
    try:
        error = watcher.errors.get(timeout=10)
        assert "cannot reach PostgreSQL" in str(error)
        time.sleep(0.3)  # several polls, each retrying
        assert watcher.errors.empty() and watcher.reports.empty()
        mesh.admin.write_text(good)  # the server is back
        assert outcomes(watcher.next_report()) == {"gitea_app1_x": "created"}
    finally:
        watcher.close()
