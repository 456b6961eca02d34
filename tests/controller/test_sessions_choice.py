"""What a rotation does to each pair's old sessions: ``rotate --sessions`` first, else the
requirement's ``sessions``, else its provider's offer's, else ``end``; and a declaration that
names anything else is refused with the key and the fix."""

from __future__ import annotations

import pytest

from meshtui.controller.core import Controller
from meshtui.controller.plan.sessions import drain_limits, session_choices
from meshtui.errors import DeclarationError
from meshtui.model import DEFAULT_DRAIN_S, Sessions
from tests.fix_mesh import Mesh, modules

GITEA = "database:app1/gitea->db1/postgres"
WIKI = "database:app1/wiki->db1/postgres"
OTHER = "database:app2/gitea->db1/postgres"


def _declared(mesh: Mesh, offer: str | None, wiki: str | None) -> dict[str, Sessions]:
    spec = mesh.spec(modules(["app1/gitea", "app1/wiki", "app2/gitea"]))
    if offer is not None:
        spec["modules"]["db1/postgres"]["provides"][0]["sessions"] = offer
    if wiki is not None:
        spec["modules"]["app1/wiki"]["requires"][0]["sessions"] = wiki
    with Controller.open(mesh.state) as ctl:
        ctl.declare(mesh.write(spec))
        return session_choices(ctl.inventory, ctl.inventory.pairs())


def test_a_leak_is_the_default_every_old_session_ends(mesh: Mesh) -> None:
    assert set(_declared(mesh, None, None).values()) == {Sessions.END}


def test_the_requirement_says_before_its_provider_and_the_command_before_both(
    mesh: Mesh,
) -> None:
    chosen = _declared(mesh, "drain", "end")
    assert chosen == {GITEA: Sessions.DRAIN, WIKI: Sessions.END, OTHER: Sessions.DRAIN}
    with Controller.open(mesh.state) as ctl:
        asked = session_choices(ctl.inventory, ctl.inventory.pairs(), Sessions.END)
    assert set(asked.values()) == {Sessions.END}


@pytest.mark.parametrize("where", ["offer", "requirement"])
def test_a_choice_that_is_not_one_is_refused_naming_the_key(mesh: Mesh, where: str) -> None:
    with pytest.raises(DeclarationError) as caught:
        _declared(mesh, "kill" if where == "offer" else None, "kill" if where != "offer" else None)
    text = str(caught.value)
    assert ".sessions" in text and '"end"' in text and '"drain"' in text, text


def test_a_declared_provisioner_command_is_asked_only_when_someone_chose(mesh: Mesh) -> None:
    """A provider whose provisioner is a declared command cannot be asked to end sessions: the
    default leaves its pairs unasked (no rotation of theirs fails for a choice nobody made),
    while a declared or commanded choice is still asked (and fails there, truthfully)."""
    spec = mesh.spec(modules(["app1/gitea", "app1/wiki"]))
    spec["modules"]["db1/postgres"]["provisioner"] = ["/usr/local/bin/provision-mydb"]
    with Controller.open(mesh.state) as ctl:
        ctl.declare(mesh.write(spec))
        pairs = ctl.inventory.pairs()
        assert session_choices(ctl.inventory, pairs) == {}
        assert set(session_choices(ctl.inventory, pairs, Sessions.END).values()) == {Sessions.END}
    spec["modules"]["app1/wiki"]["requires"][0]["sessions"] = "end"
    with Controller.open(mesh.state) as ctl:
        ctl.declare(mesh.write(spec))
        assert session_choices(ctl.inventory, ctl.inventory.pairs()) == {WIKI: Sessions.END}


def test_a_drain_lasts_as_the_requirement_says_else_its_offer_else_the_default(
    mesh: Mesh,
) -> None:
    spec = mesh.spec(modules(["app1/gitea", "app1/wiki", "app2/gitea"]))
    spec["modules"]["db1/postgres"]["provides"][0]["drain"] = "10m"
    spec["modules"]["app1/wiki"]["requires"][0]["drain"] = "30s"
    with Controller.open(mesh.state) as ctl:
        ctl.declare(mesh.write(spec))
        pairs = ctl.inventory.pairs()
        drained = {p["id"]: Sessions.DRAIN for p in pairs}
        assert drain_limits(ctl.inventory, pairs, drained) == {
            GITEA: 600.0,
            WIKI: 30.0,
            OTHER: 600.0,
        }
        ended = {GITEA: Sessions.END, WIKI: Sessions.DRAIN}  # only what drains has a limit
        assert drain_limits(ctl.inventory, pairs, ended) == {WIKI: 30.0}
    del spec["modules"]["db1/postgres"]["provides"][0]["drain"]
    with Controller.open(mesh.state) as ctl:
        ctl.declare(mesh.write(spec))
        limits = drain_limits(ctl.inventory, ctl.inventory.pairs(), drained)
    assert limits[GITEA] == DEFAULT_DRAIN_S and limits[WIKI] == 30.0


@pytest.mark.parametrize("said", ["soon", "0s", 10])
def test_a_drain_that_is_not_a_duration_is_refused_naming_the_key(mesh: Mesh, said: object) -> None:
    spec = mesh.spec(modules(["app1/gitea"]))
    spec["modules"]["app1/gitea"]["requires"][0]["drain"] = said
    with pytest.raises(DeclarationError) as caught, Controller.open(mesh.state) as ctl:
        ctl.declare(mesh.write(spec))
    text = str(caught.value)
    assert "requires[0].drain" in text and 'drain = "10m"' in text, text
