"""A consumer's connection file: the non-secret facts its app needs (login, host, port,
database, CA, where the password file is) in the format the ``requires`` entry declares.

The facts come from the provider's kind (:attr:`meshtui.kinds.kind.Kind.connection`); this
module only writes them out. Nothing here ever holds a password. Core: no I/O.
"""

from __future__ import annotations

import json
import re

from meshtui.kinds.kind import Connection

_ENV_PLAIN = re.compile(r"[A-Za-z0-9_./:@?=%+,-]*")


def _env_value(value: str) -> str:
    """A value for a KEY=value line: bare when safe, else double-quoted (systemd and shells
    read both)."""
    if _ENV_PLAIN.fullmatch(value):
        return value
    escaped = (
        value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$").replace("`", "\\`")
    )
    return f'"{escaped}"'


def render(connection: Connection, shape: str) -> bytes:
    """The file's bytes for ``shape`` (``env``, ``json`` or ``dsn``), ending in a newline."""
    if shape == "json":
        text = json.dumps(dict(connection.fields), indent=2)
    elif shape == "dsn":
        text = connection.dsn
    elif shape == "env":
        text = "\n".join(f"{k}={_env_value(v)}" for k, v in connection.env.items())
    else:
        raise ValueError(f"{shape!r} is not a connection file format")
    return (text + "\n").encode("utf-8")
