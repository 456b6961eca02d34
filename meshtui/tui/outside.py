"""Text from outside made safe once, where it enters the dashboard, before any widget sees it.

A reason stored in the inventory may be a server's error text (a PostgreSQL login trigger
writes what it likes), a node's answer, or a declaration's value. Rich and Textual write a
Segment's text to the terminal as it is, so an escape sequence in it would retitle the window,
set the clipboard (OSC 52) or erase the line that says FAILED. Everything the dashboard shows
reaches the UI thread in a message posted by a worker; every such message is an
:class:`Outside`, and every value set on it passes :func:`safe`, which rebuilds it with each
string's control characters written as ``\\xNN`` (:func:`meshtui.terminal.shown`). A test
fails when a message class of the dashboard is not an :class:`Outside`.
"""

from __future__ import annotations

import copy
import dataclasses
import operator
from collections.abc import Callable
from enum import Enum
from typing import Any, TypeVar, cast

from textual.message import Message

from meshtui.terminal import CONTROL as _CONTROL
from meshtui.terminal import shown

T = TypeVar("T")


def safe(value: T) -> T:
    """``value`` with every string in it (in dataclasses, tuples, lists, dicts, sets) made
    safe to show; the same object when nothing in it needed that."""
    return cast(T, _safe(value))


def _safe(value: Any) -> Any:
    kind = type(value)
    if kind is str:
        return value if _CONTROL.search(value) is None else shown(value)
    walk = _WALKS.get(kind)
    if walk is None:
        walk = _WALKS[kind] = _walk_for(kind)
    return walk(value)


def _same(value: Any) -> Any:
    return value


def _walk_for(kind: type) -> Callable[[Any], Any]:
    """How to make a value of type ``kind`` safe, decided once per type."""
    if issubclass(kind, Enum) or kind in _ATOMS:
        return _same
    if issubclass(kind, str):
        return shown
    if issubclass(kind, list):
        return _safe_list
    if issubclass(kind, tuple):
        return _safe_tuple
    if issubclass(kind, dict):
        return _safe_dict
    if issubclass(kind, set | frozenset):
        return lambda value: kind(_safe(v) for v in value)
    if dataclasses.is_dataclass(kind):
        names = tuple(f.name for f in dataclasses.fields(kind))
        fetch = operator.attrgetter(*names)
        return lambda value: _safe_dataclass(value, names, fetch)
    return _same


def _safe_list(value: list[Any]) -> list[Any]:
    if len(value) >= _BULK and _clean_records(value):
        return value
    items = [_safe(v) for v in value]
    return value if all(a is b for a, b in zip(items, value, strict=True)) else items


def _safe_tuple(value: tuple[Any, ...]) -> tuple[Any, ...]:
    try:  # the common case: a row's cells, all strings, none to change
        if _CONTROL.search("".join(value)) is None:
            return value
    except TypeError:  # not all strings
        pass
    items = [_safe(v) for v in value]
    if all(a is b for a, b in zip(items, value, strict=True)):
        return value
    return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)


_BULK = 64
"""A list this long is first tried as a table of records (:func:`_clean_records`)."""


def _clean_records(value: list[Any]) -> bool:
    """True when ``value`` is a list of one dataclass type whose fields hold only strings
    without a control character, atoms and enum members: nothing in it to change.

    A load's 10,000 status rows were walked one dataclass at a time (~50-80 ms); here each
    field is read as a column (``map`` of its getter, in C), its types checked as a set, and
    every string column joined and searched once. Any other shape, or a control character
    anywhere, answers False and the list is walked item by item as before.
    """
    kinds = set(map(type, value))
    if len(kinds) != 1:
        return False
    (kind,) = kinds
    if not dataclasses.is_dataclass(kind):
        return False
    texts: list[str] = []
    for field in dataclasses.fields(kind):
        column = list(map(operator.attrgetter(field.name), value))
        held = set(map(type, column))
        if held <= _TEXT:
            texts.append("".join(filter(None, column)))  # None (and "") left out
        elif not all(k in _ATOMS or issubclass(k, Enum) for k in held):
            return False
    return _clean("".join(texts))


def _clean(text: str) -> bool:
    """True when ``text`` holds no control character. ASCII text (knowing that is free) is
    checked by deleting every ASCII character that is not one, in C, a byte at a time: a
    fifth of the regex's time on a load's 2 MB of joined cells; anything else by the regex."""
    if text.isascii():
        return not text.encode("ascii").translate(None, _ASCII_SHOWN)
    return _CONTROL.search(text) is None


_ASCII_SHOWN = bytes(b for b in range(128) if _CONTROL.match(chr(b)) is None)
"""The ASCII characters that are not control characters (taken from the one pattern)."""


def _safe_dict(value: dict[Any, Any]) -> dict[Any, Any]:
    changed = False
    pairs = []
    for k, v in value.items():
        a, b = _safe(k), _safe(v)
        changed = changed or a is not k or b is not v
        pairs.append((a, b))
    return type(value)(pairs) if changed else value


def _safe_dataclass(value: Any, names: tuple[str, ...], fetch: Callable[[Any], Any]) -> Any:
    """A copy of the dataclass ``value`` with its fields made safe, or ``value`` itself.

    The common case (a load walks 10,000 rows) is checked in bulk: all its string fields
    joined and searched once; only a dataclass with something to change is walked field by
    field.
    """
    values = fetch(value)
    if len(names) == 1:
        values = (values,)
    if _CONTROL.search("".join([v for v in values if type(v) is str])) is None:
        inner = [(n, v) for n, v in zip(names, values, strict=True) if type(v) not in _PLAIN]
        changed = {n: new for n, v in inner if (new := _safe(v)) is not v}
    else:
        changed = {n: new for n, v in zip(names, values, strict=True) if (new := _safe(v)) is not v}
    if not changed:
        return value
    fresh = copy.copy(value)
    for name, new in changed.items():
        object.__setattr__(fresh, name, new)  # frozen dataclasses too: this copy is ours
    return fresh


_ATOMS = frozenset({int, float, bool, bytes, type(None)})
"""Types with no text in them."""
_PLAIN = _ATOMS | {str}
_TEXT = frozenset({str, type(None)})
"""Types a dataclass's bulk check has already looked at."""

_WALKS: dict[type, Callable[[Any], Any]] = {}
"""Per type, the function that makes its values safe (filled as types are met)."""


class Outside(Message):
    """A message carrying what a worker read: every attribute set on it is :func:`safe`."""

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, _safe(value))
