"""The lab's TOML writer: what it writes reads back as itself, whatever is in the strings,
and the lab's declaration survives paths that pasted strings would have broken."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from meshtui.contracts.lab_server import LabProvider
from meshtui.kinds import registry
from meshtui.kinds.postgres.lab import provider_table
from meshtui.lab import mesh, toml_writer

AWKWARD = [
    "plain",
    'a "quoted" word',
    "back\\slash",
    "new\nline",
    "tab\tand\rreturn",
    "\x00\x01\x1f\x7f control",
    "ünïcødé ✓",
    "",
    "' single",
    "# not a comment",
    "[not a table]",
]


@pytest.mark.parametrize("text", AWKWARD)
def test_strings_and_keys_round_trip(text: str) -> None:
    doc = toml_writer.document(
        [
            (("modules", text or "x", "a.b"), {text or "k": text, "list": [text, {"in": text}]}),
        ]
    )
    back = tomllib.loads(doc)
    assert back["modules"][text or "x"]["a.b"] == {text or "k": text, "list": [text, {"in": text}]}


def test_values_round_trip() -> None:
    values: dict[str, toml_writer.Value] = {
        "n": 5432,
        "neg": -1,
        "f": 1.5,
        "yes": True,
        "no": False,
        "empty": [],
        "inline": {},
        "nested": [{"name": "database", "values": {"database": "gitea"}, "port": 1}],
    }
    assert tomllib.loads(toml_writer.document([(("t",), values)], comment="c"))["t"] == values


def test_non_finite_numbers_are_refused() -> None:
    with pytest.raises(ValueError):
        toml_writer.value(float("nan"))


def test_the_declaration_keeps_awkward_paths(tmp_path: Path) -> None:
    # The f-string declaration broke (or changed meaning) on a quote or a backslash in a path.
    folder = tmp_path / 'lab "one" \\ two'
    folder.mkdir()
    admin = folder / 'admin "file"'
    kind = registry.KINDS[registry.DEFAULT]
    table = provider_table(folder / "srv" / "db1" / "postgres", 5432, admin)
    path, _ = mesh._write_declaration(
        folder,
        {"db1": "10.213.0.2", "app1": "10.213.0.3"},
        {"app1": ["gitea"]},
        {kind.name: (kind, kind.lab.load(), LabProvider(table, "10.213.0.2", 5432, None))},
        provisioner=["/usr/bin/prov", 'say "{admin}"'],
        controllers=[],
    )
    doc = tomllib.loads(path.read_text())
    assert doc["nodes"]["db1"]["keys"] == str(folder / "nodes" / "db1" / "node.pub")
    pg = doc["modules"]["db1/postgres"]
    assert pg["admin"] == str(admin) and pg["provisioner"] == ["/usr/bin/prov", 'say "{admin}"']
    assert pg["provides"] == [{"name": "database", "port": 5432}] and pg["pin"] is True
    (req,) = doc["modules"]["app1/gitea"]["requires"]
    assert req == {
        "name": "database",
        "values": {"database": "gitea"},
        "file": str(folder / "srv" / "app1" / "gitea" / "db.password"),
    }
    assert path.stat().st_mode & 0o777 == 0o600
