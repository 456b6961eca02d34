"""The agent's log: one line per event on stderr, so ``journalctl -u meshtui-agent`` shows
what it did (start, where it listens, each request's kind and outcome, a consumer's reload or a
provisioner that failed). Names, kinds, counts and reasons only: never a secret, a verifier or
a request body. Control characters in outside text are shown, never obeyed.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Mapping

from meshtui import crypto
from meshtui.errors import CryptoError
from meshtui.terminal import shown

_LOCK = threading.Lock()  # one line at a time from the request threads


def say(text: str) -> None:
    """Write one line (time, then ``text``) to stderr."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    line = shown(" ".join(text.split("\n")))
    with _LOCK:
        try:
            sys.stderr.write(f"{stamp}Z meshtui agent: {line}\n")
            sys.stderr.flush()
        except (OSError, ValueError):  # no stderr (closed): the agent goes on
            pass


def request(kind: str, status: int, answer: Mapping[str, str], seconds: float) -> None:
    """One line per request: its kind, and ok or why it was refused (the answer's error, read
    from the signed reply only when it is one: a small body)."""
    took = f"{seconds * 1000:.0f} ms"
    if status == 200:
        say(f"{kind}: ok ({took})")
        return
    try:
        if "error" in answer:  # refused before anyone was known: not signed
            why = str(answer["error"])[:400]
        else:
            body = json.loads(crypto.unb64(answer["body"], "body"))
            why = str(body["payload"]["error"])[:400]
    except (KeyError, TypeError, ValueError, CryptoError):
        why = "refused"
    say(f"{kind}: {status} {why} ({took})")
