"""An alternating pair on a real PostgreSQL (each server version): an owner and two logins
acting as it, so an overlap rotation moves the consumer from one login to the other with no
refused login and the data of either usable by the other."""

from __future__ import annotations

import psycopg
import pytest

from meshtui.contracts.adapter import alternate_login
from meshtui.kinds.postgres.catalog import held_name
from meshtui.model import Sessions
from tests.provisioner.conftest import Mesh, outcomes

OWNER = "gitea_app1_x"
A, B = alternate_login(OWNER, "a"), alternate_login(OWNER, "b")


def _step(mesh: Mesh, alt: str, *, keep: bool, rotate: bool) -> dict[str, str]:
    """The provider's manifest for one step of an overlap: a new secret (``rotate``) for the
    alternate ``alt``, the other logins kept (``keep``) or retired."""
    if rotate:
        mesh.rotate("app1", "gitea")
    entry = mesh.consumers["app1/gitea"]
    entry["alt"] = alt
    entry.pop("keep", None)
    if keep:
        entry["keep"] = True
    # as the overlap asks: the old credential's sessions are ended at the last step only
    return outcomes(mesh.reconcile(sessions=None if keep else {OWNER: Sessions.END}))


def _table_owner(mesh: Mesh, table: str) -> str:
    with mesh.admin_conn("gitea") as conn:
        row = conn.execute(
            "SELECT pg_get_userbyid(relowner) FROM pg_class WHERE relname = %s", [table]
        ).fetchone()
    assert row is not None
    return str(row[0])


def test_an_overlap_moves_the_consumer_to_the_other_login_and_its_data_with_it(
    mesh: Mesh,
) -> None:
    mesh.add("app1", "gitea", login=OWNER, database="gitea")
    assert _step(mesh, "a", keep=False, rotate=False) == {OWNER: "created"}
    first = mesh.password("app1", "gitea")
    assert mesh.can_login(A, first, "gitea")
    assert not mesh.can_login(OWNER, first, "gitea") and mesh.authid()[OWNER][2] is False
    assert mesh.db_owner("gitea") == OWNER
    with mesh.connect_as(A, first, "gitea") as conn:
        conn.execute("CREATE TABLE issues (id int)")
        conn.execute("INSERT INTO issues VALUES (7)")
    assert _table_owner(mesh, "issues") == OWNER  # not A's: the trap of a login's own table

    # the overlap's first step: B takes the new credential, A still logs in with the old
    session = mesh.connect_as(A, first, "gitea")
    assert _step(mesh, "b", keep=True, rotate=True)[OWNER] in ("updated", "created")
    second = mesh.password("app1", "gitea")
    assert mesh.can_login(B, second, "gitea")
    assert mesh.can_login(A, first, "gitea")
    assert session.execute("SELECT 1").fetchone() == (1,)  # nothing ended yet

    # the last step: A retired (no login, no password, its session ended), B alone
    assert _step(mesh, "b", keep=False, rotate=False)[OWNER] == "updated"
    assert not mesh.can_login(A, first, "gitea")
    assert mesh.authid()[A][1:] == (None, False)
    with pytest.raises(psycopg.OperationalError):
        session.execute("SELECT 1")
    session.close()
    with mesh.connect_as(B, second, "gitea") as conn:
        assert conn.execute("SELECT id FROM issues").fetchone() == (7,)
        conn.execute("INSERT INTO issues VALUES (8)")
        conn.execute("ALTER TABLE issues ADD COLUMN title text")  # an owner's right
        conn.execute("CREATE TABLE labels (id int)")
    assert _table_owner(mesh, "labels") == OWNER

    # a retried step writes nothing
    roles = mesh.authid()
    xid = mesh.next_xid()
    assert _step(mesh, "b", keep=False, rotate=False) == {OWNER: "unchanged"}
    assert mesh.authid() == roles
    assert mesh.next_xid() == xid

    # and back to A: what B made is A's to use
    _step(mesh, "a", keep=True, rotate=True)
    _step(mesh, "a", keep=False, rotate=False)
    third = mesh.password("app1", "gitea")
    assert not mesh.can_login(B, second, "gitea")
    with mesh.connect_as(A, third, "gitea") as conn:
        assert conn.execute("SELECT count(*) FROM labels").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM issues").fetchone() == (2,)


def test_a_withdrawn_pair_removes_its_three_roles_and_keeps_its_data(mesh: Mesh) -> None:
    mesh.add("app1", "gitea", login=OWNER, database="gitea")
    _step(mesh, "a", keep=False, rotate=False)
    _step(mesh, "b", keep=True, rotate=True)
    second = mesh.password("app1", "gitea")
    session = mesh.connect_as(B, second, "gitea")
    session.execute("CREATE TABLE issues AS SELECT 7 AS id")
    session.commit()
    mesh.drop("app1", "gitea")
    report = mesh.reconcile()
    assert outcomes(report) == {OWNER: "removed"}, report.lines()
    roles = mesh.authid()
    assert not {OWNER, A, B} & set(roles)
    with pytest.raises(psycopg.OperationalError):
        session.execute("SELECT 1")
    session.close()
    assert mesh.db_owner("gitea") == held_name(OWNER)
    assert _table_owner(mesh, "issues") == held_name(OWNER)


def test_a_swap_pair_declared_overlap_keeps_its_login_as_the_owner(mesh: Mesh) -> None:
    """The pair's existing login becomes its owner: it owns the data already, so nothing is
    reassigned, and it keeps logging in with the credential the consumer holds until the first
    overlap's last step retires it."""
    mesh.add("app1", "gitea", login=OWNER, database="gitea")
    assert outcomes(mesh.reconcile()) == {OWNER: "created"}
    old = mesh.password("app1", "gitea")
    with mesh.connect_as(OWNER, old, "gitea") as conn:
        conn.execute("CREATE TABLE issues AS SELECT 7 AS id")

    _step(mesh, "b", keep=True, rotate=True)
    new = mesh.password("app1", "gitea")
    assert mesh.can_login(OWNER, old, "gitea")  # the consumer's login until it switches
    assert mesh.can_login(B, new, "gitea")
    assert A not in mesh.authid()

    _step(mesh, "b", keep=False, rotate=False)
    assert not mesh.can_login(OWNER, old, "gitea")
    assert mesh.authid()[OWNER][1:] == (None, False)
    with mesh.connect_as(B, new, "gitea") as conn:
        assert conn.execute("SELECT id FROM issues").fetchone() == (7,)
        conn.execute("INSERT INTO issues VALUES (8)")


def test_an_alternate_is_never_made_of_a_role_another_made(mesh: Mesh) -> None:
    with mesh.admin_conn() as conn:
        conn.execute(f"CREATE ROLE {B} LOGIN PASSWORD 'hand-made-pw'")
    before = mesh.authid()[B]
    mesh.add("app1", "gitea", login=OWNER)
    _step(mesh, "a", keep=False, rotate=False)
    assert mesh.authid()[B] == before  # the retired side is not ours: left alone
    got = _step(mesh, "b", keep=True, rotate=True)
    assert got[OWNER] == "refused"
    assert mesh.authid()[B] == before


def test_a_createrole_admin_alternates_too(mesh: Mesh) -> None:
    """A managed PostgreSQL's admin (CREATEROLE CREATEDB, no superuser) makes the owner, grants
    it to both logins and retires one: the rights it has over the roles it made suffice."""
    with mesh.admin_conn() as conn:
        conn.execute("CREATE ROLE meshadmin LOGIN CREATEROLE CREATEDB PASSWORD 'managed-pw-1'")
    mesh.admin.write_text(
        f"host=127.0.0.1 port={mesh.cluster.port} user=meshadmin"
        " password=managed-pw-1 dbname=postgres\n"
    )
    mesh.add("app1", "gitea", login=OWNER, database="gitea")
    assert _step(mesh, "a", keep=False, rotate=False) == {OWNER: "created"}
    first = mesh.password("app1", "gitea")
    with mesh.connect_as(A, first, "gitea") as conn:
        conn.execute("CREATE TABLE issues AS SELECT 7 AS id")
    _step(mesh, "b", keep=True, rotate=True)
    second = mesh.password("app1", "gitea")
    assert mesh.can_login(A, first, "gitea") and mesh.can_login(B, second, "gitea")
    _step(mesh, "b", keep=False, rotate=False)
    assert not mesh.can_login(A, first, "gitea")
    with mesh.connect_as(B, second, "gitea") as conn:
        assert conn.execute("SELECT id FROM issues").fetchone() == (7,)
    mesh.drop("app1", "gitea")
    assert outcomes(mesh.reconcile()) == {OWNER: "removed"}
    assert not {OWNER, A, B} & set(mesh.authid())


def test_a_line_that_names_an_alternate_with_the_same_credential_refuses_no_login(
    mesh: Mesh,
) -> None:
    """A swap pair's line given ``alt`` before any overlap (the same secret): the alternate
    takes the credential the consumer holds and the owner keeps it until the next overlap
    retires it, so the consumer's login (still the owner's name) is never refused."""
    mesh.add("app1", "gitea", login=OWNER)
    mesh.reconcile()
    old = mesh.password("app1", "gitea")
    _step(mesh, "a", keep=False, rotate=False)
    assert mesh.can_login(OWNER, old) and mesh.can_login(A, old)
    _step(mesh, "b", keep=True, rotate=True)
    _step(mesh, "b", keep=False, rotate=False)
    assert not mesh.can_login(OWNER, old) and not mesh.can_login(A, old)
    assert mesh.can_login(B, mesh.password("app1", "gitea"))


def test_a_first_step_over_an_open_overlap_is_refused_and_changes_nothing(mesh: Mesh) -> None:
    """Both logins log in (an overlap not closed): a next first step onto the login still in
    use would change the password its consumer may hold; it is refused, nothing changed."""
    mesh.add("app1", "gitea", login=OWNER)
    _step(mesh, "a", keep=False, rotate=False)
    first = mesh.password("app1", "gitea")
    _step(mesh, "b", keep=True, rotate=True)
    second = mesh.password("app1", "gitea")
    roles = mesh.authid()
    assert _step(mesh, "a", keep=True, rotate=True) == {OWNER: "refused"}
    assert mesh.authid() == roles
    assert mesh.can_login(A, first) and mesh.can_login(B, second)
