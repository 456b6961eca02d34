"""docs/node-allows.md names every key the agent's policy loader accepts, and only those."""

from __future__ import annotations

import re

from tests.docs.manual import ROOT

SOURCE = (ROOT / "meshtui" / "host" / "policy" / "node_policy.py").read_text()
PAGE = (ROOT / "docs" / "node-allows.md").read_text()


def _accepted() -> set[tuple[str, str]]:
    found = set()
    for table, keys in re.findall(r'entries\(doc, "(\w+)", \(([^)]*)\)\)', SOURCE):
        found |= {(table, key) for key in re.findall(r'"(\w+)"', keys)}
    commands = re.search(
        r"entries\(doc, name, \(([^)]*)\)\)\)\s*\)\s*for name in \(([^)]*)\)", SOURCE
    )
    assert commands is not None
    for table in re.findall(r'"(\w+)"', commands[2]):
        found |= {(table, key) for key in re.findall(r'"(\w+)"', commands[1])}
    return found


def test_every_key_the_loader_accepts_is_in_the_table() -> None:
    accepted = _accepted()
    assert {("credentials", "under"), ("reload", "argv"), ("provisioner", "group")} <= accepted
    documented = set(re.findall(r"^\| `\[\[(\w+)\]\]` `(\w+)`(?:, `(\w+)`)?", PAGE, flags=re.M))
    pairs = {(t, k) for t, *ks in documented for k in ks if k}
    assert accepted == pairs, (sorted(accepted - pairs), sorted(pairs - accepted))
    assert "| `version` |" in PAGE
