"""PostgreSQL's overlap (two alternating logins) end to end in the lab (root, namespaces, the
lab's PostgreSQL, real agents): an app in the consumer's namespace opens a new connection every
~1 ms through whole rotations, libpq taking the login and the password from the consumer's
credential file (a service file, ``format = "pg_service"``: ``service=meshtui`` with
``PGSERVICEFILE``) and never reading anything again after a refusal; it counts refusals. The
retired login is refused at the end; a controller killed between two steps leaves the pair on
one login once push recovers the journal.

The app also reads the file itself once per connection and records each login and password
it held together: a password beside another rotation's login (a *straddled* read, what an app
reading the login and the password from two files meets) counts apart, and must not happen."""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from meshtui.controller.core import Controller
from tests.fix_lab import running_lab
from tests.lab.overlap_app import Counted, declare_overlap, run_app

pytestmark = [pytest.mark.root, pytest.mark.slow]

GITEA = "database:app1/gitea->db1/postgres"

APP = r"""
import hashlib, os, sys, time
import psycopg
unit, stop = sys.argv[1:3]
os.environ["PGSERVICEFILE"] = unit

def held():
    lines = open(unit).read().splitlines()  # one read of the one file
    fields = dict(line.split("=", 1) for line in lines[1:])
    return fields["user"], hashlib.sha256(fields["password"].encode()).hexdigest()

tries = refusals = 0
seen = set()
while not os.path.exists(stop):
    seen.add(held())
    try:
        psycopg.connect("service=meshtui", connect_timeout=2).close()
    except psycopg.OperationalError as exc:
        if "password authentication failed" not in str(exc):
            raise
        refusals += 1
        print("refused", exc, file=sys.stderr)
    tries += 1
    if tries == 1:
        open(stop + ".ready", "w").close()  # connecting: the test may act
    time.sleep(0.001)
print(tries, refusals)
for user, digest in sorted(seen):
    print(user, digest)
"""


@pytest.fixture(scope="module")
def lab() -> Iterator[tuple[Path, Any, Path]]:
    kinds = {k: False for k in ("redis", "openbao", "seaweedfs")}
    with running_lab("meshtui-overlap-postgres-", kinds=kinds) as (state, built):
        declare_overlap(
            state,
            built,
            r'(file = "[^"]*/srv/app1/gitea/db\.password") }',
            r'\1, rotation = "overlap", format = "pg_service" }',
        )
        with Controller.open(state) as ctl:
            row = ctl.inventory.pairs([GITEA])[0]
        yield state, built, Path(row["file"])


def _held(unit: Path) -> tuple[str, str]:
    """The login and the password's SHA-256 the unit holds now (as the app records them)."""
    fields = dict(line.split("=", 1) for line in unit.read_text().splitlines()[1:])
    return fields["user"], hashlib.sha256(fields["password"].encode()).hexdigest()


def _count(state: Path, built: Any, unit: Path, act: Callable[[], Any], rounds: int = 1) -> Counted:
    return run_app(state, built, GITEA, APP, [str(unit)], lambda: _held(unit), act, rounds)


def test_overlaps_move_the_app_to_the_other_login_with_no_refusal_and_no_straddle(
    lab: tuple[Path, Any, Path],
) -> None:
    state, built, unit = lab
    logins = [_held(unit)[0]]

    def rotate() -> Any:
        with Controller.open(state) as ctl:
            report = ctl.rotate([GITEA])
        logins.append(_held(unit)[0])
        return report

    counted = _count(state, built, unit, rotate, rounds=5)
    for report in counted.results:
        assert report.ok, report
        (pair,) = report.pairs
        assert pair.old_after == "refused", pair
    assert all(a != b for a, b in itertools.pairwise(logins)), logins  # the other login each time
    assert counted.tries >= 20 and counted.refused == 0 and counted.straddled == 0, counted


@pytest.mark.parametrize(
    ("point", "moves"), [("overlap:consumer-holds-new", False), ("overlap:removing-old", True)]
)
def test_a_controller_killed_mid_overlap_ends_on_one_login(
    lab: tuple[Path, Any, Path], point: str, moves: bool
) -> None:
    state, built, unit = lab
    before = _held(unit)

    def die() -> None:
        raise KeyboardInterrupt(point)

    def killed_then_pushed() -> None:
        with Controller.open(state) as ctl:
            ctl.faults = {point: die}  # type: ignore[attr-defined]
            with pytest.raises(KeyboardInterrupt):
                ctl.rotate([GITEA])
        with Controller.open(state) as ctl:
            assert ctl.push().ok
            assert not ctl.inventory.open_rotations()

    counted = _count(state, built, unit, killed_then_pushed)
    assert (_held(unit) != before) is moves
    assert counted.tries >= 5 and counted.refused == 0 and counted.straddled == 0, counted
    with Controller.open(state) as ctl:
        (drilled,) = ctl.drill([GITEA])
    assert drilled.ok, (drilled.reason, drilled.steps)
