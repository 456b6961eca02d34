"""What a Redis consumer's ``values`` mean as ACL rules, checked before anything is sent.

A consumer may ask for ``keys`` (key patterns, default ``<login>:*``), ``channels`` (Pub/Sub
channel patterns, default none) and ``commands`` (ACL categories, default every category but
``@scripting``, ``@dangerous`` and ``@admin``). Patterns are separated by spaces; a pattern holding a control
character, a parenthesis, a quote or a backslash is refused, and so is a user name holding a
space, a control character, a quote or a backslash: the ACL file is one line per user,
selectors are written in parentheses, and ``CONFIG REWRITE`` writes every rule into
``redis.conf`` as it is, where the loader (``sdssplitargs``) reads quotes and backslashes as
its own syntax and an unbalanced quote stops Redis from starting at all. ``+@admin`` and ``+@dangerous`` are never granted: a mesh login that
could run ``ACL SETUSER`` could rewrite every other login. Pure functions, no I/O; the
declaration and the adapter share them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from meshtui.kinds.kind import ValuesError

KNOWN_VALUES = frozenset({"keys", "channels", "commands"})
DEFAULT_COMMANDS = ("+@all", "-@scripting", "-@dangerous", "-@admin")
"""What a consumer that names no ``commands`` may run: everything but Lua and functions
(``EVAL``, ``FUNCTION``: a server-side interpreter is the widest door into a server's own
bugs), ``@dangerous`` and ``@admin``. A consumer that needs Lua asks for ``+@scripting``."""
NEVER_GRANTED = frozenset({"admin", "dangerous", "all"})  # +@all holds both of them
ALWAYS_DENIED = ("-@dangerous", "-@admin")
_CATEGORY = re.compile(r"[+-]@[a-z][a-z0-9_-]{0,63}")
_PATTERN_BAD = re.compile(r"""[\x00-\x20\x7f()"'\\]""")
_NAME_BAD = re.compile(r"""[\x00-\x20\x7f"'\\]""")


@dataclass(frozen=True)
class Rules:
    """The root ACL rules of one login, in the order they are sent after ``reset``."""

    keys: tuple[str, ...]
    channels: tuple[str, ...]
    commands: tuple[str, ...]

    def args(self) -> list[str]:
        """``~pattern``, ``&pattern`` and category arguments for ``ACL SETUSER``."""
        return [f"~{k}" for k in self.keys] + [f"&{c}" for c in self.channels] + list(self.commands)


def name_problem(name: str) -> str | None:
    """Why Redis cannot hold ``name`` as an ACL user name, or None when it can."""
    if not name:
        return "is empty"
    if _NAME_BAD.search(name):
        return (
            "holds a space, control character, quote or backslash, which a Redis ACL user name "
            "cannot (redis.conf would not load again after CONFIG REWRITE)"
        )
    return None


def _patterns(key: str, text: str) -> tuple[str, ...]:
    items = tuple(text.split(" ")) if text else ()
    for item in items:
        if not item or _PATTERN_BAD.search(item):
            raise ValuesError(
                f"{key} = {text!r}: patterns are separated by one space and hold no control "
                "character, parenthesis, quote or backslash (Redis writes them into redis.conf "
                "as they are, and would not start again)"
            )
    return items


def _commands(text: str) -> tuple[str, ...]:
    items = tuple(text.split(" "))
    for item in items:
        if not _CATEGORY.fullmatch(item):
            raise ValuesError(
                f"commands = {text!r}: {item!r} is not an ACL category rule "
                '(write e.g. "+@read +@write -@keyspace")'
            )
        if item[0] == "+" and item[2:] in NEVER_GRANTED:
            raise ValuesError(
                f"commands = {text!r}: {item} is never granted to a mesh login "
                "(it holds ACL SETUSER, which would let it rewrite every other login)"
            )
    return items


def rules_for(login: str, values: Mapping[str, str]) -> Rules:
    """The rules ``values`` ask for; ValuesError names the value and the fix."""
    unknown = sorted(set(values) - KNOWN_VALUES)
    if unknown:
        raise ValuesError(
            f"unknown values {', '.join(unknown)} (a Redis provider knows: keys, channels, "
            "commands)"
        )
    keys = _patterns("keys", values["keys"]) if "keys" in values else (f"{login}:*",)
    channels = _patterns("channels", values["channels"]) if "channels" in values else ()
    commands = _commands(values["commands"]) if "commands" in values else DEFAULT_COMMANDS[:2]
    return Rules(keys, channels, (*commands, *ALWAYS_DENIED))


def check_values(login: str, values: Mapping[str, str]) -> None:
    """The kind's ``values`` check at ``declare``: :func:`rules_for` must find rules."""
    rules_for(login, values)
