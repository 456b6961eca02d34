"""``meshtui doctor`` on the lab: real PostgreSQL, real namespaces, real agents in them.

A clean mesh exits 0; each thing broken on purpose (a missing credential folder, a reload that
cannot run, a 0644 admin file, a consumer's namespace that cannot reach the provider's port, an
unknown owner or group, a wrong node key) gives a named problem and exit 1, and is put back.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from meshtui.atomic import write_private
from meshtui.controller.agents.client import Agents
from meshtui.controller.core import Controller
from meshtui.host.state import identity
from meshtui.lab import mesh as lab_mesh
from meshtui.lab import netns
from meshtui.protocol import messages
from meshtui.protocol.messages import CheckConsumer, CheckRequest
from tests.fix_lab import running_lab

pytestmark = [pytest.mark.root, pytest.mark.slow]

GITEA = "database:app1/gitea->db1/postgres"
WIKI = "database:app2/wiki->db1/postgres"


@pytest.fixture(scope="module")
def lab() -> Iterator[tuple[Path, lab_mesh.Lab]]:
    with running_lab(
        "meshtui-doctor-", kinds={"redis": False, "seaweedfs": False, "openbao": False}
    ) as found:  # the counts are PostgreSQL's
        yield found


def doctor(state: Path) -> tuple[int, dict[str, Any], float]:
    """``meshtui doctor --json``: exit code, report, wall time of the whole command."""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "meshtui.cli", "--state", str(state), "doctor", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    took = time.monotonic() - started
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout), took


def problems(report: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(p["node"], p["check"], p["subject"]) for p in report["problems"]]


def redeclare(state: Path, text: str) -> None:
    path = state / "lab" / "doctor.toml"
    path.write_text(text)
    with Controller.open(state) as ctl:
        ctl.declare(path)


def test_a_clean_lab_has_no_problems(lab: tuple[Path, lab_mesh.Lab]) -> None:
    state, _ = lab
    code, report, took = doctor(state)
    assert report["problems"] == [] and code == 0
    assert {n["node"] for n in report["nodes"] if n["answered"]} == {"db1", "app1", "app2"}
    assert all(abs(n["skew_s"]) < 2 for n in report["nodes"])
    # 5 consumer folders and their 5 credential files as declared, 1 admin file + its rights,
    # 2 ports (one per consumer node), and each of the 5 consumer ends and the 1 provider
    # allowed by its node's policy
    assert sum(n["passed"] for n in report["nodes"]) == 5 + 5 + 2 + 2 + 5 + 1
    done = subprocess.run(
        [sys.executable, "-m", "meshtui.cli", "--state", str(state), "doctor"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.startswith("0 problems"), done.stdout
    print(f"doctor on the lab: {took:.2f} s wall ({report['elapsed_ms']:.0f} ms in the controller)")


def test_a_missing_credential_folder(lab: tuple[Path, lab_mesh.Lab]) -> None:
    state, _ = lab
    folder = state / "lab" / "srv" / "app1" / "gitea"
    aside = folder.with_name("gitea.aside")
    folder.rename(aside)
    try:
        code, report, _ = doctor(state)
    finally:
        aside.rename(folder)
    assert code == 1
    assert problems(report) == [("app1", "folder", GITEA)]
    (p,) = report["problems"]
    assert f"credential folder {folder} does not exist" in p["problem"]
    # doctor and push agree: push would make it, root-owned; doctor says so and how to choose
    assert "push would create it root:root 0755" in p["problem"]
    assert p["fix"].startswith("install -d -o root -g ") and p["fix"].endswith(str(folder))


def test_a_credential_folder_other_users_can_write(lab: tuple[Path, lab_mesh.Lab]) -> None:
    state, _ = lab
    folder = state / "lab" / "srv" / "app1" / "gitea"
    mode = folder.stat().st_mode & 0o7777
    folder.chmod(0o777)
    try:
        code, report, _ = doctor(state)
    finally:
        folder.chmod(mode)
    assert code == 1
    assert problems(report) == [("app1", "folder", GITEA)]
    assert f"is in a folder other users can write to ({folder}, mode 0777)" in str(
        report["problems"][0]["problem"]
    )


def test_a_reload_that_cannot_run(lab: tuple[Path, lab_mesh.Lab]) -> None:
    state, built = lab
    script = state / "lab" / "reload-gitea.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o644)
    original = built.declaration.read_text()
    gitea_file = f'file = "{state / "lab" / "srv" / "app1" / "gitea" / "db.password"}" }}'
    assert gitea_file in original
    redeclare(
        state,
        original.replace(gitea_file, gitea_file[:-2] + f', reload = ["{script}"] }}'),
    )
    try:
        code, report, _ = doctor(state)
        script.chmod(0o755)
        fixed, after, _ = doctor(state)
    finally:
        redeclare(state, original)
    assert code == 1
    # the lab's policy does not list it: the node would refuse to run it, so it says that alone
    # and does not look at the program (tests/security/test_node_reads.py: when it is listed)
    assert problems(report) == [("app1", "policy", GITEA)]
    assert f'[[reload]] argv = ["{script}"]' in report["problems"][0]["fix"]
    assert fixed == 1 and after["problems"] == report["problems"]


def test_an_admin_file_others_can_read(lab: tuple[Path, lab_mesh.Lab]) -> None:
    state, _ = lab
    admin = state / "lab" / "nodes" / "db1" / "admin.conninfo"
    admin.chmod(0o644)
    try:
        code, report, _ = doctor(state)
    finally:
        admin.chmod(0o600)
    assert code == 1
    assert problems(report) == [("db1", "admin-file", "db1/postgres")]
    assert f"admin file {admin} is 0644; it must be 0600" == report["problems"][0]["problem"]
    assert report["problems"][0]["fix"] == f"chmod 600 {admin}"


def test_a_consumer_namespace_that_cannot_reach_the_port(lab: tuple[Path, lab_mesh.Lab]) -> None:
    """app2's link is down: its agent still answers (Unix socket), but no packet reaches db1."""
    state, built = lab
    ns = built.namespace("app2")
    assert ns is not None
    subprocess.run(["ip", "-n", ns, "link", "set", netns.NODE_IFACE, "down"], check=True)
    try:
        code, report, _ = doctor(state)
    finally:
        subprocess.run(["ip", "-n", ns, "link", "set", netns.NODE_IFACE, "up"], check=True)
    address = built.addresses["db1"]
    assert code == 1
    assert problems(report) == [("app2", "port", f"{address}:5432")]
    (p,) = report["problems"]
    assert "db1/postgres" in p["problem"] and "cannot be reached from this node" in p["problem"]
    assert WIKI in p["problem"]
    deadline = time.monotonic() + 10
    while doctor(state)[0] != 0:  # the link is back: so is the port
        assert time.monotonic() < deadline


def test_an_unknown_owner_and_group_at_the_agent(lab: tuple[Path, lab_mesh.Lab]) -> None:
    """The node's part, over its real socket and a signed check: names no user on the node."""
    state, _ = lab
    item: CheckConsumer = {
        "pair": GITEA,
        "file": str(state / "lab" / "srv" / "app1" / "gitea" / "db.password"),
        "owner": "meshtui-nobody-here",
        "group": "meshtui-nogroup-here",
        "reload": [],
    }
    ask: CheckRequest = {"consumers": [item], "providers": [], "ports": []}
    with Controller.open(state) as ctl:
        keys = ctl.contact("test", ["app1"])
        with Agents(ctl.inventory.nodes(), keys, sequence=ctl.sequence) as agents:
            answer = agents.call("app1", messages.CHECK, ask)
    found = [f for f in answer["findings"] if f["check"] != "policy"]
    assert [(f["check"], f["subject"]) for f in found] == [("owner", GITEA), ("group", GITEA)]
    refused = [f["problem"] for f in answer["findings"] if f["check"] == "policy"]
    assert [p.split(": ")[1] for p in refused] == ["owner", "group"]  # nor does its policy allow
    assert "'meshtui-nobody-here'" in found[0]["problem"]
    assert "is not a user on this node" in found[0]["problem"]
    assert "is not a group on this node" in found[1]["problem"]
    assert answer["passed"] == 1  # the folder


def test_an_unknown_owner_in_the_declaration(lab: tuple[Path, lab_mesh.Lab]) -> None:
    """A requires entry's owner that the node does not know is a named problem."""
    state, built = lab
    original = built.declaration.read_text()
    gitea_file = f'file = "{state / "lab" / "srv" / "app1" / "gitea" / "db.password"}" }}'
    redeclare(state, original.replace(gitea_file, gitea_file[:-2] + ', owner = "nosuchuser" }'))
    try:
        code, report, _ = doctor(state)
    finally:
        redeclare(state, original)
    assert code == 1
    assert ("app1", "owner", GITEA) in problems(report)


def test_a_node_that_answers_with_another_key(lab: tuple[Path, lab_mesh.Lab]) -> None:
    state, built = lab
    other = state / "lab" / "other-app1"
    identity.init("app1", other, state / "controller.pub")
    original = built.declaration.read_text()
    declared = f'keys = "{state / "lab" / "nodes" / "app1" / "node.pub"}"'
    assert declared in original
    redeclare(state, original.replace(declared, f'keys = "{other / "node.pub"}"'))
    try:
        code, report, _ = doctor(state)
    finally:
        redeclare(state, original)
    assert code == 1
    assert problems(report) == [("app1", "key", "app1")]
    (p,) = report["problems"]
    assert "does not answer with the declared key" in p["problem"]
    assert "node.pub" in p["fix"]


def test_an_admin_without_the_rights_the_provisioner_needs(
    lab: tuple[Path, lab_mesh.Lab],
) -> None:
    """A managed-style admin over the private network: named for each right it lacks."""
    state, built = lab
    admin = state / "lab" / "nodes" / "db1" / "admin.conninfo"
    original = admin.read_text()
    password = secrets.token_urlsafe(16)
    with psycopg.connect(original.strip(), autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS doctor_admin")
        conn.execute(
            sql.SQL("CREATE ROLE doctor_admin LOGIN PASSWORD {}").format(sql.Literal(password))
        )
    weak = f"host={built.addresses['db1']} port=5432 user=doctor_admin dbname=postgres"
    write_private(admin, f"{weak} password={password}\n".encode())
    try:
        _, login_only, _ = doctor(state)
        with psycopg.connect(original.strip(), autocommit=True) as conn:
            conn.execute("ALTER ROLE doctor_admin CREATEROLE CREATEDB")
        _, managed, _ = doctor(state)
    finally:
        write_private(admin, original.encode())
        with psycopg.connect(original.strip(), autocommit=True) as conn:
            conn.execute("DROP ROLE doctor_admin")
    said = [p["problem"] for p in login_only["problems"]]
    assert problems(login_only) == [("db1", "admin-rights", "db1/postgres")] * 4, said
    assert "doctor_admin is neither a superuser nor has CREATEROLE" in said[0]
    assert "has no CREATEDB, and consumers ask for databases" in said[1]
    assert "pin = true, but admin role doctor_admin cannot see hba_file" in said[2]
    assert "may not run pg_reload_conf()" in said[3]
    assert all(password not in json.dumps(r) for r in (login_only, managed))
    # CREATEROLE and CREATEDB are enough for the logins; pin still needs the server's files
    said = [p["problem"] for p in managed["problems"]]
    assert len(said) == 2 and "cannot see hba_file" in said[0], said
    assert doctor(state)[0] == 0


def test_read_only_refuses_doctor(lab: tuple[Path, lab_mesh.Lab]) -> None:
    state, _ = lab
    done = subprocess.run(
        [sys.executable, "-m", "meshtui.cli", "--state", str(state), "--read-only", "doctor"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "read-only: doctor would contact app1, app2, db1" in done.stderr


def test_a_credential_file_every_user_can_read(lab: tuple[Path, lab_mesh.Lab]) -> None:
    """A consumer's credential file made 0644 by hand is a problem, named with the fix."""
    state, _ = lab
    cred = state / "lab" / "srv" / "app1" / "gitea" / "db.password"
    assert cred.stat().st_mode & 0o777 == 0o600
    cred.chmod(0o644)
    try:
        code, report, _ = doctor(state)
    finally:
        cred.chmod(0o600)
    assert code == 1
    assert problems(report) == [("app1", "file", GITEA)]
    (p,) = report["problems"]
    assert p["problem"] == (
        f"credential file {cred} is mode 0644, not 0600 "
        "(every user on the node can read or change it)"
    )
    assert p["fix"].startswith("meshtui push writes it again")


def test_a_credential_file_that_holds_another_secret(lab: tuple[Path, lab_mesh.Lab]) -> None:
    state, _ = lab
    cred = state / "lab" / "srv" / "app1" / "gitea" / "db.password"
    kept = cred.read_bytes()
    cred.write_bytes(b"tampered")
    try:
        code, report, _ = doctor(state)
    finally:
        cred.write_bytes(kept)
    assert code == 1 and problems(report) == [("app1", "file", GITEA)]
    assert "holds no credential meshtui delivered" in report["problems"][0]["problem"]
