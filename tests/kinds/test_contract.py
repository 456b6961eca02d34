"""The contract every kind's adapter and probe keep, run over every registered kind against its
real server (tests/kinds/<kind>/serve.py raises it; tests/kinds/contract.py says what it must offer).

A new kind is done when it passes this module. What is specific to one kind (Redis's ACL rules,
PostgreSQL's databases and pg_hba.conf) stays in that kind's own tests.
"""

from __future__ import annotations

import pytest

from meshtui.errors import ManifestError
from meshtui.kinds import registry
from meshtui.model import Drift, Verdict
from meshtui.provisioner.harness import inspect, reconcile

from .conftest import fixture_module
from .contract import Provider, Server, every_password, outcomes


@pytest.mark.parametrize("name", registry.NAMES)
def test_every_registered_kind_has_a_fixture_object(name: str) -> None:
    assert callable(getattr(fixture_module(name), "serve", None)), (
        f"tests/kinds/{name}/serve.py must define serve(tmp) (see tests/kinds/contract.py)"
    )


def test_create_makes_a_login_that_works(provider: Provider) -> None:
    login = provider.add("app1", "gitea")
    report = provider.reconcile()
    assert outcomes(report) == {login: "created"}, report.lines()
    assert report.ok
    assert provider.can_login("app1", "gitea")
    assert not provider.can_login("app1", "gitea", "not-the-password")


def test_the_password_is_set_every_time(provider: Provider) -> None:
    login = provider.add("app1", "gitea")
    provider.reconcile()
    old = provider.password("app1", "gitea")
    provider.rotate("app1", "gitea")
    report = provider.reconcile()
    assert outcomes(report) == {login: "updated"}, report.lines()
    assert provider.can_login("app1", "gitea")
    assert not provider.can_login("app1", "gitea", old)


def test_an_unchanged_run_writes_nothing(provider: Provider, server: Server) -> None:
    login = provider.add("app1", "gitea")
    other = provider.add("app2", "web")
    provider.reconcile()
    before = server.footprint()
    report = provider.reconcile()
    assert outcomes(report) == {login: "unchanged", other: "unchanged"}, report.lines()
    assert server.footprint() == before


def test_drift_is_restored(provider: Provider, server: Server) -> None:
    login = provider.add("app1", "gitea")
    provider.reconcile()
    server.drift(login)
    assert not provider.can_login("app1", "gitea")
    report = provider.reconcile()
    assert outcomes(report) == {login: "updated"}, report.lines()
    assert provider.can_login("app1", "gitea")
    assert not server.can_login(login, "typed-by-hand")


def test_a_restart_of_the_server_reports_no_drift(provider: Provider, server: Server) -> None:
    login = provider.add("app1", "gitea")
    other = provider.add("app2", "web")
    assert provider.reconcile().ok
    server.restart()
    found = {f.login: f.verdict for f in inspect(provider.manifest, server.admin)}
    assert found == {login: Drift.MATCHES, other: Drift.MATCHES}
    report = provider.reconcile()
    assert outcomes(report) == {login: "unchanged", other: "unchanged"}, report.lines()
    server.drift(login)  # a real change after the restart is still seen
    found = {f.login: f.verdict for f in inspect(provider.manifest, server.admin)}
    assert found == {login: Drift.CHANGED, other: Drift.MATCHES}


def test_removal_keeps_the_data_and_ends_live_sessions(provider: Provider, server: Server) -> None:
    login = provider.add("app1", "gitea")
    kept = provider.add("app2", "web")
    provider.reconcile()
    password = provider.password("app1", "gitea")
    server.put_data(login, password)
    session = server.open_session(login, password)
    try:
        assert server.session_alive(session)
        provider.drop("app1", "gitea")
        report = provider.reconcile()
        assert outcomes(report) == {login: "removed", kept: "unchanged"}, report.lines()
        assert not server.session_alive(session), "a removed login's session still works"
    finally:
        server.close_session(session)
    assert not server.can_login(login, password)
    assert server.data_kept(login), "removal dropped the login's data"
    assert provider.can_login("app2", "web")


def test_logins_meshtui_did_not_make_are_never_touched(provider: Provider, server: Server) -> None:
    server.make_foreign("theirs_app9_x", "hand-made-1")
    server.make_foreign("bystander", "hand-made-2")
    before = server.stored("theirs_app9_x"), server.stored("bystander")
    login = provider.add("app9", "theirs")  # asks for the name a person already gave someone
    mine = provider.add("app1", "gitea")
    report = provider.reconcile()
    assert outcomes(report) == {login: "refused", mine: "created"}, report.lines()
    provider.drop("app1", "gitea")  # a removal run does not sweep them either
    provider.drop("app9", "theirs")
    provider.reconcile()
    assert (server.stored("theirs_app9_x"), server.stored("bystander")) == before
    assert server.can_login("theirs_app9_x", "hand-made-1")
    assert server.can_login("bystander", "hand-made-2")


def test_a_name_the_server_cannot_hold_is_refused(provider: Provider, server: Server) -> None:
    bad = provider.add("app1", "odd", server.unholdable())
    good = provider.add("app2", "web")
    report = provider.reconcile()
    assert outcomes(report) == {bad: "refused", good: "created"}, report.lines()
    assert [o.reason for o in report.outcomes if o.login == bad] != [""]
    assert server.stored(good)


@pytest.mark.parametrize(
    "broken",
    [b"{", b"[]", b'{"version": 2}', b"not json at all"],
    ids=["truncated", "not-an-object", "unknown-version", "garbage"],
)
def test_a_broken_manifest_changes_nothing(
    provider: Provider, server: Server, broken: bytes
) -> None:
    provider.add("app1", "gitea")
    provider.reconcile()
    before = server.footprint()
    provider.manifest.write_bytes(broken)
    with pytest.raises(ManifestError):
        reconcile(provider.manifest, server.admin)
    assert server.footprint() == before
    assert provider.can_login("app1", "gitea")


def test_a_consumer_without_its_secret_waits(provider: Provider, server: Server) -> None:
    login = provider.add("app1", "gitea")
    provider.reconcile()
    password = provider.password("app1", "gitea")
    provider.rotate("app1", "gitea", write_secret=False)  # the manifest is ahead of its file
    newcomer = provider.add("app2", "web", write_secret=False)
    before = server.footprint()
    report = provider.reconcile()
    assert outcomes(report) == {login: "waiting", newcomer: "waiting"}, report.lines()
    assert all(o.reason for o in report.outcomes)
    assert server.footprint() == before
    assert server.can_login(login, password), "a waiting consumer lost its login"


def test_no_plaintext_and_no_verifier_in_the_server_logs(
    provider: Provider, server: Server
) -> None:
    mark = server.log_mark()
    login = provider.add("app1", "gitea")
    provider.add("app2", "web")
    provider.reconcile()
    passwords = list(every_password(provider))
    provider.rotate("app1", "gitea")
    provider.reconcile()
    passwords += list(every_password(provider))
    stored = server.stored(login)
    assert stored, "the fixture must say what the server stores of a credential"
    result = provider.probe(login, provider.password("app1", "gitea"))
    assert result.verdict() is Verdict.ACCEPTED, result.reason()
    text = server.log_since(mark)
    assert text.strip(), "the server logged nothing: the check would prove nothing"
    for password in passwords:
        assert password not in text, "a password is in the server's log"
    for verifier in stored:
        assert verifier not in text, "a stored verifier is in the server's log"


def test_probe_verdicts_with_the_negative_control(provider: Provider, server: Server) -> None:
    login = provider.add("app1", "gitea")
    provider.reconcile()
    password = provider.password("app1", "gitea")
    accepted = provider.probe(login, password)
    assert accepted.verdict() is Verdict.ACCEPTED, accepted.reason()
    assert accepted.control is not None and accepted.control.verdict is Verdict.REFUSED
    refused = provider.probe(login, "not-the-password")
    assert refused.verdict() is Verdict.REFUSED, refused.reason()
    provider.drop("app1", "gitea")
    provider.reconcile()
    revoked = provider.probe(login, password, server.values(login))
    assert revoked.verdict() is Verdict.REFUSED, revoked.reason()
    unknown = provider.probe("nobody_app1_x", password)
    assert unknown.verdict() in (Verdict.REFUSED, Verdict.UNKNOWN), unknown.reason()


def test_an_accepted_probe_names_the_consumers_address(provider: Provider) -> None:
    login = provider.add("app1", "gitea")
    provider.reconcile()
    accepted = provider.probe(login, provider.password("app1", "gitea"))
    assert accepted.verdict() is Verdict.ACCEPTED, accepted.reason()
    assert accepted.login.client_addr == "127.0.0.1", accepted.reason()
    assert "from 127.0.0.1" in accepted.reason(), accepted.reason()


def test_a_server_that_is_down_is_unknown_never_revoked(provider: Provider, server: Server) -> None:
    login = provider.add("app1", "gitea")
    provider.reconcile()
    password = provider.password("app1", "gitea")
    with server.down():
        result = provider.probe(login, password)
        wrong = provider.probe(login, "not-the-password")
    assert result.verdict() is Verdict.UNKNOWN, result.reason()
    assert wrong.verdict() is Verdict.UNKNOWN, wrong.reason()
    assert provider.probe(login, password).verdict() is Verdict.ACCEPTED
