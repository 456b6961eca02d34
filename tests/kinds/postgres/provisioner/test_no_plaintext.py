"""No plaintext (nor verifier) reaches the server log, even with log_statement=all and a failure."""

from __future__ import annotations

from tests.provisioner.conftest import Mesh, outcomes


def test_log_statement_all_and_a_failing_write_leak_nothing(mesh: Mesh) -> None:
    log = mesh.cluster.log_path
    mesh.add("app1", "gitea", database="gitea")
    mesh.reconcile()
    offset = log.stat().st_size
    passwords = [mesh.password("app1", "gitea")]
    try:
        mesh.cluster.set_config(log_statement="all")
        mesh.rotate("app1", "gitea")
        mesh.add("app2", "web")
        report = mesh.reconcile()
        assert outcomes(report) == {"gitea_app1_x": "updated", "web_app2_x": "created"}
        passwords += [mesh.password("app1", "gitea"), mesh.password("app2", "web")]

        # provoke a failure inside the transaction that carries the verifier
        mesh.cluster.set_config(default_transaction_read_only="on")
        mesh.rotate("app1", "gitea")
        passwords.append(mesh.password("app1", "gitea"))
        report = mesh.reconcile()
        (failed, _unchanged) = report.outcomes
        assert failed.outcome == "failed" and "read-only" in failed.reason
        assert not report.ok
    finally:
        mesh.cluster.set_config(default_transaction_read_only=None, log_statement=None)
    with log.open("rb") as fh:
        fh.seek(offset)
        text = fh.read().decode("utf-8", "replace")
    # logging was on and the failure was logged ...
    assert "FROM pg_authid" in text
    assert "cannot execute ALTER ROLE in a read-only transaction" in text
    # ... and yet no secret, no verifier and no failing statement's text is there
    for password in passwords:
        assert password not in text
    assert "SCRAM-SHA-256$" not in text
    assert "LOGIN PASSWORD" not in text
    assert not [line for line in text.splitlines() if "STATEMENT:" in line and "ROLE" in line]
    # the failed rotation changed nothing: the previous password still works
    assert mesh.can_login("gitea_app1_x", passwords[1], "gitea")
    assert outcomes(mesh.reconcile()) == {"gitea_app1_x": "updated", "web_app2_x": "unchanged"}
