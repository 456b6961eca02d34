"""Many logins in one transaction, each proven by the read-back."""

from __future__ import annotations

from tests.provisioner.conftest import Mesh, outcomes


def test_rotating_many_logins_is_one_transaction_and_each_works(mesh: Mesh) -> None:
    for i in range(6):
        mesh.add("app1", f"m{i}")
    assert set(outcomes(mesh.reconcile()).values()) == {"created"}
    for i in range(6):
        mesh.rotate("app1", f"m{i}")
    xid = mesh.next_xid()
    assert set(outcomes(mesh.reconcile()).values()) == {"updated"}
    assert mesh.next_xid() == xid + 1  # one transaction for all six
    for i in range(6):
        assert mesh.can_login(mesh.login_of("app1", f"m{i}"), mesh.password("app1", f"m{i}"))


def test_a_foreign_role_in_a_batch_costs_only_itself(mesh: Mesh) -> None:
    with mesh.admin_conn() as conn:
        conn.execute("CREATE ROLE theirs_app1_x LOGIN PASSWORD 'kept-by-them'")
    for i in range(3):
        mesh.add("app1", f"m{i}")
    mesh.add("app1", "theirs")
    got = outcomes(mesh.reconcile())
    assert got.pop("theirs_app1_x") == "refused"
    assert set(got.values()) == {"created"}
    assert mesh.can_login("theirs_app1_x", "kept-by-them")
    for i in range(3):
        assert mesh.can_login(mesh.login_of("app1", f"m{i}"), mesh.password("app1", f"m{i}"))
