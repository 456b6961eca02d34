"""Many logins in one transaction (each proven by the read-back), and admin sessions kept warm."""

from __future__ import annotations

from meshtui.kinds.postgres.warm import WarmSessions
from meshtui.lab.wait import poll
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


def test_a_batch_mixing_saslprep_and_ascii_secrets_gives_each_login_its_own(mesh: Mesh) -> None:
    # the libpq-built verifier of the multibyte secret sits between computed-ahead ones
    mesh.add("app1", "m0")
    mesh.add("app1", "m1", secret="pässwörd-ünïcode".encode())
    mesh.add("app1", "m2")
    assert set(outcomes(mesh.reconcile()).values()) == {"created"}
    for i in range(3):
        assert mesh.can_login(mesh.login_of("app1", f"m{i}"), mesh.password("app1", f"m{i}"))
    mesh.rotate("app1", "m0")  # m1 and m2 intact: only m0 is written
    got = outcomes(mesh.reconcile())
    assert got == {"m0_app1_x": "updated", "m1_app1_x": "unchanged", "m2_app1_x": "unchanged"}
    assert mesh.can_login("m0_app1_x", mesh.password("app1", "m0"))


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


def _backend_pids(mesh: Mesh) -> set[int]:
    with mesh.admin_conn() as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = 'meshtui-provisioner'"
        ).fetchall()
    return {int(r[0]) for r in rows}


def test_a_kept_session_is_reused_and_a_dead_one_replaced(mesh: Mesh) -> None:
    warm = WarmSessions()
    try:
        mesh.add("app1", "gitea")
        assert outcomes(mesh.reconcile(factory=warm.open)) == {"gitea_app1_x": "created"}
        (kept,) = _backend_pids(mesh)
        mesh.rotate("app1", "gitea")
        assert outcomes(mesh.reconcile(factory=warm.open)) == {"gitea_app1_x": "updated"}
        assert _backend_pids(mesh) == {kept}  # the same session, no new login
        with mesh.admin_conn() as conn:
            conn.execute("SELECT pg_terminate_backend(%s, 5000)", [kept])
        mesh.rotate("app1", "gitea")
        assert outcomes(mesh.reconcile(factory=warm.open)) == {"gitea_app1_x": "updated"}
        assert mesh.can_login("gitea_app1_x", mesh.password("app1", "gitea"))
        assert kept not in _backend_pids(mesh)
    finally:
        warm.close()
    # a closed session's backend exits just after the client goes: wait for it, boundedly
    poll(lambda: not _backend_pids(mesh), 5.0)
    assert _backend_pids(mesh) == set()
