"""The contract of a kind whose login holds two credentials at once (``Capabilities.
overlapping``), run against its real server: an overlap's first step (the manifest line's
``keep``) adds the new credential with the old still accepted, a retry keeps the same two, and
the plain run that follows leaves the new alone accepted, the old refused; retried, it changes
nothing."""

from __future__ import annotations

import pytest

from meshtui.kinds import registry

from .contract import Provider, Server, outcomes


@pytest.fixture
def overlapping(provider: Provider, server: Server) -> Provider:
    if registry.can_alternate(server.kind):
        pytest.skip(
            f"{server.kind.title} holds one credential per login and overlaps by two alternating "
            "logins (their contract: tests/kinds/postgres/provisioner/test_alternating.py)"
        )
    if not registry.can_overlap(server.kind):
        pytest.skip(f"{server.kind.title} holds one credential per login (declare refuses it)")
    return provider


def _first_step(provider: Provider) -> tuple[str, str, str]:
    """A consumer made, then its overlap's first step run: (its login, the old, the new)."""
    login = provider.add("app1", "gitea")
    provider.reconcile()
    old = provider.password("app1", "gitea")
    provider.rotate("app1", "gitea")
    provider.consumers["app1/gitea"]["keep"] = True
    report = provider.reconcile()
    assert outcomes(report) == {login: "updated"}, report.lines()
    return login, old, provider.password("app1", "gitea")


def test_the_new_is_added_beside_the_old_then_the_old_alone_is_removed(
    overlapping: Provider,
) -> None:
    provider = overlapping
    login, old, new = _first_step(provider)
    assert provider.can_login("app1", "gitea", new) and provider.can_login("app1", "gitea", old)
    report = provider.reconcile()  # a retried first step: the same two, never a third
    assert report.ok, report.lines()
    assert provider.can_login("app1", "gitea", new) and provider.can_login("app1", "gitea", old)
    assert not provider.can_login("app1", "gitea", "not-the-password")

    del provider.consumers["app1/gitea"]["keep"]
    report = provider.reconcile()
    assert outcomes(report) == {login: "updated"}, report.lines()
    assert provider.can_login("app1", "gitea", new)
    assert not provider.can_login("app1", "gitea", old)
    report = provider.reconcile()  # a retried removal looks first: nothing to remove
    assert outcomes(report) == {login: "unchanged"}, report.lines()
    assert provider.can_login("app1", "gitea", new)
    assert not provider.can_login("app1", "gitea", old)


def test_a_first_step_over_an_open_overlap_is_refused_and_changes_nothing(
    overlapping: Provider,
) -> None:
    provider = overlapping
    login, first, second = _first_step(provider)
    provider.rotate("app1", "gitea")  # a next overlap before the last one was closed
    report = provider.reconcile()
    assert outcomes(report) == {login: "refused"}, report.lines()
    third = provider.password("app1", "gitea")
    assert provider.can_login("app1", "gitea", first)
    assert provider.can_login("app1", "gitea", second)
    assert not provider.can_login("app1", "gitea", third)


def test_a_batch_keeps_the_old_of_its_overlap_line_alone(overlapping: Provider) -> None:
    provider = overlapping
    provider.add("app1", "gitea")
    provider.add("app2", "wiki")
    provider.reconcile()
    old = {k: provider.password(*k.split("/")) for k in ("app1/gitea", "app2/wiki")}
    provider.rotate("app1", "gitea")
    provider.rotate("app2", "wiki")
    provider.consumers["app1/gitea"]["keep"] = True  # one line of the batch overlaps
    report = provider.reconcile()
    assert report.ok, report.lines()
    assert provider.can_login("app1", "gitea") and provider.can_login("app2", "wiki")
    assert provider.can_login("app1", "gitea", old["app1/gitea"])
    assert not provider.can_login("app2", "wiki", old["app2/wiki"])
