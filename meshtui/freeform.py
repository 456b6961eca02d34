"""The shapes left open on purpose, named once: everything else crossing a module is typed.

A JSON object meshtui writes is ``dict[str, object]`` (a reader checks what it takes out); the
other three hold ``Any`` because what fills them is typed, or checked, somewhere else.
"""

from __future__ import annotations

from typing import Any

JsonObject = dict[str, object]
"""A JSON object whose keys are not one fixed set: a ``--json`` report, an audit event's detail.
Whoever reads a value checks its type."""

ForeignJson = dict[str, Any]  # open: a server meshtui does not own decides its shape
"""A JSON object whose shape a server meshtui does not own decides (OpenBao, SeaweedFS, Redis's
replies, ``ip -j``): what it answers, read key by key where it is used, and what is sent to it."""

LibraryKwargs = dict[str, Any]  # open: the called library's signature types each argument
"""Keyword arguments gathered for one library call (``psycopg.connect``, ``redis.Redis``,
``subprocess.run``): ``**`` hands them to a signature that types each one, which a dict of
``object`` could not be passed to."""

TomlTable = dict[str, Any]  # open: parsed TOML, before its keys are validated
"""A table as ``tomllib`` parses it, before validation: each key is checked, and its error
named, where it is read."""
