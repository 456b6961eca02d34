"""A credential file that holds the login and the password together (a *unit*), in a format
the consumer's client already reads, so an app that reads it once holds a login and the
password that goes with it, never one of each rotation.

The agent writes a unit as it writes a password alone: whole, then renamed over the old one
(one ``rename``: a reader sees the old file or the new one). The controller sends the
non-secret lines (:func:`unit_fields`); the agent adds the password it unseals
(:func:`render`) and reads it back out (:func:`password_of`). Formats:

- ``pg_service``: a libpq connection service file (``PGSERVICEFILE``, or ``servicefile=``
  with libpq 18), one section ``[meshtui]`` with ``host``, ``port``, ``dbname``, ``user``,
  ``password`` (and ``sslmode``/``sslrootcert`` with a CA). libpq reads it whole when a
  connection is opened, so ``service=meshtui`` takes the login and password of one rotation.
- ``aws``: the AWS shared credentials file (``AWS_SHARED_CREDENTIALS_FILE``): ``[default]``
  with ``aws_access_key_id`` and ``aws_secret_access_key``, as boto3, the AWS CLI and s3cmd
  read it.

Core: pure, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from meshtui.crypto import secret_digest
from meshtui.kinds.kind import Connection

PASSWORD = "password"
"""The default format: the file holds the password alone (its exact bytes, no newline)."""

SERVICE = "meshtui"
"""The section of a ``pg_service`` unit, the name an app connects with (``service=meshtui``)."""

_SECRET_KEY = {"pg_service": "password", "aws": "aws_secret_access_key"}
_SECTION = {"pg_service": SERVICE, "aws": "default"}
_SEPARATOR = {"pg_service": "=", "aws": " = "}
UNIT_FORMATS = tuple(_SECRET_KEY)
"""Every format that holds the login with the password (each kind names the ones it takes)."""


def unit_fields(shape: str, connection: Connection) -> dict[str, str]:
    """The non-secret lines of a ``shape`` unit, from a kind's connection facts."""
    if shape == "pg_service":
        return {k: v for k, v in connection.fields.items() if k != "password_file"}
    if shape == "aws":
        return {"aws_access_key_id": connection.fields["access_key"]}
    raise ValueError(f"{shape!r} is not a credential file format that holds a login")


def _line_value(key: str, value: str) -> str:
    """A value a one-line ``key=value`` file holds as it is; ValueError naming the key."""
    if not value or value != value.strip() or any(c in value for c in "\r\n\x00"):
        raise ValueError(f"{key} cannot be written on one line of a credential file")
    return value


def render(shape: str, fields: Mapping[str, str], password: bytes) -> bytes:
    """The unit's bytes: its section, ``fields``, then the password, ending in a newline;
    ValueError naming the line that cannot be written (never a byte of the password)."""
    try:
        secret = password.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("the password is not UTF-8 text") from None
    sep = _SEPARATOR[shape]
    lines = [f"[{_SECTION[shape]}]"]
    lines += [f"{k}{sep}{_line_value(k, v)}" for k, v in fields.items()]
    lines.append(f"{_SECRET_KEY[shape]}{sep}{_line_value('the password', secret)}")
    return ("\n".join(lines) + "\n").encode("utf-8")


def password_of(shape: str, data: bytes) -> bytes | None:
    """The password a ``shape`` unit holds (None: not such a unit)."""
    key = _SECRET_KEY.get(shape)
    if key is None:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    for line in text.splitlines():
        name, eq, value = line.partition("=")
        if eq and name.strip() == key:
            return value.strip().encode("utf-8")
    return None


def held_password(shape: str | None, data: bytes) -> bytes | None:
    """What a credential file of ``shape`` (None or :data:`PASSWORD`: the password alone)
    holds as the password."""
    if shape is None or shape == PASSWORD:
        return data
    return password_of(shape, data)


def unchanged(shape: str, fields: Mapping[str, str], data: bytes) -> bytes | None:
    """The password ``data`` holds when it is exactly the unit of ``fields`` (None: the file
    must be written again, its login, host or anything else changed)."""
    password = password_of(shape, data)
    if password is None:
        return None
    try:
        return password if render(shape, fields, password) == data else None
    except (ValueError, UnicodeDecodeError):
        return None


def unit_digest(shape: str, fields: Mapping[str, str]) -> str:
    """A digest of a unit's format and lines but the password: what the agent records it
    wrote, and the controller compares with what it would send (a changed login, host, port
    or format is written again without a rotation)."""
    text = json.dumps({"format": shape, "fields": dict(fields)}, sort_keys=True)
    return secret_digest(text.encode("utf-8"))
