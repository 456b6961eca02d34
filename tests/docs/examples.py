"""The manual's examples as Sybil examples: every TOML block parses, and a block marked runnable
is checked by the parser it is written for.

A fenced block is marked by an HTML comment on the line before it (invisible on the site):

- ``<!-- run: declaration -->`` before a ```` ```toml ```` block: meshtui's declaration parser
  resolves it (a key the declaration does not know fails). A block with no ``[nodes]`` is a
  fragment of a larger declaration: each node its modules name is declared for it, with keys.
- ``<!-- run: policy -->`` before a ```` ```toml ```` block: a node's policy, read by the agent's
  own loader; every ``kinds`` name must be a registered kind.
- ``<!-- run: cli -->`` (or ``run: lab``) before a ```` ```sh ```` block: every ``meshtui``
  command line in it (through the block's own ``alias`` lines) is parsed by meshtui's argument
  parser. ``run: lab`` blocks are also run against a lab (tests/docs/test_examples_lab.py).
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import tempfile
import tomllib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from sybil import Document, Example, Region, Sybil
from sybil.parsers.markdown.lexers import FencedCodeBlockLexer

from tests.docs.manual import ROOT

MARK = re.compile(r"<!-- run: (?P<how>[a-z]+) -->\s*$")
LANGUAGES = ("toml", "sh")


@dataclass(frozen=True)
class Block:
    """One fenced block: its language, how it is marked to run ("" when it is not) and text."""

    language: str
    how: str
    text: str


def _mark_before(document: Document, start: int) -> str:
    before = document.text[:start].rstrip("\n").rsplit("\n", 1)[-1]
    found = MARK.match(before)
    return found["how"] if found else ""


def _blocks(document: Document) -> Iterable[Region]:
    for language in LANGUAGES:
        lexer = FencedCodeBlockLexer(language=language)
        for region in lexer(document):
            source = str(region.lexemes["source"])
            block = Block(language, _mark_before(document, region.start), source)
            yield Region(region.start, region.end, block, _evaluate)


def _evaluate(example: Example) -> str | None:
    block: Block = example.parsed
    if block.language == "toml":
        try:
            tomllib.loads(block.text)
        except tomllib.TOMLDecodeError as exc:
            return f"not valid TOML: {exc}"
        if block.how == "declaration":
            return check_declaration(block.text)
        if block.how == "policy":
            return check_policy(block.text)
    if block.language == "sh" and block.how in ("cli", "lab"):
        return check_command_lines(block.text)
    if block.how and block.how not in ("cli", "lab", "declaration", "policy"):
        return f"unknown mark run: {block.how}"
    return None


MANUAL = Sybil(parsers=[_blocks], patterns=["docs/**/*.md", "README.md"], path=str(ROOT))


def examples() -> list[Example]:
    """Every example of the manual and the README, in page order."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [example for page in pages for example in MANUAL.parse(page).examples()]


def _node_names(data: dict[str, object]) -> list[str]:
    modules = data.get("modules", {})
    assert isinstance(modules, dict)
    return sorted({key.split("/", 1)[0] for key in modules})


def check_declaration(text: str) -> str | None:
    """None when meshtui resolves ``text`` as a declaration, else the error it gives."""
    from meshtui.controller.plan.declaration import parse
    from meshtui.crypto import PrivateKeys, write_keys
    from meshtui.errors import DeclarationError

    data = tomllib.loads(text)
    with tempfile.TemporaryDirectory() as folder:
        where = Path(folder)
        if "nodes" not in data:
            text += "".join(
                f'\n[nodes.{name}]\naddress = "10.0.0.{i}"\nagent = "http://10.0.0.{i}:7700"\n'
                f'keys = "keys/{name}.pub"\n'
                for i, name in enumerate(_node_names(data), start=2)
            )
            data = tomllib.loads(text)
        for spec in data["nodes"].values():
            pub = where / spec["keys"]
            _key, written = write_keys(pub.parent, pub.stem, PrivateKeys.generate(node=True))
            assert written == pub, (written, pub)
        try:
            parse(text, where / "mesh.toml")
        except DeclarationError as exc:
            return f"the declaration parser refuses it: {exc}"
    return None


def check_policy(text: str) -> str | None:
    """None when the agent's loader reads ``text`` as a node's policy, else why not."""
    from meshtui.errors import PolicyFileError
    from meshtui.host.policy import node_policy as policy
    from meshtui.kinds import registry

    with tempfile.TemporaryDirectory() as folder:
        path = policy.write(Path(folder), text)
        path.chmod(0o600)
        try:
            loaded = policy.load(Path(folder), "node")
        except PolicyFileError as exc:
            return f"the node policy loader refuses it: {exc}"
    unknown = sorted(
        kind for root in loaded.providers for kind in root.kinds if kind not in registry.KINDS
    )
    if unknown:
        return f"kinds {unknown} are not kinds meshtui knows ({sorted(registry.KINDS)})"
    return None


def _unwrapped(words: list[str]) -> list[str]:
    """``words`` without the wrappers a command line may start with (runuser, env, sudo, ip
    netns exec), so that its program comes first."""
    while words:
        if words[0] == "runuser" and "--" in words:
            words = words[words.index("--") + 1 :]
        elif words[0] == "env":
            words = words[1:]
            while words and re.fullmatch(r"[A-Z_]+=.*", words[0]):
                words = words[1:]
        elif words[0] == "sudo":
            words = words[1:]
            while words and words[0].startswith("-"):
                words = words[1:]
        elif words[:3] == ["ip", "netns", "exec"]:
            words = words[4:]
        else:
            return words
    return words


def command_lines(text: str) -> Iterator[list[str]]:
    """The argv after ``meshtui`` of every command in a shell block, its aliases expanded."""
    aliases: dict[str, list[str]] = {}
    for line in text.replace("\\\n", " ").splitlines():
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            continue
        if words[:1] == ["alias"] and len(words) == 2 and "=" in words[1]:
            name, value = words[1].split("=", 1)
            aliases[name] = shlex.split(value)
            continue
        segment: list[str] = []
        for word in [*words, "|"]:
            if word not in ("|", "&&", "||", ";"):
                segment.append(word)
                continue
            if segment and segment[0] in aliases:
                segment = aliases[segment[0]] + segment[1:]
            program = _unwrapped(segment)
            if program and (program[0] == "meshtui" or program[0].endswith("/meshtui")):
                yield program[1:]
            segment = []


def check_command_lines(text: str) -> str | None:
    """None when meshtui's parser takes every command line of the block, else the first it
    refuses and what it said."""
    from meshtui.cli.parser import build_parser

    parser = build_parser()
    seen = 0
    for argv in command_lines(text):
        seen += 1
        said = io.StringIO()
        try:
            with contextlib.redirect_stderr(said), contextlib.redirect_stdout(io.StringIO()):
                parser.parse_args(argv)
        except SystemExit as exc:
            if exc.code not in (0, None):
                return f"meshtui {shlex.join(argv)}: {said.getvalue().strip()}"
    if not seen:
        return "marked runnable but holds no meshtui command line"
    return None
