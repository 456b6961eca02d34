"""docs/reference/cli.md is written from the real parser: every command and argument has help
text, and the page in the checkout is exactly what the parser writes today."""

from __future__ import annotations

import argparse

from meshtui.cli.parser import build_parser
from tests.docs.manual import manual


def test_every_command_and_argument_has_help_text() -> None:
    missing = manual().undocumented(build_parser())
    assert not missing, f"no help text: {missing} (add help= in meshtui/cli/)"


def test_a_command_or_argument_without_help_is_found() -> None:
    parser = argparse.ArgumentParser(prog="meshtui", description="the console")
    sub = parser.add_subparsers()
    quiet = sub.add_parser("quiet")
    quiet.add_argument("--loud", help="said")
    quiet.add_argument("--mute")
    assert manual().undocumented(parser) == ["meshtui quiet", "meshtui quiet --mute"]


def test_the_reference_page_is_what_the_parser_writes() -> None:
    page = manual().CLI_PAGE
    assert page.read_text() == manual().cli_reference(build_parser()), (
        f"{page} is out of date: run .venv/bin/python scripts/manual.py cli"
    )


def test_the_reference_names_every_command_and_option() -> None:
    text = manual().CLI_PAGE.read_text()
    for words, _help, child in manual().commands(build_parser()):
        assert f"## meshtui {' '.join(words)}\n" in text
        for action in child._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert f"`{option}" in text, (words, option)
