"""TOML text from data, for the declarations the lab writes (no string pasting).

Only what a declaration needs: ``[table]`` sections whose values are strings, integers, booleans,
arrays and inline tables. Every string and key is escaped here, so a path with a quote, a
backslash or a newline in it still reads back as itself (tests round-trip through tomllib).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence

from meshtui.contracts.lab_server import Table, Value

__all__ = ["Table", "Value", "document", "key", "string", "table", "value"]


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def key(name: str) -> str:
    """A key, bare when TOML allows it, else quoted."""
    return name if _BARE_KEY.fullmatch(name) else string(name)


def string(text: str) -> str:
    """A basic string; JSON's escapes are TOML's, and DEL (raw in JSON) is escaped too."""
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def value(v: Value) -> str:
    """One value as TOML text."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"{v!r} has no place in a declaration")
        return repr(v)
    if isinstance(v, str):
        return string(v)
    if isinstance(v, Mapping):
        inner = ", ".join(f"{key(k)} = {value(x)}" for k, x in v.items())
        return f"{{ {inner} }}" if inner else "{}"
    return "[" + ", ".join(value(x) for x in v) + "]"


def table(path: Sequence[str], values: Mapping[str, Value]) -> str:
    """``[path]`` and its keys, one a line, then a blank line."""
    lines = ["[" + ".".join(key(part) for part in path) + "]"]
    lines += [f"{key(k)} = {value(v)}" for k, v in values.items()]
    return "\n".join(lines) + "\n\n"


def document(tables: Iterable[Table], *, comment: str = "") -> str:
    """A whole TOML document: an optional ``#`` comment line, then each table in order."""
    head = f"# {comment}\n\n" if comment else ""
    return head + "".join(table(path, values) for path, values in tables)
