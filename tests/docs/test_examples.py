"""Every example of the manual and the README, as Sybil finds them (tests/docs/examples.py):
each TOML block parses, each block marked runnable passes its parser; and a broken example
of each mark fails."""

from __future__ import annotations

import pytest
from sybil import Example

from tests.docs.examples import (
    check_command_lines,
    check_declaration,
    check_policy,
    command_lines,
    examples,
)

EXAMPLES = examples()


def _name(example: Example) -> str:
    return f"{example.path.rsplit('/', 1)[-1]}:{example.line}"


def test_the_manual_marks_examples_of_every_kind_runnable() -> None:
    marks = {example.parsed.how for example in EXAMPLES}
    assert {"declaration", "policy", "cli", "lab"} <= marks, marks


@pytest.mark.parametrize("example", EXAMPLES, ids=_name)
def test_example(example: Example) -> None:
    example.evaluate()


def test_a_declaration_with_a_key_it_does_not_know_fails() -> None:
    good = (
        '[modules."db1/postgres"]\nprovides = [{ name = "database", port = 5432 }]\n'
        'receives = { database = "/var/lib/meshtui/db1/mesh.json" }\n'
        'grants = { database = "/var/lib/meshtui/db1/grants" }\n'
        'admin = "/var/lib/meshtui/db1/admin.conninfo"\n'
    )
    assert check_declaration(good) is None
    said = check_declaration(good + 'colour = "blue"\n')
    assert said is not None and "colour" in said


def test_a_policy_with_an_unknown_key_or_kind_fails() -> None:
    good = 'version = 1\n[[providers]]\nunder = "/var/lib/meshtui"\nkinds = ["redis"]\n'
    assert check_policy(good) is None
    assert "colour" in str(check_policy(good + 'colour = "blue"\n'))
    assert "postgresql" in str(check_policy(good.replace("redis", "postgresql")))


def test_a_command_that_does_not_exist_fails_and_aliases_are_followed() -> None:
    block = "alias m='runuser -u meshtui -- env MESHTUI_STATE=/s /opt/meshtui/bin/meshtui'\n"
    assert list(command_lines(block + "m status --json | jq .\nuseradd meshtui\n")) == [
        ["status", "--json"]
    ]
    assert check_command_lines(block + "m status\n") is None
    assert "rotatte" in str(check_command_lines(block + "m rotatte --all\n"))
    assert "--colour" in str(check_command_lines("meshtui push --colour\n"))
