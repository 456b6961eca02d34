"""The lab end to end, as root with namespaces: probes, a drill, a withdrawal that bites, a
server that is down, and a server that trusts everything. Every login crosses the private
network from the consumer's own namespace."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import psycopg
import pytest

from meshtui.controller.core import Controller
from meshtui.kinds.postgres import lab as postgres
from meshtui.lab import mesh as lab_mesh
from tests.fix_lab import cli, running_lab

pytestmark = [pytest.mark.root, pytest.mark.slow]

GITEA = "database:app1/gitea->db1/postgres"
KEYCLOAK = "database:app1/keycloak->db1/postgres"
WIKI = "database:app2/wiki->db1/postgres"


@pytest.fixture(scope="module")
def lab():
    with running_lab("meshtui-lab-") as found:
        yield found


def statuses(state: Path) -> dict:
    with Controller.open(state, read_only=True) as ctl:
        return {r.pair: r for r in ctl.status()}


def psql_login(
    built, node: str, login: str, dbname: str, password: str
) -> subprocess.CompletedProcess[str]:
    """An independent login with Debian's psql from ``node``'s namespace (not our probe code)."""
    with tempfile.NamedTemporaryFile("w", delete=False, dir="/tmp") as fh:
        fh.write(f"{built.addresses['db1']}:5432:{dbname}:{login}:{password}\n")
    os.chmod(fh.name, 0o600)
    try:
        return subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                built.namespace(node),
                "psql",
                "-X",
                "-w",
                "-At",
                "-c",
                "SELECT current_user || ' ' || host(inet_client_addr())",
                f"host={built.addresses['db1']} port=5432 user={login} dbname={dbname}",
            ],
            capture_output=True,
            text=True,
            timeout=30,
            env={"PGPASSFILE": fh.name, "PATH": "/usr/bin:/bin"},
        )
    finally:
        os.unlink(fh.name)


def admin(built) -> psycopg.Connection:
    return psycopg.connect(postgres.open_cluster(built.datadir).admin_conninfo(), autocommit=True)


def test_lab_up_twice_is_safe_and_writes_the_declaration(lab):
    state, built = lab
    again = lab_mesh.up(state)
    assert again.pids == built.pids
    assert (state / "lab" / "mesh.toml").exists()
    assert set(built.addresses) == {"db1", "app1", "app2"}
    info = lab_mesh.status(state)
    assert info["postgres"] and all(a["answers"] for a in info["agents"].values())
    # no default route in any node's namespace: nothing can leave the private network
    for node in built.addresses:
        routes = subprocess.run(
            ["ip", "-n", built.namespace(node), "route", "show", "default"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert routes.strip() == ""


def test_probe_all_working_from_the_consumers_namespace(lab):
    state, built = lab
    result = cli(state, "probe", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    outcomes = json.loads(result.stdout)
    assert {o["verdict"] for o in outcomes} == {"accepted"}
    assert not any(o["loopback"] for o in outcomes)
    rows = statuses(state)
    assert {r.state.value for r in rows.values()} == {"working"}
    assert f"from {built.addresses['app1']}" in rows[GITEA].reason
    assert f"from {built.addresses['app2']}" in rows[WIKI].reason


def test_independent_psql_login_and_a_drill(lab):
    state, built = lab
    login = statuses(state)[GITEA].login
    cred = built.folder / "srv/app1/gitea/db.password"
    old = cred.read_text()
    ok = psql_login(built, "app1", login, "gitea", old)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.split() == [login, built.addresses["app1"]]
    result = cli(state, "drill", "--json", GITEA)
    assert result.returncode == 0, result.stdout + result.stderr
    (report,) = json.loads(result.stdout)
    assert report["ok"]
    assert [(s["name"], s["verdict"]) for s in report["steps"]] == [
        ("old before", "accepted"),
        ("new after", "accepted"),
        ("old after", "refused"),
    ]
    assert report["window_ms"] is not None and report["window_ms"] >= 0
    new = cred.read_text()
    assert new != old
    assert psql_login(built, "app1", login, "gitea", new).returncode == 0
    refused = psql_login(built, "app1", login, "gitea", old)
    assert refused.returncode != 0 and "password authentication failed" in refused.stderr
    assert statuses(state)[GITEA].state.value == "working"


def test_withdraw_a_module_revokes_it_kills_its_session_and_keeps_its_data(lab):
    state, built = lab
    login = statuses(state)[KEYCLOAK].login
    password = (built.folder / "srv/app1/keycloak/db.password").read_text()
    # the consumer makes data and keeps a session open, from its own namespace
    holder = subprocess.Popen(
        [
            "ip",
            "netns",
            "exec",
            built.namespace("app1"),
            sys.executable,
            "-c",
            textwrap.dedent(f"""
            import sys, time, psycopg
            pw = sys.stdin.readline().strip()
            c = psycopg.connect(host={built.addresses["db1"]!r}, port=5432, user={login!r},
                                password=pw, dbname="keycloak", autocommit=True)
            c.execute("CREATE TABLE IF NOT EXISTS realm (name text)")
            c.execute("INSERT INTO realm VALUES ('master')")
            print("ready", flush=True)
            time.sleep(120)
        """),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        holder.stdin.write(password + "\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "ready"
        with admin(built) as conn:
            assert (
                conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE usename = %s", [login]
                ).fetchone()[0]
                == 1
            )
        decl = built.declaration.read_text()
        start = decl.index('[modules."app1/keycloak"]')
        end = decl.index("[modules.", start + 5)
        trimmed = state / "mesh-without-keycloak.toml"
        trimmed.write_text(decl[:start] + decl[end:])
        assert cli(state, "declare", str(trimmed)).returncode == 0
        result = cli(state, "push")
        assert result.returncode == 0, result.stdout + result.stderr
        assert "revoked" in result.stdout
        row = statuses(state)[KEYCLOAK]
        assert row.withdrawn and row.state.value == "revoked", row.reason
        assert not (built.folder / "srv/app1/keycloak/db.password").exists()
        with admin(built) as conn:
            assert (
                conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE usename = %s", [login]
                ).fetchone()[0]
                == 0
            )
            assert (
                conn.execute(
                    "SELECT count(*) FROM pg_roles WHERE rolname = %s", [login]
                ).fetchone()[0]
                == 0
            )
        with psycopg.connect(
            postgres.open_cluster(built.datadir).admin_conninfo().replace("dbname=postgres", "")
            + " dbname=keycloak"
        ) as conn:
            assert conn.execute("SELECT name FROM realm").fetchall() == [("master",)]
        refused = psql_login(built, "app1", login, "keycloak", password)
        assert "password authentication failed" in refused.stderr
    finally:
        holder.kill()
        holder.wait()
        assert cli(state, "declare", str(built.declaration)).returncode == 0
        assert cli(state, "push").returncode == 0


def test_postgres_down_probes_unknown_never_revoked(lab):
    state, built = lab
    cluster = postgres.open_cluster(built.datadir)
    cluster.stop()
    try:
        result = cli(state, "probe", "--json")
        assert result.returncode == 1
        # PostgreSQL's pairs (the lab's Redis, still up, is not concerned)
        outcomes = [o for o in json.loads(result.stdout) if o["pair"].startswith("database:")]
        assert {o["verdict"] for o in outcomes} == {"unknown"}
        rows = {p: r for p, r in statuses(state).items() if p.startswith("database:")}
        assert all(r.state.value == "stale" for r in rows.values() if not r.withdrawn)
        assert not any(r.state.value == "revoked" for r in rows.values())
    finally:
        cluster.start(netns=built.namespace("db1"))
    assert cli(state, "probe").returncode == 0


def test_a_provider_that_trusts_everything_is_never_working(lab):
    state, built = lab
    cluster = postgres.open_cluster(built.datadir)
    hba = (built.datadir / "pg_hba.conf").read_text().splitlines()
    cluster.set_hba(
        [f"host all all {lab_mesh.SUBNET} trust"]
        + [line for line in hba if line.startswith("local")]
    )
    try:
        result = cli(state, "probe", "--json", GITEA)
        (outcome,) = json.loads(result.stdout)
        assert outcome["verdict"] == "no password demanded"
        row = statuses(state)[GITEA]
        assert row.state.value == "stale" and row.alarm
        status = cli(state, "status")
        assert status.returncode == 1
    finally:
        cluster.set_hba([line for line in hba if line.strip() and not line.startswith("#")])
    assert cli(state, "probe").returncode == 0


def test_loopback_lab_with_a_pluggable_provisioner(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("the lab's PostgreSQL user needs root here")
    state = Path(tempfile.mkdtemp(prefix="meshtui-lbk-"))
    state.chmod(0o711)
    command = f"{sys.executable} -m meshtui.cli provision --json --admin {{admin}} --manifest"
    try:
        built = lab_mesh.up(state, loopback=True, mesh={"app1": ["gitea"]}, provisioner=command)
        assert built.mode == "loopback"
        assert "provisioner = [" in built.declaration.read_text()
        assert cli(state, "declare", str(built.declaration)).returncode == 0
        pushed = cli(state, "push")
        assert pushed.returncode == 0, pushed.stdout + pushed.stderr
        result = cli(state, "probe", "--json")
        (outcome,) = json.loads(result.stdout)
        assert outcome["verdict"] == "accepted" and outcome["loopback"] is True
        assert "loopback" in outcome["reason"]
        assert "over loopback" in statuses(state)[GITEA].reason
    finally:
        lab_mesh.down(state, purge=True)
        shutil.rmtree(state, ignore_errors=True)


def test_lab_down_leaves_no_process_namespace_or_server(lab):
    """Runs last in this module: the fixture's own teardown then finds nothing to do."""
    state, built = lab
    pids = dict(built.pids)
    heard: list[str] = []
    done = lab_mesh.down(state, waiting=heard.append)
    assert any("stopped PostgreSQL" in line for line in done)
    for line in done:  # each server stopped was announced before its stop, with what it waits for
        if line.startswith("stopped ") and not line.startswith("stopped agent"):
            assert any(h.startswith(f"stopping {line.removeprefix('stopped ')}") for h in heard)
    assert "stopping the agents ..." in heard
    if any("SeaweedFS" in line for line in done):
        assert any("15 s" in h for h in heard if h.startswith("stopping SeaweedFS")), heard
    for node, pid in pids.items():
        assert not Path(f"/proc/{pid}").exists(), f"agent {node} still runs"
    left = subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True, check=True
    ).stdout
    assert f"{built.network}-" not in left
    assert not postgres.open_cluster(built.datadir).running()
    assert not any(built.socket(n).exists() for n in pids)
    assert lab_mesh.status(state) == {"up": False}
    assert lab_mesh.down(state) == []  # twice is safe
