"""``--notify CMD…``: run an argv (never a shell) for every alert the watch raises, with the
alert as one JSON object on stdin.

Alerts go through one worker thread in order, so a slow command never delays the watch; each
run has a timeout, and a failure is logged and otherwise ignored. An alert carries names,
states and reasons only, never a secret.
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

NOTIFY_TIMEOUT_S = 10.0
QUEUE_LIMIT = 10_000
"""More alerts than this waiting means the command cannot keep up: the newest are dropped."""


@dataclass(frozen=True)
class Alert:
    """One thing an operator should hear about: a pair's state changed, a rotation failed, or a
    pair is overdue."""

    event: str  # "state" | "rotation-failed" | "overdue" | "locked-out" | "repaired"
    pair: str
    from_: str  # the state before ("from" in the JSON)
    to: str  # the state now
    reason: str
    time: str

    def to_json(self) -> str:
        """The object written to the command's stdin."""
        body = asdict(self)
        body["from"] = body.pop("from_")
        return json.dumps(body, sort_keys=True)


Log = Callable[[str], None]


class Notifier:
    """Runs ``argv`` once per alert, in order, on a worker thread."""

    def __init__(self, argv: Sequence[str], log: Log, *, timeout: float = NOTIFY_TIMEOUT_S) -> None:
        if not argv:
            raise ValueError("--notify needs a command")
        self.argv = list(argv)
        self.log = log
        self.timeout = timeout
        self.sent = 0
        self.failed = 0
        self._queue: queue.Queue[Alert | None] = queue.Queue(QUEUE_LIMIT)
        self._thread = threading.Thread(target=self._work, name="meshtui-notify", daemon=True)
        self._thread.start()

    def __call__(self, alert: Alert) -> None:
        """Queue an alert; never blocks the watch."""
        try:
            self._queue.put_nowait(alert)
        except queue.Full:
            self.failed += 1
            self.log(f"notify: too many alerts waiting; dropped {alert.event} of {alert.pair}")

    def close(self, wait: float = 2 * NOTIFY_TIMEOUT_S) -> None:
        """Let the queued alerts run (up to ``wait`` seconds), then stop the worker."""
        try:
            self._queue.put(None, timeout=wait)
        except queue.Full:
            return
        self._thread.join(wait)

    def _work(self) -> None:
        while True:
            alert = self._queue.get()
            if alert is None:
                return
            self._run(alert)

    def _run(self, alert: Alert) -> None:
        try:
            done = subprocess.run(
                self.argv,
                input=alert.to_json().encode(),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                timeout=self.timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            self.failed += 1
            self.log(f"notify: {self.argv[0]} did not finish in {self.timeout:g} s; killed")
            return
        except OSError as exc:
            self.failed += 1
            self.log(f"notify: cannot run {self.argv[0]}: {exc.strerror}")
            return
        if done.returncode != 0:
            self.failed += 1
            tail = done.stderr.decode(errors="replace").strip().splitlines()[-1:]
            self.log(
                f"notify: {self.argv[0]} exited {done.returncode}"
                + (f": {tail[0][:200]}" if tail else "")
            )
            return
        self.sent += 1
