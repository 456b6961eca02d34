"""Push with real agents: what it refuses to do while a provider is away, and what it then does."""

from __future__ import annotations

import json

import pytest

from meshtui.errors import RotationBusyError

GITEA = "database:app1/gitea->db1/postgres"
WIKI = "database:app1/wiki->db1/postgres"


@pytest.fixture
def mesh(mesh_with_agents, pg, pg_clean, pg_admin_file):
    m = mesh_with_agents(consumers={"app1": ["gitea", "wiki"]}, port=pg.port, admin=pg_admin_file)
    with m.controller() as ctl:
        assert ctl.push().ok
    return m


def without(mesh, module: str):
    text = mesh.decl.read_text()
    start = text.index(f'[modules."app1/{module}"]')
    end = text.find("[modules.", start + 5)
    trimmed = mesh.root / f"without-{module}.toml"
    trimmed.write_text(text[:start] + (text[end:] if end != -1 else ""))
    return trimmed


def test_no_revocation_probe_while_the_provider_still_holds_the_login(mesh, pg):
    cred = mesh.root / "srv/app1/wiki/db.password"
    with mesh.controller() as ctl:
        ctl.declare(without(mesh, "wiki"))
    mesh.stop("db1")
    with mesh.controller() as ctl:
        report = ctl.push()
        assert not report.withdrawn  # the consumer was not asked: the login may still work
        # a withdrawal not verified is not a success (push must not say "all ends agree")
        assert not report.ok and "revocation not verified" in report.behind[WIKI]
        row = {r.pair: r for r in ctl.status()}[WIKI]
        assert row.state.value == "stale" and "not verified" in row.reason and not row.alarm
    assert cred.exists()
    mesh.start("db1")
    with mesh.controller() as ctl:
        report = ctl.push()
        assert [o.pair for o in report.withdrawn] == [WIKI] and report.withdrawn[0].ok
        assert {r.pair: r for r in ctl.status()}[WIKI].state.value == "revoked"
    assert not cred.exists()


def test_a_consumer_never_moves_ahead_of_its_provider(mesh):
    cred = mesh.root / "srv/app1/gitea/db.password"
    old = cred.read_bytes()
    with mesh.controller() as ctl:  # withdraw and declare back: a new generation is due
        ctl.declare(without(mesh, "gitea"))
        ctl.declare(mesh.decl)
    mesh.stop("db1")
    with mesh.controller() as ctl:
        report = ctl.push()
        assert not report.ok
        assert "waits until its provider" in " ".join(o.reason for o in report.delivered) or (
            GITEA in report.behind
        )
    assert cred.read_bytes() == old
    mesh.start("db1")
    with mesh.controller() as ctl:
        assert ctl.push().ok
    assert cred.read_bytes() != old


def test_declare_waits_for_an_interrupted_rotation(mesh):
    with mesh.controller() as ctl:
        rows = ctl.inventory.pairs([GITEA])
        from meshtui.controller.act.rotate import journal

        journal(ctl, rows)  # as if a controller died right after journaling
        with pytest.raises(RotationBusyError, match="interrupted"):
            ctl.declare(mesh.decl)
        assert ctl.push().ok  # push finishes it
        ctl.declare(mesh.decl)


def test_rotate_after_an_interrupted_rotation_starts_from_the_recovered_generation(mesh, pg):
    from meshtui.controller.act.rotate import journal

    with mesh.controller() as ctl:
        journal(ctl, ctl.inventory.pairs([GITEA]))  # generation 2 journaled, nothing sent
        report = ctl.rotate([GITEA])  # recovery finishes 1 -> 2, then this rotates 2 -> 3
        assert report.ok, report.reason
        assert (report.pairs[0].previous, report.pairs[0].generation) == (2, 3)
        row = {r.pair: r for r in ctl.status()}[GITEA]
        assert (row.generation, row.consumer_generation, row.provider_generation) == (3, 3, 3)
        assert ctl.inventory.open_rotations() == []


def _alter_by_hand(pg, login: str) -> None:
    import psycopg

    with psycopg.connect(pg.admin_conninfo(), autocommit=True) as conn:
        conn.execute(f"ALTER ROLE {login} PASSWORD 'typed-by-a-dba'")


def test_push_reapplies_a_password_changed_outside_meshtui(mesh, pg):
    """A DBA's ALTER ROLE is found by the provider's read-only inspection,
    re-applied by the next push, and status says what was found and when."""
    with mesh.controller() as ctl:
        login = {r.pair: r for r in ctl.status()}[GITEA].login
        assert [p.verdict for p in ctl.probe([GITEA])] == ["accepted"]
    _alter_by_hand(pg, login)
    with mesh.controller() as ctl:
        assert [p.verdict for p in ctl.probe([GITEA])] == ["refused"]
        report = ctl.push()
        assert report.ok, report.behind
        (moved,) = [o for o in report.delivered if o.pair == GITEA]
        assert moved.ok and "changed outside meshtui at " in moved.reason
        assert [o.pair for o in report.delivered] == [GITEA]  # wiki was not touched
        assert [p.verdict for p in ctl.probe([GITEA])] == ["accepted"]  # logs in again
        row = {r.pair: r for r in ctl.status()}[GITEA]
        assert row.state.value == "working"
        assert "re-applied after it was changed outside meshtui at " in row.reason
        events = [e for e in ctl.events() if e.kind == "push"]
        assert GITEA in json.dumps(events[-1].to_json())
        # nothing drifted since: the next push has nothing to do
        again = ctl.push()
        assert again.ok and not again.delivered


def test_drift_that_cannot_be_reapplied_is_shown_in_status(mesh, pg):
    with mesh.controller() as ctl:
        login = {r.pair: r for r in ctl.status()}[GITEA].login
    _alter_by_hand(pg, login)
    import psycopg

    # the server takes no writes: the drift is found but cannot be re-applied

    with psycopg.connect(pg.admin_conninfo(), autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET default_transaction_read_only = on")
        conn.execute("SELECT pg_reload_conf()")
    try:
        with mesh.controller() as ctl:
            report = ctl.push()
            assert GITEA in report.behind
            row = {r.pair: r for r in ctl.status()}[GITEA]
            assert row.state.value == "stale"
            assert "changed outside meshtui at " in row.reason, row.reason
            ctl.push()  # found again: it keeps the time it was first found
            assert {r.pair: r for r in ctl.status()}[GITEA].reason == row.reason
    finally:
        with psycopg.connect(pg.admin_conninfo(), autocommit=True) as conn:
            conn.execute("ALTER SYSTEM RESET default_transaction_read_only")
            conn.execute("SELECT pg_reload_conf()")
    with mesh.controller() as ctl:
        assert ctl.push().ok
        assert [p.verdict for p in ctl.probe([GITEA])] == ["accepted"]


def test_a_pair_stale_only_by_its_last_probe_is_not_behind(mesh, pg):
    """A probe that could not decide (the server was down) leaves the pair stale until a probe
    decides; once the server is back and every end holds its generation, push has nothing to
    deliver: it says the ends agree (exit 0) and names the pair as stale by its last probe,
    not "behind" on every run until someone probes."""
    assert mesh.cli("push").returncode == 0
    pg.stop()
    try:
        mesh.cli("probe")  # could not decide: nothing listens on the server's port
    finally:
        pg.start()
    with mesh.controller() as ctl:
        (gitea,) = ctl.status([GITEA])
    assert gitea.state == "stale" and "could not decide" in gitea.reason, gitea
    done = mesh.cli("push")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert not any(line.startswith("behind") for line in lines), lines
    assert any(line.split()[:2] == ["stale", f"{GITEA}:"] for line in lines), lines
    assert lines[-1] == "all ends agree", lines
    with mesh.controller() as ctl:
        report = ctl.push()
    assert report.ok and GITEA in report.stale_by_probe and GITEA not in report.behind


def test_an_unreachable_nodes_pairs_are_called_unreachable_not_behind(mesh):
    mesh.stop("app1")  # both ends of both pairs hold their generation: nothing is behind
    done = mesh.cli("push")
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[:2] for line in lines if GITEA in line or WIKI in line] == [
        ["unreachable", f"{GITEA}:"],
        ["unreachable", f"{WIKI}:"],
    ], lines
    assert not any(line.startswith("behind") for line in lines), lines
    assert lines[-1] == "2 unreachable"
    with mesh.controller() as ctl:
        report = ctl.push()
    assert not report.ok and report.unreachable == [GITEA, WIKI]
    mesh.start("app1")
    with mesh.controller() as ctl:
        report = ctl.push()
    assert report.ok and report.unreachable == []
