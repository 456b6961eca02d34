"""Where the operator remaps keys, and how a keymap file is read and checked.

Two files are read, the later overriding the earlier, both optional:

1. ``$XDG_CONFIG_HOME/meshtui/keymap.toml`` (``~/.config/meshtui/keymap.toml`` when unset):
   the operator's own keys, for every state folder;
2. ``<state>/tui.toml``: keys for one state folder (a shared jump host, a lab).

Both hold a ``[keymap]`` table of binding id to keys, e.g. ``rotate = "ctrl+r"`` or
``help = "question_mark,f1"``; the ids are listed by ``?`` in the dashboard. A file that cannot
be read or names an unknown id is reported in a toast and the rest still applies, so a typo can
never lock anyone out; ``ctrl+q`` always quits whatever the keymap says.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from meshtui.tui.actions import IDS

STATE_FILE = "tui.toml"
USER_FILE = Path("meshtui") / "keymap.toml"
_KEY = re.compile(r"^[A-Za-z0-9_+\-]+$")


def config_paths(state_dir: Path) -> list[Path]:
    """The keymap files in the order they apply."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return [Path(base) / USER_FILE, state_dir / STATE_FILE]


@dataclass
class KeymapLoad:
    """The merged keymap, the files it came from and what was wrong with them."""

    keymap: dict[str, str] = field(default_factory=dict)
    sources: list[Path] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def load_keymap(paths: list[Path]) -> KeymapLoad:
    """Read every existing file of ``paths``; later files override earlier ones."""
    out = KeymapLoad()
    for path in paths:
        if not path.is_file():
            continue
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            out.problems.append(f"{path}: cannot read ({exc}); its keys are ignored")
            continue
        table = data.get("keymap", {})
        if not isinstance(table, dict):
            out.problems.append(f'{path}: [keymap] must be a table of id = "keys"')
            continue
        out.sources.append(path)
        for binding_id, keys in table.items():
            problem = check_entry(binding_id, keys)
            if problem:
                out.problems.append(f"{path}: keymap.{binding_id}: {problem}")
            else:
                out.keymap[binding_id] = ",".join(k.strip() for k in keys.split(","))
    return out


def check_entry(binding_id: str, keys: object) -> str | None:
    """Why ``binding_id = keys`` cannot be used, or None."""
    if binding_id not in IDS:
        return "no such binding id (press ? for the list)"
    if not isinstance(keys, str) or not keys.strip():
        return 'keys must be a string like "ctrl+r" or "r,f2"'
    for key in (k.strip() for k in keys.split(",")):
        if not key or not _KEY.match(key):
            return f"{key!r} is not a key name (run `textual keys` to see what your terminal sends)"
    return None
