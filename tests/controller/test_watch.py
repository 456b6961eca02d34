"""``meshtui watch`` in the lab: real agents (uvicorn on Unix sockets), the session's real
PostgreSQL through the built-in provisioner, second-scale policies, a real notify script and
``/metrics`` scraped over loopback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from meshtui.controller import lock
from meshtui.controller.lock import delivering
from meshtui.controller.unattended.metrics import Metrics
from meshtui.controller.unattended.notify import Alert
from meshtui.controller.unattended.watch import Heartbeat, Watch
from tests.controller.test_rotate import can_login, login_of, refused
from tests.fix_pg import free_port

GITEA = "database:app1/gitea->db1/postgres"
WIKI = "database:app1/wiki->db1/postgres"
OTHER = "database:app2/grafana->db1/postgres"
ALL = [GITEA, WIKI, OTHER]
FILES = {GITEA: "srv/app1/gitea/db.password", WIKI: "srv/app1/wiki/db.password",
         OTHER: "srv/app2/grafana/db.password"}  # fmt: skip
DBS = {GITEA: "gitea_app1", WIKI: "wiki_app1", OTHER: "grafana_app2"}


def with_policy(mesh, policy: str) -> None:
    """Add a [policy] table to the mesh's declaration, declare it and push."""
    text = mesh.decl.read_text().split("\n[policy]")[0]
    mesh.decl.write_text(text + "\n[policy]\n" + policy + "\n")
    with mesh.controller() as ctl:
        ctl.declare(mesh.decl)
        assert ctl.push().ok


@pytest.fixture
def mesh(mesh_with_agents, pg, pg_clean, pg_admin_file) -> Iterator:
    m = mesh_with_agents(
        consumers={"app1": ["gitea", "wiki"], "app2": ["grafana"]},
        port=pg.port,
        admin=pg_admin_file,
    )
    with m.controller() as ctl:
        assert ctl.push().ok
    yield m
    lock.WHO = None  # an in-process Watch labels the lock; later tests are operators again


def wait_for(what: str, check: Callable[[], object], timeout: float = 40.0) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def states(mesh) -> dict[str, str]:
    with mesh.controller(read_only=True) as ctl:
        return {r.pair: r.state.value for r in ctl.status()}


def scrape(port: int) -> str:
    resp = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
    assert resp.status_code == 200
    return resp.text


def sample(text: str, name: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


def alerts(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def notify_script(root: Path) -> tuple[list[str], Path]:
    """A real command that appends its stdin (one JSON alert) as a line to a file."""
    out = root / "alerts.jsonl"
    script = root / "notify.sh"
    script.write_text(f'#!/bin/sh\n{{ cat; echo; }} >> "{out}"\n')
    script.chmod(0o755)
    return [str(script)], out


def start_watch(mesh, *extra: str) -> subprocess.Popen[str]:
    log = open(mesh.root / "watch.log", "a")  # noqa: SIM115
    return subprocess.Popen(
        [sys.executable, "-m", "meshtui.cli", "--state", str(mesh.state), "watch",
         "--tick", "0.2", *extra],
        stdout=log, stderr=log, stdin=subprocess.DEVNULL, text=True,
    )  # fmt: skip


def stop_watch(proc: subprocess.Popen[str]) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=60)


def audit_verifies(mesh) -> None:
    result = mesh.cli("audit", "--verify")
    assert result.returncode == 0, result.stdout + result.stderr


# ---------------------------------------------------------------------------- rotation by policy


def test_pairs_past_their_policy_are_rotated_and_still_work(mesh, pg):
    # 10 s, not less: under load a rotation cycle and the status below take seconds, and a
    # shorter policy would make the pairs due again before the test has looked at them
    with_policy(mesh, 'rotate_every = "10s"\nprobe_every = "1s"')
    old = {pid: mesh.secret(FILES[pid]) for pid in ALL}
    metrics = Metrics()
    host, port = metrics.serve("127.0.0.1", 0)
    try:
        with mesh.controller() as ctl:
            since = max(d.since for d in ctl.schedule())
            shift = [since + 1.0 - time.time()]  # the clock seam: first, 1 s after declaring
            watch = Watch(ctl, metrics=metrics, log=print, clock=lambda: time.time() + shift[0])
            first = watch.cycle()
            assert first.rotated == [] and first.probed == 0  # nothing due yet; probes jittered
            shift[0] = 0.0
            time.sleep(max(0.0, max(d.due_at for d in ctl.schedule()) - time.time()) + 0.1)
            report = watch.cycle()
            assert sorted(report.rotated) == sorted(ALL) and report.failed_rotations == []
            rows = {r.pair: r for r in ctl.status()}
            events = ctl.events()
        text = scrape(port)
    finally:
        metrics.close()
    for pid in ALL:
        new = mesh.secret(FILES[pid])
        assert new != old[pid]
        assert (rows[pid].generation, rows[pid].consumer_generation) == (2, 2)
        assert can_login(pg, login_of(mesh, pid), new, DBS[pid]) is True
        assert refused(can_login(pg, login_of(mesh, pid), old[pid], DBS[pid]))
    rotations = [e for e in events if e.kind == "rotate"]
    assert len(rotations) == 1 and rotations[0].outcome == "done"  # one batch per provider
    assert rotations[0].operator == "watch"
    assert {e.operator for e in events if e.kind == "probe"} == {"watch"}
    assert sample(text, 'meshtui_rotations_total{provider="db1/postgres"}') == 3.0
    assert sample(text, "meshtui_pairs_overdue") == 0.0
    assert 5.0 < sample(text, "meshtui_next_rotation_due_seconds") <= 10.3
    assert sample(text, "meshtui_oldest_credential_age_seconds") < 5.0
    assert sample(text, "meshtui_last_successful_cycle_timestamp_seconds") > time.time() - 60
    assert sample(text, "meshtui_probe_latency_seconds_count") == 3.0
    status = mesh.cli("status", "--due", "--json")
    assert status.returncode == 0
    assert {d["pair"]: d["due"] for d in json.loads(status.stdout)} == dict.fromkeys(ALL, False)
    audit_verifies(mesh)


def test_due_rotations_are_spread_and_rotate_due_rotates_only_those(mesh):
    from meshtui.controller.read.schedule import schedule

    with_policy(mesh, 'rotate_every = "5s"\nprobe_every = "1s"')
    with mesh.controller(read_only=True) as ctl:  # a fast machine may be here within 5 s
        first_due = max(d.due_at for d in schedule(ctl.inventory) if d.due_at is not None)
    time.sleep(max(0.0, first_due - time.time()) + 0.1)
    old = mesh.cli("status", "--due", "--json")
    assert all(d["due"] for d in json.loads(old.stdout))
    assert mesh.cli("rotate", "--all", "--yes").returncode == 0
    with mesh.controller(read_only=True) as ctl:
        plan = {d.pair: d for d in schedule(ctl.inventory)}
    waits = {pid: d.due_at - d.since for pid, d in plan.items()}
    assert all(5 <= w < 5 * 1.1 for w in waits.values()), waits
    assert len(set(waits.values())) == 3  # each pair has its own place in the spread window
    assert "no pair is due" in mesh.cli("rotate", "--due", "--yes").stdout
    time.sleep(max(0.0, max(d.due_at for d in plan.values()) - time.time()) + 0.1)
    result = mesh.cli("rotate", "--due", "--yes")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    rotated = [line.split()[1] for line in lines if not line.startswith("now ")]
    assert sorted(rotated) == sorted(ALL)
    assert sorted(line.split()[2] for line in lines if line.startswith("now ")) == sorted(ALL)


def test_watch_waits_for_an_operators_lock_and_says_so(mesh):
    with_policy(mesh, 'rotate_every = "1h"')
    lines: list[str] = []
    with mesh.controller() as other, mesh.controller() as ctl, delivering(other, "rotate"):
        report = Watch(ctl, clock=lambda: time.time() + 7200, log=lines.append).cycle()
        assert report.rotated == [] and report.waited_for and "rotate" in report.waited_for
    assert any("waiting to rotate" in line and f"pid {os.getpid()}" in line for line in lines)
    assert {r for r in states(mesh).values()} <= {"working", "unknown"}
    # and an operator who finds the watch holding the lock is told it is the watch
    lock.WHO = "watch"
    with mesh.controller() as other, delivering(other, "rotate"):
        result = mesh.cli("rotate", "--yes", GITEA)
    assert result.returncode == 1 and "watch rotate" in result.stderr


# ---------------------------------------------------------------------------- nodes that go away


def test_a_pair_stale_only_because_its_server_was_down_is_not_pushed_every_cycle(mesh, pg):
    """A probe that could not decide (the server is down) leaves nothing to deliver: the watch
    waits for its next probe instead of pushing, and writing a push to the audit log, on every
    cycle."""
    with mesh.controller() as ctl:
        assert ctl.push().ok
    pg.stop()
    try:
        with mesh.controller() as ctl:
            ctl.probe()
            assert {r.state for r in ctl.status()} == {"stale"}
            before = len(ctl.inventory.events())
            report = Watch(ctl, log=print).cycle()
            assert not report.pushed
            pushes = [e for e in ctl.inventory.events()[before:] if e["kind"] == "push"]
            assert pushes == []
    finally:
        pg.start()


def test_a_file_the_watch_writes_again_is_an_alert_not_a_silent_repair(mesh):
    """A consumer's credential file opened to others is put right by the watch's push, and
    said: an alert "repaired" names the pair and what was found, rather than a pair that reads
    working again with nobody told the password was world-readable."""
    with mesh.controller() as ctl:
        assert ctl.push().ok
    path = mesh.root / FILES[GITEA]
    path.chmod(0o644)
    got: list[Alert] = []
    with mesh.controller() as ctl:
        ctl.probe()  # the node says the file is not as written: the pair is stale
        Watch(ctl, notify=got.append, log=print).cycle()
    repaired = [a for a in got if a.event == "repaired"]
    assert [a.pair for a in repaired] == [GITEA], got
    assert "0644" in repaired[0].reason, repaired[0]
    assert not [a for a in got if a.event == "state" and a.pair == GITEA], got
    assert path.stat().st_mode & 0o777 == 0o600


def test_a_login_changed_by_hand_is_found_by_a_watch_whose_pairs_all_work(mesh, pg):
    """With every pair working the watch has nothing to deliver, yet it still pushes every
    ``drift_every`` to read what the servers hold: a password a DBA set by hand is re-applied
    and said (an alert "repaired"), not left standing until something else moves."""
    import psycopg

    with mesh.controller() as ctl:
        assert ctl.push().ok
        ctl.probe()
        login = {r.pair: r for r in ctl.status()}[GITEA].login
    with psycopg.connect(pg.admin_conninfo(), autocommit=True) as conn:
        conn.execute(f"ALTER ROLE {login} PASSWORD 'typed-by-a-dba'")
    got: list[Alert] = []
    with mesh.controller() as ctl:
        watch = Watch(ctl, notify=got.append, log=print, drift_every=300.0)
        watch.cycle()  # every pair reads working: nothing pushed yet
        assert not [a for a in got if a.event == "repaired"], got
        watch.looked_at -= 300.0  # as if five minutes passed since the last look
        watch.cycle()
    repaired = [a for a in got if a.event == "repaired"]
    assert [a.pair for a in repaired] == [GITEA], got
    assert "changed outside meshtui" in repaired[0].reason, repaired[0]


def test_the_first_scrape_names_every_node(mesh):
    """A node holding only providers is never probed from: it is asked, so the first cycle's
    metrics say whether every node is up (db1 was missing until a push happened to run)."""
    mesh.stop("app2", signal.SIGKILL)
    metrics = Metrics()
    host, port = metrics.serve("127.0.0.1", 0)
    try:
        with mesh.controller() as ctl:
            first = Watch(ctl, metrics=metrics, log=print).cycle()  # nothing to push or probe
            assert not first.pushed and first.probed == 0
        text = scrape(port)
        assert sample(text, 'meshtui_node_up{node="db1"}') == 1.0
        assert sample(text, 'meshtui_node_up{node="app1"}') == 1.0
        assert sample(text, 'meshtui_node_up{node="app2"}') == 0.0
    finally:
        metrics.close()
        mesh.start("app2")


def test_the_very_first_scrape_of_a_starting_watch_is_complete(mesh):
    """Scraped as soon as ``watch --metrics`` answers at all, the metrics name every node and
    every pair's state: a scrape that finds the port before anything was measured must not be
    an empty page a monitor reads as nothing wrong."""
    port = free_port()
    proc = start_watch(mesh, "--metrics", f"127.0.0.1:{port}")
    try:
        deadline = time.monotonic() + 60
        first = None
        while first is None and time.monotonic() < deadline and proc.poll() is None:
            first = _try_scrape(port)
            if first is None:
                time.sleep(0.005)
        assert first is not None, "the watch never served its metrics"
        for node in ("db1", "app1", "app2"):
            assert sample(first, f'meshtui_node_up{{node="{node}"}}') == 1.0, first
        states_counted = [
            sample(first, f'meshtui_pairs{{state="{s}"}}') for s in ("working", "unknown")
        ]
        assert sum(v or 0.0 for v in states_counted) == 3.0, first
    finally:
        assert stop_watch(proc) == 0


def test_consumer_agent_killed_makes_pairs_unknown_and_alerts_then_back(mesh):
    with_policy(mesh, 'probe_every = "1s"')
    argv, out = notify_script(mesh.root)
    port = free_port()
    proc = start_watch(mesh, "--metrics", f"127.0.0.1:{port}", "--notify", *argv)
    try:
        wait_for("every pair working", lambda: set(states(mesh).values()) == {"working"})
        text = wait_for("metrics", lambda: _try_scrape(port))
        assert sample(text, 'meshtui_pairs{state="working"}') == 3.0
        mesh.stop("app2", signal.SIGKILL)
        wait_for("grafana unknown", lambda: states(mesh)[OTHER] == "unknown")
        down = wait_for(
            "an alert working -> unknown",
            lambda: [a for a in alerts(out) if a["pair"] == OTHER and a["to"] == "unknown"],
        )
        assert set(down[0]) == {"event", "pair", "from", "to", "reason", "time"}
        assert down[0]["from"] == "working" and "app2" in down[0]["reason"]
        text = scrape_until(port, 'meshtui_node_up{node="app2"} 0.0')
        assert sample(text, 'meshtui_pairs{state="unknown"}') == 1.0
        assert sample(text, 'meshtui_node_up{node="app1"}') == 1.0
        assert states(mesh)[GITEA] == "working"  # the others are untouched
        mesh.start("app2")
        wait_for("grafana working again", lambda: states(mesh)[OTHER] == "working")
        wait_for(
            "an alert unknown -> working",
            lambda: [a for a in alerts(out) if a["pair"] == OTHER and a["to"] == "working"],
        )
        text = scrape_until(port, 'meshtui_node_up{node="app2"} 1.0')
        assert sample(text, 'meshtui_pairs{state="working"}') == 3.0
        assert sample(text, "meshtui_probe_latency_seconds_count") >= 3
    finally:
        code = stop_watch(proc)
    assert code == 0, (mesh.root / "watch.log").read_text()
    secrets = [mesh.secret(FILES[pid]) for pid in ALL]
    logged = out.read_text() + (mesh.root / "watch.log").read_text()
    assert not any(s in logged for s in secrets)
    beat = Heartbeat.read(mesh.state)
    assert beat is not None and not beat.running() and beat.cycles > 3
    audit_verifies(mesh)


def scrape_until(port: int, line: str) -> str:
    """Scrape until the page has ``line``; the page."""

    def check() -> str | None:
        text = _try_scrape(port)
        return text if text is not None and line in text.splitlines() else None

    return str(wait_for(line, check))


def _try_scrape(port: int) -> str | None:
    try:
        return scrape(port)
    except httpx.HTTPError:
        return None


def test_provider_agent_killed_due_rotations_fail_old_credential_works_overdue(mesh, pg):
    with_policy(mesh, 'rotate_every = "4s"\nprobe_every = "1s"')
    argv, out = notify_script(mesh.root)
    port = free_port()
    old = {pid: mesh.secret(FILES[pid]) for pid in ALL}
    mesh.stop("db1", signal.SIGKILL)
    proc = start_watch(mesh, "--metrics", f"127.0.0.1:{port}", "--notify", *argv)
    try:
        failed = wait_for(
            "rotation-failed alerts",
            lambda: [a for a in alerts(out) if a["event"] == "rotation-failed"],
        )
        assert "db1" in failed[0]["reason"] and "old credential kept" in failed[0]["reason"]
        wait_for(
            "overdue alerts for every pair",
            lambda: {a["pair"] for a in alerts(out) if a["event"] == "overdue"} == set(ALL),
        )
        for pid in ALL:  # still on the old, still-working credential
            assert mesh.secret(FILES[pid]) == old[pid]
            assert can_login(pg, login_of(mesh, pid), old[pid], DBS[pid]) is True
        wait_for("probed working", lambda: set(states(mesh).values()) == {"working"})
        due = mesh.cli("status", "--due")
        assert due.returncode == 1 and due.stdout.count("OVERDUE") == 3
        text = scrape_until(port, "meshtui_pairs_overdue 3.0")
        assert sample(text, 'meshtui_node_up{node="db1"}') == 0.0
        assert sample(text, 'meshtui_failures_total{step="rotate"}') >= 1
        assert sample(text, "meshtui_next_rotation_due_seconds") < 0
        # the node comes back: the next try (after backoff) rotates them all
        mesh.start("db1")
        wait_for(
            "rotated after db1 returned",
            lambda: all(mesh.secret(FILES[pid]) != old[pid] for pid in ALL),
        )
        wait_for("working on the new credential", lambda: set(states(mesh).values()) == {"working"})
    finally:
        code = stop_watch(proc)
    assert code == 0, (mesh.root / "watch.log").read_text()
    for pid in ALL:
        assert can_login(pg, login_of(mesh, pid), mesh.secret(FILES[pid]), DBS[pid]) is True
    with mesh.controller(read_only=True) as ctl:
        refused_rotations = [
            e for e in ctl.events() if e.kind == "rotate" and e.outcome == "not resolved"
        ]
    assert refused_rotations and all(e.operator == "watch" for e in refused_rotations)
    audit_verifies(mesh)


# ---------------------------------------------------------------------------- stopping mid-rotation

DRIVER = """
import os, signal, sys, time
from meshtui.controller.core import Controller
from meshtui.controller.unattended.watch import Watch
ctl = Controller.open({state!r})
watch = Watch(ctl, clock=lambda: time.time() + 7200, tick=0.2)
for sig in (signal.SIGTERM, signal.SIGINT):
    signal.signal(sig, lambda *_: watch.stop.set())
ctl.faults["after-providers:to"] = lambda: os.kill(os.getpid(), signal.{sig})
sys.exit(watch.run())
"""


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT", "SIGKILL"])
def test_signal_mid_rotation_leaves_all_new_or_all_old(mesh, pg, sig):
    with_policy(mesh, 'rotate_every = "1h"')
    old = {pid: mesh.secret(FILES[pid]) for pid in ALL}
    script = textwrap.dedent(DRIVER.format(state=str(mesh.state), sig=sig))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    if sig == "SIGKILL":
        assert done.returncode == -signal.SIGKILL
        with mesh.controller() as ctl:
            assert len(ctl.inventory.open_rotations()) == 1
            Watch(ctl, log=print).cycle()  # the next start finishes it
    else:
        assert done.returncode == 0, done.stderr.decode()
        assert b"stopped after 1 cycles" in done.stderr
    with mesh.controller(read_only=True) as ctl:
        assert ctl.inventory.open_rotations() == []
        rows = {r.pair: r for r in ctl.status()}
    generations = {rows[pid].generation for pid in ALL}
    assert len(generations) == 1  # all-new or all-old, never a mix
    for pid in ALL:
        r = rows[pid]
        assert r.generation == r.consumer_generation == r.provider_generation
        now = mesh.secret(FILES[pid])
        assert (now != old[pid]) == (r.generation == 2)
        assert can_login(pg, login_of(mesh, pid), now, DBS[pid]) is True
    if sig != "SIGKILL":
        assert generations == {2}  # the step in progress was finished, not abandoned
    audit_verifies(mesh)


def test_notify_failure_and_timeout_are_logged_and_never_stop_anything(tmp_path):
    from meshtui.controller.unattended.notify import Notifier

    lines: list[str] = []
    alert = Alert("state", GITEA, "working", "stale", "probe refused", "now")
    slow = Notifier(["/bin/sleep", "5"], lines.append, timeout=0.3)
    bad = Notifier(["/bin/sh", "-c", "echo nope >&2; exit 3"], lines.append)
    missing = Notifier([str(tmp_path / "absent")], lines.append)
    for n in (slow, bad, missing):
        n(alert)
        n.close()
    assert any("did not finish in 0.3 s" in line for line in lines)
    assert any("exited 3: nope" in line for line in lines)
    assert any("cannot run" in line for line in lines)
    assert json.loads(alert.to_json())["from"] == "working"


# ---------------------------------------------------------------------------- one alert per event


def test_a_routine_rotation_is_no_alert_and_a_failed_reload_is_one(mesh):
    """A routine rotation sends no alert (not working -> unknown "not probed since generation
    N", then back); a rotation whose reload failed is one alert, not none."""
    with_policy(mesh, 'rotate_every = "6s"\nprobe_every = "1s"')
    script = mesh.root / "reload.sh"
    script.write_text("#!/bin/sh\necho 'gitea.service not found' >&2\nexit 1\n")
    script.chmod(0o755)
    mesh.allow("app1", reload=((str(script),),))
    got: list[Alert] = []
    with mesh.controller() as ctl:
        assert {p.verdict for p in ctl.probe(ALL)} == {"accepted"}  # every pair working
        watch = Watch(ctl, notify=got.append, log=lambda _l: None)
        watch.cycle()
        time.sleep(max(0.0, max(d.due_at for d in ctl.schedule()) - time.time()) + 0.1)
        report = watch.cycle()
        assert sorted(report.rotated) == sorted(ALL)
        for _ in range(20):  # the probes of the new generation
            watch.cycle()
            if {r.state.value for r in ctl.status()} == {"working"}:
                break
            time.sleep(0.2)
        assert {r.state.value for r in ctl.status()} == {"working"}
        assert got == [], got  # routine: nothing to hear about
        text = mesh.decl.read_text().replace(
            'file = "srv/app1/gitea/db.password" }',
            f'file = "srv/app1/gitea/db.password", reload = ["{script}"] }}',
        )
        mesh.decl.write_text(text)
        ctl.declare(mesh.decl)
        time.sleep(max(0.0, max(d.due_at for d in ctl.schedule()) - time.time()) + 0.1)
        for _ in range(3):
            watch.cycle()
        about_gitea = [a for a in got if a.pair == GITEA]
        assert len(about_gitea) == 1, about_gitea
        assert "reload failed" in about_gitea[0].reason
        assert "gitea.service not found" in about_gitea[0].reason
