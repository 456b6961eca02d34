"""Text for the operator's terminal: control characters shown, never obeyed.

What the CLI prints carries text from outside: an agent's error, a provisioner's reason, a
server's message. An escape sequence in it could erase the line that says FAILED, set the
terminal's clipboard (OSC 52) or retitle the window, so every control character except a line
break and a tab is written as ``\\xNN``. The dashboard is not affected: Textual writes to the
process's original stderr, not to ``sys.stdout``/``sys.stderr``.
"""

from __future__ import annotations

import re
import sys
from typing import TextIO

from meshtui.errors import InputError

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""Every control character but newline and tab (C0, DEL and C1)."""

TEXT_INSTEAD = "meshtui status, meshtui audit --list or meshtui probe, which print text"
"""What to use instead of the dashboard where no terminal is: the commands that print text."""


def not_a_terminal() -> str | None:
    """Which of stdin, stdout and stderr is not a terminal (a full-screen view needs all
    three: it reads keys, and draws), or None when each is one."""
    for name, stream in (("stdin", sys.stdin), ("stdout", sys.stdout), ("stderr", sys.stderr)):
        try:
            if stream is None or not stream.isatty():
                return name
        except (AttributeError, ValueError):  # a closed or replaced stream
            return name
    return None


def require_terminal(what: str, instead: str = TEXT_INSTEAD) -> None:
    """Refuse (InputError, exit 2, one line) to open ``what`` without a terminal: drawn into
    a pipe or a file it would never return, and nobody could read it."""
    missing = not_a_terminal()
    if missing is not None:
        raise InputError(f"{what} needs a terminal and {missing} is not one; use {instead}")


ASCII_CONTROL = bytes([*range(0x09), *range(0x0B, 0x20), 0x7F])
""":data:`CONTROL`'s ASCII part, as bytes: ASCII text (all JSON output) is checked by one
``bytes.translate``, several times faster than the regex on megabytes of ``status --json``."""


def shown(text: str) -> str:
    """``text`` with control characters (not newline or tab) written as ``\\xNN``."""
    if text.isascii():
        data = text.encode("ascii")
        if len(data.translate(None, ASCII_CONTROL)) == len(data):
            return text
    elif CONTROL.search(text) is None:
        return text
    return CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


class Shown:
    """A text stream that writes :func:`shown` text to the stream it wraps."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        """Write ``text`` with its control characters made visible."""
        self.stream.write(shown(text))
        return len(text)

    def flush(self) -> None:
        """Flush the wrapped stream."""
        self.stream.flush()

    def isatty(self) -> bool:
        """Whether the wrapped stream is a terminal."""
        return self.stream.isatty()

    def fileno(self) -> int:
        """The wrapped stream's descriptor."""
        return self.stream.fileno()
