"""The contract of a kind whose login holds two credentials at once (``Capabilities.
overlapping``), run against its real server: an overlap's first step (the manifest line's
``keep``) adds the new credential with the old still accepted, a retry keeps the same two, and
the plain run that follows leaves the new alone accepted, the old refused; retried, it changes
nothing.

A kind that overlaps by two alternating logins of one pair (``Capabilities.alternating``)
meets the same contract with the new credential held by the other login (the manifest line's
``alt``), each login tried by the kind's own probe."""

from __future__ import annotations

import json

import pytest

from meshtui.contracts.adapter import alternate_login
from meshtui.contracts.probe_types import Verdict
from meshtui.kinds import registry
from meshtui.provisioner.harness import inspect

from .contract import Provider, Server, outcomes


@pytest.fixture
def overlapping(provider: Provider, server: Server) -> Provider:
    if registry.can_alternate(server.kind):
        pytest.skip(
            f"{server.kind.title} holds one credential per login and overlaps by two alternating "
            "logins (their contract: the tests of `alternating` below)"
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


@pytest.fixture
def alternating(provider: Provider, server: Server) -> Provider:
    if not registry.can_alternate(server.kind):
        pytest.skip(f"{server.kind.title} does not overlap by two alternating logins")
    if server.kind.name == "postgres":
        pytest.skip(
            "PostgreSQL's alternates are roles acting as their owner, with data and sessions "
            "of their own: tests/kinds/postgres/provisioner/test_alternating.py"
        )
    return provider


def _alternate_step(provider: Provider, alt: str, *, keep: bool, rotate: bool) -> dict[str, str]:
    """One run of an alternating pair: a new secret (``rotate``) for its login ``alt``, the
    other logins kept (``keep``) or retired."""
    if rotate:
        provider.rotate("app1", "gitea")
    entry = provider.consumers["app1/gitea"]
    entry["alt"] = alt
    entry.pop("keep", None)
    if keep:
        entry["keep"] = True
    return outcomes(provider.reconcile())


def _accepted(provider: Provider, owner: str, login: str, password: str) -> bool:
    """The kind's probe with ``login`` (an alternate of ``owner``): True accepted, False
    refused by authentication; anything else fails the test."""
    verdict = provider.probe(login, password, owner=owner).verdict()
    assert verdict in (Verdict.ACCEPTED, Verdict.REFUSED), (login, verdict)
    return verdict == Verdict.ACCEPTED


def test_an_alternating_overlap_adds_the_other_login_then_retires_the_first(
    alternating: Provider,
) -> None:
    provider = alternating
    owner = provider.add("app1", "gitea")
    a, b = alternate_login(owner, "a"), alternate_login(owner, "b")
    assert _alternate_step(provider, "a", keep=False, rotate=False) == {owner: "created"}
    first = provider.password("app1", "gitea")
    assert _accepted(provider, owner, a, first)
    assert _alternate_step(provider, "a", keep=False, rotate=False) == {owner: "unchanged"}

    assert _alternate_step(provider, "b", keep=True, rotate=True) == {owner: "updated"}
    second = provider.password("app1", "gitea")
    assert _accepted(provider, owner, b, second) and _accepted(provider, owner, a, first)
    assert _alternate_step(provider, "b", keep=True, rotate=False) == {owner: "unchanged"}
    assert _accepted(provider, owner, a, first)  # a retried first step keeps the two
    assert not _accepted(provider, owner, b, first) and not _accepted(provider, owner, a, second)

    assert _alternate_step(provider, "b", keep=False, rotate=False) == {owner: "updated"}
    assert _accepted(provider, owner, b, second)
    assert not _accepted(provider, owner, a, first)
    assert _alternate_step(provider, "b", keep=False, rotate=False) == {owner: "unchanged"}

    provider.drop("app1", "gitea")
    report = provider.reconcile()
    assert outcomes(report) == {owner: "removed"}, report.lines()
    assert not _accepted(provider, owner, b, second)


def test_a_first_step_over_an_open_alternating_overlap_is_refused(alternating: Provider) -> None:
    provider = alternating
    owner = provider.add("app1", "gitea")
    a, b = alternate_login(owner, "a"), alternate_login(owner, "b")
    _alternate_step(provider, "a", keep=False, rotate=False)
    first = provider.password("app1", "gitea")
    _alternate_step(provider, "b", keep=True, rotate=True)
    second = provider.password("app1", "gitea")
    # the next overlap's first step before the last one closed: b still holds the second
    assert _alternate_step(provider, "b", keep=True, rotate=True) == {owner: "refused"}
    assert _accepted(provider, owner, a, first) and _accepted(provider, owner, b, second)


def test_a_pair_that_was_a_swap_keeps_its_login_until_the_first_overlap_closes(
    alternating: Provider,
) -> None:
    """Its login's own credential stays accepted beside its first alternate (given the same
    one): the consumer may hold either until the first overlap's last step."""
    provider = alternating
    owner = provider.add("app1", "gitea")
    provider.reconcile()
    held = provider.password("app1", "gitea")
    assert _accepted(provider, owner, owner, held)
    _alternate_step(provider, "b", keep=False, rotate=False)
    b = alternate_login(owner, "b")
    assert _accepted(provider, owner, owner, held) and _accepted(provider, owner, b, held)
    _alternate_step(provider, "a", keep=True, rotate=True)
    _alternate_step(provider, "a", keep=False, rotate=False)
    assert not _accepted(provider, owner, owner, held) and not _accepted(provider, owner, b, held)
    assert _accepted(
        provider, owner, alternate_login(owner, "a"), provider.password("app1", "gitea")
    )


def test_an_alternating_pair_inspects_as_matching_on_either_login(alternating: Provider) -> None:
    """The read-only inspection (push's drift check) of an alternating pair answers with its
    current alternate's credential: matches after each rotation, on either login, and changed
    once that alternate's credential is taken away outside meshtui."""
    provider = alternating
    owner = provider.add("app1", "gitea")

    def verdict() -> str:
        provider.serial += 1
        provider.manifest.write_text(json.dumps(provider.document()))
        (found,) = inspect(provider.manifest, provider.server.admin)
        assert found.login == owner
        return str(found.verdict)

    for alt in ("a", "b", "a"):
        _alternate_step(provider, alt, keep=True, rotate=True)
        _alternate_step(provider, alt, keep=False, rotate=False)
        assert verdict() == "matches", alt
    provider.rotate("app1", "gitea")  # the secret file holds another credential than the server
    assert verdict() == "changed"
