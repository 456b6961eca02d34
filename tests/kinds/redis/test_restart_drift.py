"""A Redis restart changes no login, so it raises no "changed outside meshtui"; a real change
still does. Redis 7.0 prints a user's single-command rules (``-keys +memory|usage``) in the
order of a command table seeded anew at each start: a consumer whose categories Redis expands
into single commands (``+@read +@write``) prints differently after loading its aclfile."""

from __future__ import annotations

import pytest

from meshtui.kinds.redis.adapter import parse_line
from meshtui.model import Drift
from meshtui.provisioner.harness import inspect

from .conftest import RMesh, outcomes

EXPANDED = {"commands": "+@read +@write"}


def _line(rmesh: RMesh, login: str) -> str:
    with rmesh.redis() as admin:
        return next(str(x) for x in admin.acl_list() if str(x).startswith(f"user {login} "))


def _verdicts(rmesh: RMesh) -> dict[str, Drift]:
    return {f.login: f.verdict for f in inspect(rmesh.manifest, rmesh.admin)}


def test_a_restart_with_the_aclfile_raises_no_drift(rmesh: RMesh) -> None:
    rmesh.add("app1", "wiki", values=EXPANDED)
    rmesh.add("app2", "web")
    assert rmesh.reconcile().ok
    login = rmesh.login_of("app1", "wiki")
    first = _line(rmesh, login)
    printed = {first}
    for _ in range(4):  # each start seeds the command table anew: the order differs soon
        rmesh.server.stop()
        rmesh.server.start()
        printed.add(_line(rmesh, login))
        assert set(_verdicts(rmesh).values()) == {Drift.MATCHES}, printed
        if len(printed) > 1:
            break
    assert len(printed) > 1, "Redis printed the rules in one order every time: nothing was shown"
    report = rmesh.reconcile()
    assert set(outcomes(report).values()) == {"unchanged"}, report.lines()


@pytest.mark.parametrize(
    "change",
    [
        ("+keys",),  # one command more
        ("-get",),  # one command less
        ("resetpass", ">typed-by-hand"),  # the password
        ("~other:*",),  # a key pattern
    ],
    ids=["command-added", "command-removed", "password", "keys"],
)
def test_a_real_change_is_still_drift(rmesh: RMesh, change: tuple[str, ...]) -> None:
    rmesh.add("app1", "wiki", values=EXPANDED)
    assert rmesh.reconcile().ok
    login = rmesh.login_of("app1", "wiki")
    rmesh.server.stop()
    rmesh.server.start()
    with rmesh.redis() as admin:
        admin.execute_command("ACL", "SETUSER", login, *change)
    assert _verdicts(rmesh) == {login: Drift.CHANGED}
    report = rmesh.reconcile()
    assert outcomes(report) == {login: "updated"}, report.lines()
    assert _verdicts(rmesh) == {login: Drift.MATCHES}


def test_a_marker_over_the_printed_rules_is_kept_then_made_canonical(rmesh: RMesh) -> None:
    """A user whose marker hashed the rules as printed (before the canonical form) is intact,
    raises nothing, and the next reconcile rewrites its marker alone to the canonical hash."""
    rmesh.add("app1", "wiki", values=EXPANDED)
    assert rmesh.reconcile().ok
    login = rmesh.login_of("app1", "wiki")
    user = parse_line(_line(rmesh, login))
    assert user is not None and user.marker is not None
    assert user.printed_hash() != user.rules_hash()  # the expanded rules sort differently
    old = _line(rmesh, login).split("(", 1)[1].split(" ", 1)[0]
    printed = old.replace(f":{user.marker.rules}:", f":{user.printed_hash()}:")
    with rmesh.redis() as admin:
        admin.execute_command("ACL", "SETUSER", login, "clearselectors", f"({printed} -@all)")
    assert _verdicts(rmesh) == {login: Drift.MATCHES}
    report = rmesh.reconcile()
    assert outcomes(report) == {login: "unchanged"}, report.lines()
    again = parse_line(_line(rmesh, login))
    assert again is not None and again.marker is not None
    assert again.marker.rules == again.rules_hash() and again.passwords == user.passwords
