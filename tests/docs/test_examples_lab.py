"""The README's tour runs: every ``meshtui`` command of each block marked ``run: lab`` is run
as a whole process against a lab the fixture raises (the fixture owns the lab's life, so the
tour's ``demo`` and ``lab`` lines are left to it), and each must exit 0."""

from __future__ import annotations

import shlex

import pytest

from tests.docs.examples import command_lines, examples
from tests.fix_lab import cli, running_lab

pytestmark = [pytest.mark.root, pytest.mark.slow]

TOUR = [
    argv
    for example in examples()
    if example.parsed.how == "lab"
    for argv in command_lines(example.parsed.text)
]
OWNED_BY_THE_FIXTURE = ("demo", "lab")


def _without_state(argv: list[str]) -> list[str]:
    if "--state" in argv:
        at = argv.index("--state")
        return argv[:at] + argv[at + 2 :]
    return argv


def test_the_tour_has_commands_to_run() -> None:
    assert len([a for a in TOUR if _without_state(a)[0] not in OWNED_BY_THE_FIXTURE]) >= 5


def test_the_tour_runs_on_a_lab() -> None:
    with running_lab("meshtui-tour-") as (state, _built):
        for argv in map(_without_state, TOUR):
            if argv[0] in OWNED_BY_THE_FIXTURE:
                continue
            done = cli(state, *argv)
            assert done.returncode == 0, (
                f"meshtui {shlex.join(argv)} exited {done.returncode}:\n{done.stdout}{done.stderr}"
            )
