"""Reading a record an agent persists beside its keys (``holdings.json``,
``secret-files.json``): its shape checked, and every fault a HostFileError that names the file
and says what to do, rather than an agent that silently forgets what it wrote."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import msgspec

from meshtui.errors import HostFileError

T = TypeVar("T")

Fault = Callable[[bytes, msgspec.ValidationError], str]
"""Says what is wrong with a record of the wrong shape (by default the decoder's message)."""


def read_record(
    path: Path, shape: type[T], *, what: str, advice: str, fault: Fault | None = None
) -> T | None:
    """The record at ``path`` decoded as ``shape``; None when there is no file. ``what`` names
    the record in the error ("a holdings record"), ``advice`` says what the operator does."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise HostFileError(f"{path} cannot be read ({exc.strerror}): {advice}") from exc
    try:
        return msgspec.json.decode(raw, type=shape)
    except msgspec.ValidationError as exc:
        why = fault(raw, exc) if fault else str(exc)
        raise HostFileError(f"{path} is not {what} ({why}): {advice}") from None
    except msgspec.DecodeError:
        raise HostFileError(f"{path} is not JSON: {advice}") from None
