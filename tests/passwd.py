"""Account commands for tests that make real users and groups (``useradd``, ``groupadd``,
``userdel``, ``groupdel``), retried while another process holds the account files' lock: test
workers running side by side each make their own users (named by their pid), and shadow's tools
refuse at once, rather than wait, when /etc/passwd or /etc/group is locked."""

from __future__ import annotations

import subprocess
import time

from meshtui.lab.accounts import locked

TRIES = 100


def account(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run one account command, again while the account files are locked by someone else;
    with ``check``, fail the test naming the command and its error."""
    for _ in range(TRIES):
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if not locked(done):
            break
        time.sleep(0.05)
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr}")
    return done
