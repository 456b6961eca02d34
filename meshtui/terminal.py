"""Text for the operator's terminal: control characters shown, never obeyed.

What the CLI prints carries text from outside: an agent's error, a provisioner's reason, a
server's message. An escape sequence in it could erase the line that says FAILED, set the
terminal's clipboard (OSC 52) or retitle the window, so every control character except a line
break and a tab is written as ``\\xNN``. The dashboard is not affected: Textual writes to the
process's original stderr, not to ``sys.stdout``/``sys.stderr``.
"""

from __future__ import annotations

import re
from typing import TextIO

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""Every control character but newline and tab (C0, DEL and C1)."""


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
