"""Push and all-or-nothing rotation with real agents (uvicorn processes on Unix sockets) and a
real PostgreSQL through the built-in provisioner."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psycopg
import pytest

from meshtui.errors import NotResolvedError

GITEA = "database:app1/gitea->db1/postgres"
WIKI = "database:app1/wiki->db1/postgres"
OTHER = "database:app2/grafana->db1/postgres"


def can_login(pg, login: str, password: str, dbname: str) -> bool | str:
    """An independent TCP login (not the project's probe code): True, or the refusal text."""
    try:
        with psycopg.connect(
            host="127.0.0.1",
            port=pg.port,
            user=login,
            password=password,
            dbname=dbname,
            connect_timeout=5,
            require_auth="scram-sha-256",
        ):
            return True
    except psycopg.OperationalError as exc:
        return str(exc)


def refused(result: bool | str) -> bool:
    return isinstance(result, str) and "password authentication failed" in result


@pytest.fixture
def mesh(mesh_with_agents, pg, pg_clean, pg_admin_file):
    m = mesh_with_agents(
        consumers={"app1": ["gitea", "wiki"], "app2": ["grafana"]},
        port=pg.port,
        admin=pg_admin_file,
    )
    with m.controller() as ctl:
        report = ctl.push()
    assert report.ok, report.behind
    return m


def login_of(mesh, pid: str) -> str:
    with mesh.controller() as ctl:
        (row,) = ctl.status([pid])
    return row.login


def test_push_then_credential_file_logs_in_over_tcp(mesh, pg):
    for pid, rel, db in (
        (GITEA, "srv/app1/gitea/db.password", "gitea_app1"),
        (OTHER, "srv/app2/grafana/db.password", "grafana_app2"),
    ):
        assert can_login(pg, login_of(mesh, pid), mesh.secret(rel), db) is True
    assert oct((mesh.root / "srv/app1/gitea/db.password").stat().st_mode & 0o777) == "0o600"


def test_push_twice_changes_nothing(mesh):
    manifest = mesh.root / "srv/db1/postgres/mesh.json"
    before = (manifest.read_bytes(), manifest.stat().st_mtime_ns)
    result = mesh.cli("push")
    assert result.returncode == 0, result.stderr
    assert "every end already holds its generation" in result.stdout
    assert (manifest.read_bytes(), manifest.stat().st_mtime_ns) == before


def test_rotate_one_pair_new_works_old_refused_others_untouched(mesh, pg):
    old = mesh.secret("srv/app1/gitea/db.password")
    wiki = mesh.secret("srv/app1/wiki/db.password")
    result = mesh.cli("rotate", "--yes", GITEA)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "done" in result.stdout and "window" in result.stdout
    new = mesh.secret("srv/app1/gitea/db.password")
    assert new != old
    login = login_of(mesh, GITEA)
    assert can_login(pg, login, new, "gitea_app1") is True
    assert refused(can_login(pg, login, old, "gitea_app1"))
    assert mesh.secret("srv/app1/wiki/db.password") == wiki
    assert can_login(pg, login_of(mesh, WIKI), wiki, "wiki_app1") is True
    with mesh.controller() as ctl:
        rows = {r.pair: r for r in ctl.status()}
        assert (
            rows[GITEA].generation,
            rows[GITEA].consumer_generation,
            rows[GITEA].provider_generation,
        ) == (2, 2, 2)
        assert rows[WIKI].generation == 1
        # the old generation's sealed blobs are discarded once the rotation is final
        g1 = ctl.inventory.generation(GITEA, 1)
        assert (
            g1["consumer_sealed"] is None and g1["provider_sealed"] is None and g1["discarded_at"]
        )


def test_rotate_with_an_agent_stopped_changes_nothing_and_names_the_node(mesh, pg):
    old = mesh.secret("srv/app1/gitea/db.password")
    grant = (mesh.root / "srv/db1/postgres/grants/app1.gitea.secret").read_bytes()
    mesh.stop("app1")
    with mesh.controller() as ctl:
        gens_before = ctl.inventory.minted()
    result = mesh.cli("rotate", "--yes", GITEA)
    assert result.returncode == 1
    assert "app1" in result.stderr and "nothing was minted or sent" in result.stderr
    assert mesh.secret("srv/app1/gitea/db.password") == old
    assert (mesh.root / "srv/db1/postgres/grants/app1.gitea.secret").read_bytes() == grant
    assert can_login(pg, login_of(mesh, GITEA), old, "gitea_app1") is True
    with mesh.controller() as ctl:
        assert ctl.inventory.minted() == gens_before
        with pytest.raises(NotResolvedError):
            ctl.rotate([GITEA])


def test_consumer_agent_killed_between_provider_and_consumer_rolls_back(mesh, pg):
    old = mesh.secret("srv/app1/gitea/db.password")
    login = login_of(mesh, GITEA)
    with mesh.controller() as ctl:
        ctl.faults["after-providers:to"] = lambda: mesh.stop("app1", signal.SIGKILL)
        report = ctl.rotate([GITEA])
        assert report.outcome in ("rolled back", "converging")
        assert "app1" in report.reason
        rows = {r.pair: r for r in ctl.status()}
        assert rows[GITEA].generation == 1
    # the provider was rolled back to the old credential: the consumer's file still works
    assert mesh.secret("srv/app1/gitea/db.password") == old
    assert can_login(pg, login, old, "gitea_app1") is True
    mesh.start("app1")
    result = mesh.cli("push")
    assert result.returncode == 0, result.stdout + result.stderr
    with mesh.controller() as ctl:
        row = {r.pair: r for r in ctl.status()}[GITEA]
        assert (row.consumer_generation, row.provider_generation) == (1, 1)


def test_controller_killed_mid_rotation_is_finished_by_next_command(mesh, pg):
    script = textwrap.dedent(f"""
        import os, signal
        from meshtui.controller.core import Controller
        ctl = Controller.open({str(mesh.state)!r})
        ctl.faults["after-providers:to"] = lambda: os.kill(os.getpid(), signal.SIGKILL)
        ctl.rotate([{GITEA!r}])
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert done.returncode == -signal.SIGKILL
    with mesh.controller() as ctl:
        assert len(ctl.inventory.open_rotations()) == 1
        row = {r.pair: r for r in ctl.status()}[GITEA]
        assert row.state.value == "stale" and "interrupted" in row.reason
    result = mesh.cli("push")
    assert result.returncode == 0, result.stdout + result.stderr
    with mesh.controller() as ctl:
        assert ctl.inventory.open_rotations() == []
        row = {r.pair: r for r in ctl.status()}[GITEA]
        assert row.generation == row.consumer_generation == row.provider_generation
    login = login_of(mesh, GITEA)
    assert can_login(pg, login, mesh.secret("srv/app1/gitea/db.password"), "gitea_app1") is True


def test_controller_killed_right_after_journaling_sent_nothing_and_is_finished(mesh, pg):
    """The journal (state delivering, its generation with it) is one commit on disk before
    anything is sent: a controller killed there leaves both ends untouched and the next
    command finishes the rotation."""
    old = mesh.secret("srv/app1/gitea/db.password")
    grant = (mesh.root / "srv/db1/postgres/grants/app1.gitea.secret").read_bytes()
    script = textwrap.dedent(f"""
        import os, signal
        from meshtui.controller.core import Controller
        ctl = Controller.open({str(mesh.state)!r})
        ctl.faults["after-journal"] = lambda: os.kill(os.getpid(), signal.SIGKILL)
        ctl.rotate([{GITEA!r}])
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert done.returncode == -signal.SIGKILL
    assert mesh.secret("srv/app1/gitea/db.password") == old
    assert (mesh.root / "srv/db1/postgres/grants/app1.gitea.secret").read_bytes() == grant
    with mesh.controller() as ctl:
        (open_rotation,) = ctl.inventory.open_rotations()
        assert open_rotation["state"] == "delivering"
        (item,) = open_rotation["items"]
        assert ctl.inventory.generation(GITEA, item["to"]) is not None  # stored with it
    result = mesh.cli("push")
    assert result.returncode == 0, result.stdout + result.stderr
    with mesh.controller() as ctl:
        assert ctl.inventory.open_rotations() == []
        row = {r.pair: r for r in ctl.status()}[GITEA]
        assert row.generation == row.consumer_generation == row.provider_generation == item["to"]
    new = mesh.secret("srv/app1/gitea/db.password")
    assert new != old
    assert can_login(pg, login_of(mesh, GITEA), new, "gitea_app1") is True
    assert refused(can_login(pg, login_of(mesh, GITEA), old, "gitea_app1"))


def test_two_rotations_never_run_at_once(mesh):
    from meshtui.controller.lock import delivering
    from meshtui.errors import RotationBusyError

    with (
        mesh.controller() as other,
        delivering(other, "test"),
        mesh.controller() as ctl,
        pytest.raises(RotationBusyError),
    ):
        ctl.rotate([GITEA])


def test_plaintext_in_no_agent_log_environment_or_command_line(mesh):
    mesh.cli("rotate", "--yes", GITEA)
    secrets = [mesh.secret("srv/app1/gitea/db.password"), mesh.secret("srv/app1/wiki/db.password")]
    logs = mesh.agent_logs()
    for proc in mesh.procs.values():
        environ = Path(f"/proc/{proc.pid}/environ").read_bytes()
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
        for s in secrets:
            assert s.encode() not in environ and s.encode() not in cmdline
    for s in secrets:
        assert s not in logs
    assert os.environ.get("MESHTUI_SECRET") is None


def test_an_operators_rotation_ends_with_a_probe_of_what_it_rotated(mesh):
    """Right after ``rotate`` the rotated pair reads what a probe found, not "not probed since
    generation N": the CLI says it, and the inventory (what the dashboard shows) holds it."""
    result = mesh.cli("rotate", "--yes", GITEA)
    assert result.returncode == 0, result.stdout + result.stderr
    with mesh.controller(read_only=True) as ctl:
        rows = {r.pair: r for r in ctl.status()}
    assert rows[GITEA].state.value == "working", rows[GITEA].reason
    assert f"now working  {GITEA}  " in result.stdout, result.stdout
    assert rows[WIKI].pair not in result.stdout  # only what it rotated was probed
    with mesh.controller() as ctl:  # the watch's rotations probe on their own schedule
        report = ctl.rotate([WIKI])
    assert report.ok and report.probes == []
