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
import itertools
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
    if len(value) >= _BULK and _clean_table([value]):
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
"""A list or dict this long is first checked as a table of columns (:func:`_clean_table`)."""


def _clean_table(columns: list[list[Any]]) -> bool:
    """True when nothing in ``columns`` (a long list's items, or a dict's keys and values)
    needs to change: nothing but strings without a control character, atoms, enum members,
    tuples of strings and dataclasses of these, each column of one such type (or None).

    A load's 10,000 rows were walked one dataclass at a time (~50-80 ms of CPU); here a
    dataclass column is split into its fields' columns (``map`` of a getter, in C), each
    column's types checked as a set, and every string joined and searched once. Any other
    shape, or a control character anywhere, answers False: the caller walks item by item as
    before and rebuilds what needs it.
    """
    texts: list[str] = []
    while columns:
        column = columns.pop()
        kinds = set(map(type, column))
        present = [v for v in column if v is not None] if _NONE in kinds else column
        kinds.discard(_NONE)
        inert = {k for k in kinds if k in _ATOMS or issubclass(k, Enum)}
        kinds -= inert
        if not kinds:
            continue
        if kinds == {str}:
            texts.append("".join([v for v in present if type(v) is str] if inert else present))
        elif len(kinds) > 1 or inert:
            return False
        elif tuple in kinds:
            try:
                texts.append("".join(itertools.chain.from_iterable(present)))
            except TypeError:  # not all strings
                return False
        else:
            (kind,) = kinds
            if not dataclasses.is_dataclass(kind) or issubclass(kind, str):
                return False
            columns += [
                list(map(operator.attrgetter(f.name), present)) for f in dataclasses.fields(kind)
            ]
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
    if len(value) >= _BULK and _clean_table([list(value), list(value.values())]):
        return value
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
_NONE = type(None)
"""Types a dataclass's bulk check has already looked at."""

_WALKS: dict[type, Callable[[Any], Any]] = {}
"""Per type, the function that makes its values safe (filled as types are met)."""


class Outside(Message):
    """A message carrying what a worker read: every attribute set on it is :func:`safe`."""

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, _safe(value))
