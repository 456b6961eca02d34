"""A PostgreSQL pair declared ``rotation = "overlap"`` alternates between two logins of one
owner: each rotation moves the consumer's connection file to the other login, its data stays
usable, and the retired login is refused. Real agents, real PostgreSQL; the app's side logs in
only with what the consumer's two files hold."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import psycopg
import pytest

from meshtui.contracts.adapter import alternate_login
from meshtui.controller.plan.alternation import next_generation
from meshtui.errors import DeclarationError
from meshtui.model import RotationState, State

GITEA = "database:app1/gitea->db1/postgres"
NEEDLE = 'file = "srv/app1/gitea/db.password" }'
OFFER = 'provides = [{ name = "database", port = '


def _overlap(made: Any) -> None:
    """Declare the mesh's pair an overlap whose credential file is a libpq service file (the
    login with the password) beside a json connection file, and push."""
    text = made.decl.read_text()
    text = text.replace(
        NEEDLE,
        NEEDLE[:-1] + ', format = "pg_service", '
        'connection = { file = "srv/app1/gitea/db.conn", format = "json" } }',
    )
    start = text.index(OFFER) + len(OFFER)
    end = text.index(" }]", start)
    text = text[:end] + ', rotation = "overlap", grace = "5s"' + text[end:]
    made.decl.write_text(text)
    with made.controller() as ctl:
        ctl.declare(made.decl)
        assert ctl.push().ok


@pytest.fixture
def swapped(mesh_with_agents: Any, pg: Any, pg_clean: Any, pg_admin_file: Path) -> Any:
    """The mesh with its pair declared a swap and pushed."""
    made = mesh_with_agents(consumers={"app1": ["gitea"]}, port=pg.port, admin=pg_admin_file)
    with made.controller() as ctl:
        assert ctl.push().ok
    return made


@pytest.fixture
def mesh(swapped: Any) -> Any:
    _overlap(swapped)
    return swapped


def _files(mesh: Any) -> tuple[str, str, dict[str, str]]:
    """The login and password the consumer's credential file holds now, read once, and the
    connection facts; libpq reading the same file (``service=meshtui``) logs in as that login
    (the connection file names it too)."""
    unit = mesh.root / "srv/app1/gitea/db.password"
    lines = unit.read_text().splitlines()
    assert lines[0] == "[meshtui]", lines[0]
    held = dict(line.split("=", 1) for line in lines[1:])
    facts = json.loads((mesh.root / "srv/app1/gitea/db.conn").read_text())
    assert facts["user"] == held["user"]
    with pytest.MonkeyPatch.context() as env:
        env.setenv("PGSERVICEFILE", str(unit))
        with psycopg.connect("service=meshtui", connect_timeout=5) as conn:
            assert conn.execute("SELECT session_user").fetchone() == (held["user"],)
    return held["user"], held["password"], facts


def _connect(facts: dict[str, str], login: str, password: str) -> psycopg.Connection[Any]:
    return psycopg.connect(
        host=facts["host"], port=facts["port"], dbname=facts["dbname"], user=login,
        password=password, connect_timeout=5,
    )  # fmt: skip


def _refused(facts: dict[str, str], login: str, password: str) -> bool:
    try:
        _connect(facts, login, password).close()
    except psycopg.OperationalError as exc:
        assert "password authentication failed" in str(exc), exc
        return True
    return False


def test_the_next_generation_of_an_alternating_pair_is_held_by_the_other_login() -> None:
    assert next_generation(4, 4, (), alternates=False) == 5
    assert next_generation(4, 4, (5,), alternates=False) == 6
    assert next_generation(4, 4, (5,), alternates=True) == 7  # 6 would be the same login
    assert next_generation(3, 6, (), alternates=True) == 8  # an end ahead, and the other login


def test_each_overlap_moves_the_consumer_to_the_other_login_with_its_data(mesh: Any) -> None:
    with mesh.controller() as ctl:
        owner = ctl.inventory.pairs([GITEA])[0]["login"]
        generation = ctl.inventory.pairs([GITEA])[0]["generation"]
    login, password, facts = _files(mesh)
    assert login == alternate_login(owner, "ab"[generation % 2])
    with _connect(facts, login, password) as conn:
        conn.execute("CREATE TABLE issues AS SELECT 7 AS id")
    for rows in (1, 2):
        with mesh.controller() as ctl:
            report = ctl.rotate([GITEA])
        assert report.ok, report
        (pair,) = report.pairs
        assert pair.old_after == "refused" and pair.both_accepted_ms is not None
        new_login, new_password, facts = _files(mesh)
        assert new_login != login and new_login.startswith(owner)
        assert _refused(facts, login, password)  # the retired login, its old password
        with _connect(facts, new_login, new_password) as conn:
            assert conn.execute("SELECT count(*) FROM issues").fetchone() == (rows,)
            conn.execute("INSERT INTO issues VALUES (8)")
        login, password = new_login, new_password
    with mesh.controller() as ctl:
        (drilled,) = ctl.drill([GITEA])
        (row,) = ctl.status([GITEA])
    assert drilled.ok, (drilled.reason, drilled.steps)
    assert row.state == State.WORKING, row
    with mesh.controller() as ctl:  # the unit is a credential meshtui delivered, 0600
        files = [x for x in ctl.doctor().problems if x.check == "file"]
    assert files == [], files
    psql = shutil.which("psql")
    if psql is not None:  # the manual's example: psql takes both from the one file
        said = subprocess.run(
            [psql, "service=meshtui", "-AtXc", "SELECT session_user"],
            env={"PGSERVICEFILE": str(mesh.root / "srv/app1/gitea/db.password")},
            capture_output=True, text=True, timeout=30, check=True,
        )  # fmt: skip
        assert said.stdout.strip() == _files(mesh)[0]  # the drill moved it again


@pytest.mark.parametrize(
    ("point", "moves"),
    [("overlap:both-accepted", False), ("overlap:removing-old", True)],
)
def test_a_controller_killed_mid_overlap_ends_on_one_login(
    mesh: Any, point: str, moves: bool
) -> None:
    login, password, facts = _files(mesh)

    def die() -> None:
        raise KeyboardInterrupt(point)

    with mesh.controller() as ctl:
        ctl.faults = {point: die}
        with pytest.raises(KeyboardInterrupt):
            ctl.rotate([GITEA])
        (open_one,) = ctl.inventory.open_rotations()
        assert open_one["state"] in (RotationState.BOTH_ACCEPTED, RotationState.REMOVING_OLD)
    with mesh.controller() as ctl:
        assert ctl.push().ok
        assert not ctl.inventory.open_rotations()
    now_login, now_password, facts = _files(mesh)
    assert (now_login != login) is moves
    with _connect(facts, now_login, now_password) as conn:
        assert conn.execute("SELECT current_user").fetchone() is not None
    if moves:
        assert _refused(facts, login, password)
    with mesh.controller() as ctl:
        (drilled,) = ctl.drill([GITEA])  # a second login still open would fail its last step
    assert drilled.ok, (drilled.reason, drilled.steps)


def test_a_swap_pair_declared_overlap_moves_to_its_first_login_with_no_refusal(
    swapped: Any, pg: Any
) -> None:
    """The push after the declaration gives the provider the alternate before the consumer's
    connection file names it; the pair's login, now its owner, keeps what it made."""
    with swapped.controller() as ctl:
        owner = ctl.inventory.pairs([GITEA])[0]["login"]
    password = (swapped.root / "srv/app1/gitea/db.password").read_text()  # the password alone
    with psycopg.connect(
        host="127.0.0.1", port=pg.port, dbname="gitea_app1", user=owner, password=password
    ) as conn:
        conn.execute("CREATE TABLE issues AS SELECT 7 AS id")
    _overlap(swapped)
    login, password, facts = _files(swapped)
    assert login != owner
    with _connect(facts, login, password) as conn:
        assert conn.execute("SELECT id FROM issues").fetchone() == (7,)
    with swapped.controller() as ctl:
        report = ctl.rotate([GITEA])
    assert report.ok and report.pairs[0].old_after == "refused", report
    new_login, new_password, facts = _files(swapped)
    assert _refused(facts, owner, password) and _refused(facts, login, password)
    with _connect(facts, new_login, new_password) as conn:
        assert conn.execute("SELECT id FROM issues").fetchone() == (7,)


def test_an_alternating_pair_declared_a_swap_again_is_refused(mesh: Any) -> None:
    """A swap of the owner would leave the login the consumer holds accepting the old
    credential: refused, naming the requirement, and nothing stored."""
    text = mesh.decl.read_text()
    mesh.decl.write_text(text.replace(', rotation = "overlap", grace = "5s"', ""))
    with mesh.controller() as ctl:
        with pytest.raises(DeclarationError) as caught:
            ctl.declare(mesh.decl)
        assert ctl.inventory.rotation_modes([GITEA])[GITEA].rotation == "overlap"
    said = str(caught.value)
    assert 'modules."app1/gitea".requires[0].rotation' in said and "go back to swap" in said
    with mesh.controller() as ctl:
        (row,) = ctl.inventory.pairs([GITEA])
    owner = row["login"]
    assert f"pair {GITEA}" in said, said
    assert alternate_login(owner, "a") in said and alternate_login(owner, "b") in said, said
    assert 'keep rotation = "overlap"' in said and "withdraw the pair" in said, said


def test_an_alternating_pair_whose_offer_says_swap_names_the_offer(mesh: Any) -> None:
    """The swap said on the provider's offer: the error names that key, where it was said."""
    text = mesh.decl.read_text()
    mesh.decl.write_text(text.replace('rotation = "overlap"', 'rotation = "swap"'))
    with mesh.controller() as ctl:
        with pytest.raises(DeclarationError) as caught:
            ctl.declare(mesh.decl)
        assert ctl.inventory.rotation_modes([GITEA])[GITEA].rotation == "overlap"
    said = str(caught.value)
    assert 'modules."db1/postgres".provides[0].rotation' in said, said
    assert f"pair {GITEA}" in said and "go back to swap" in said, said


@pytest.mark.parametrize("rotations", [0, 1, 2])
def test_a_push_of_an_alternating_pair_with_nothing_changed_finds_no_drift(
    mesh: Any, rotations: int
) -> None:
    """Pushed again with nothing changed, before and after rotations (each login in turn): no
    end is re-applied and no drift is recorded."""
    with mesh.controller() as ctl:
        for _ in range(rotations):
            assert ctl.rotate([GITEA]).ok
        for _ in range(2):
            report = ctl.push()
            assert report.ok, report
            assert not report.repaired and not report.delivered, report
        events = [e for e in ctl.inventory.events() if e["kind"] == "push"]
    assert not any(e["detail"].get("changed_outside") for e in events), events[-1]


def test_status_says_the_overlap_and_the_login_the_consumer_holds(mesh: Any) -> None:
    """``status --json`` and ``status`` name an alternating pair's rotation, its grace and the
    login its consumer's file names now, after each rotation."""
    for _ in range(2):
        with mesh.controller() as ctl:
            assert ctl.rotate([GITEA]).ok
        held, _password, _facts = _files(mesh)
        done = mesh.cli("status", "--json", GITEA)
        (row,) = json.loads(done.stdout)
        assert row["rotation"] == {"rotation": "overlap", "grace_s": 5.0, "holds": held}, row
        text = mesh.cli("status", GITEA).stdout
        assert f"rotation: overlap (grace 5s); the consumer logs in as {held}" in text, text
