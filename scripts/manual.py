"""Build and check the operator's manual (docs/, zensical.toml).

``python scripts/manual.py build``: every page under docs/ must be listed in
zensical.toml's ``nav``, then a strict Zensical build (a warning, a broken link or anchor fails).
``python scripts/manual.py cli``: write docs/reference/cli.md from meshtui's argument parser.
``python scripts/manual.py check``: fail when docs/reference/cli.md is not what ``cli`` would write.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "zensical.toml"
DOCS = ROOT / "docs"
CLI_PAGE = DOCS / "reference" / "cli.md"

EXIT_CODES = (
    ("0", "success: the work was done, or there was nothing to do"),
    ("1", "the work failed, or an alarm (a node behind, a check that found a problem)"),
    ("2", "bad input: a declaration, an argument or a file meshtui refuses, named"),
)
"""The exit codes every command shares (meshtui/cli/__init__.py maps the error tree onto them)."""


def _walk(entries: list[object]) -> Iterator[str]:
    for entry in entries:
        if isinstance(entry, str):
            yield entry
        elif isinstance(entry, dict):
            for value in entry.values():
                yield from _walk(value if isinstance(value, list) else [value])


def nav_pages(config: Path = CONFIG) -> list[str]:
    """Every page the navigation lists, as paths relative to docs/."""
    return list(_walk(tomllib.loads(config.read_text())["project"]["nav"]))


def pages_outside_nav(config: Path = CONFIG, docs: Path = DOCS) -> list[str]:
    """Pages under docs/ that no navigation entry lists (a reader could never reach them)."""
    listed = set(nav_pages(config))
    return sorted(
        str(page.relative_to(docs))
        for page in docs.rglob("*.md")
        if str(page.relative_to(docs)) not in listed
    )


def missing_pages(config: Path = CONFIG, docs: Path = DOCS) -> list[str]:
    """Navigation entries that name no page under docs/."""
    return [page for page in nav_pages(config) if not (docs / page).is_file()]


def build(project: Path | None = None) -> subprocess.CompletedProcess[str]:
    """A strict build; the finished process, its output as text. With ``project``, in that
    folder (Zensical wants the pages inside the configuration's folder): its docs/ (copied from
    the checkout's when it has none) into its site/; else the checkout's docs/ into site/."""
    zensical = Path(sys.executable).with_name("zensical")
    config = CONFIG
    if project is not None:
        if not (project / "docs").exists():
            shutil.copytree(DOCS, project / "docs")
        config = project / "zensical.toml"
        config.write_text(CONFIG.read_text())
    return subprocess.run(
        [str(zensical), "build", "--strict", "--clean", "--config-file", str(config)],
        cwd=config.parent,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "NO_COLOR": "1", "HOME": str(config.parent)},
        check=False,
    )


def _usage(parser: argparse.ArgumentParser) -> str:
    usage = parser.format_usage().strip().removeprefix("usage: ")
    return " ".join(usage.split())


def _options(parser: argparse.ArgumentParser) -> list[str]:
    lines = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction | argparse._HelpAction):
            continue
        if action.option_strings:
            name = ", ".join(action.option_strings)
            if action.nargs != 0:
                name += f" {action.metavar or action.dest.upper()}"
        else:
            name = str(action.metavar or action.dest)
        text = action.help or ""
        if action.default not in (None, False, argparse.SUPPRESS) and action.nargs != 0:
            text += f" (default: `{action.default}`)"
        cell = text.replace("|", r"\|")
        lines.append(f"| `{name}` | {cell} |")
    if not lines:
        return []
    return ["| argument | what it does |", "|---|---|", *lines, ""]


def _commands(
    parser: argparse.ArgumentParser, words: tuple[str, ...]
) -> Iterator[tuple[tuple[str, ...], str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
        for word, child in action.choices.items():
            yield (*words, word), helps.get(word, ""), child
            yield from _commands(child, (*words, word))


def commands(
    parser: argparse.ArgumentParser,
) -> list[tuple[tuple[str, ...], str, argparse.ArgumentParser]]:
    """Every command of the tree: its words, its one-line help, its parser."""
    return list(_commands(parser, ()))


def undocumented(parser: argparse.ArgumentParser) -> list[str]:
    """Each command or argument with no help text, named as a reader would type it."""
    found = []
    for words, help_text, child in [((), parser.description or "", parser), *commands(parser)]:
        name = " ".join(("meshtui", *words))
        if not help_text.strip():
            found.append(name)
        for action in child._actions:
            if isinstance(action, argparse._SubParsersAction | argparse._HelpAction):
                continue
            if not (action.help or "").strip():
                found.append(f"{name} {'/'.join(action.option_strings) or action.dest}")
    return found


def cli_reference(parser: argparse.ArgumentParser) -> str:
    """docs/reference/cli.md's text: every command, argument and the exit codes."""
    out = [
        "# Command line",
        "",
        "<!-- Written by `python scripts/manual.py cli` from meshtui/cli/parser.py: do not edit;",
        "     tests/docs/test_cli_reference.py fails when it is out of date. -->",
        "",
        parser.description or "",
        "",
        "```text",
        _usage(parser),
        "```",
        "",
        "With no command, `meshtui` opens the dashboard ([The dashboard](../dashboard.md)).",
        "",
        *_options(parser),
        "## Exit codes",
        "",
        "Every command:",
        "",
        "| code | meaning |",
        "|---|---|",
        *(f"| {code} | {meaning} |" for code, meaning in EXIT_CODES),
        "",
        "A command's own page in this manual says when it uses 1.",
        "",
    ]
    for words, help_text, child in commands(parser):
        out += [
            f"## meshtui {' '.join(words)}",
            "",
            help_text[:1].upper() + help_text[1:] + ".",
            "",
            "```text",
            _usage(child),
            "```",
            "",
            *_options(child),
        ]
    return "\n".join(out).rstrip() + "\n"


def _parser() -> argparse.ArgumentParser:
    from meshtui.cli.parser import build_parser

    return build_parser()


def main(argv: list[str] | None = None) -> int:
    """The command line of this script."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="what", required=True)
    b = sub.add_parser("build", help="check the navigation, then build strictly")
    b.add_argument("--project", type=Path, help="build a copy of docs/ in this folder instead")
    sub.add_parser("cli", help="write docs/reference/cli.md")
    sub.add_parser("check", help="fail when docs/reference/cli.md is out of date")
    args = p.parse_args(argv)
    if args.what == "cli":
        CLI_PAGE.parent.mkdir(exist_ok=True)
        CLI_PAGE.write_text(cli_reference(_parser()))
        return 0
    if args.what == "check":
        if CLI_PAGE.read_text() != cli_reference(_parser()):
            print(f"{CLI_PAGE} is out of date: run python scripts/manual.py cli", file=sys.stderr)
            return 1
        return 0
    problems = [f"{page}: not in zensical.toml's nav" for page in pages_outside_nav()]
    problems += [f"{page}: in zensical.toml's nav but not under docs/" for page in missing_pages()]
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 1
    done = build(args.project.resolve() if args.project else None)
    sys.stderr.write(done.stdout + done.stderr)
    return done.returncode


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
