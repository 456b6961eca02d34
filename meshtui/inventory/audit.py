"""The audit log's hash chain: each event's link, the signed head, and the walk that checks both.

Every event hashes the one before it, so an edit, a deletion or a reordering breaks the chain at
a named event; the head (newest number and hash) is signed by the controller key, so a chain
rewritten by someone who can write the file but holds no controller key is caught too.
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from meshtui import crypto
from meshtui.errors import CryptoError
from meshtui.inventory.rows import AuditRecord, HeadRow
from meshtui.wire import head_message

GENESIS = "0" * 64
"""The ``prev`` of the first event."""

CHAINED = ("seq", "at", "operator", "ssh_client", "kind", "pairs", "detail", "outcome")
"""The columns an event's hash covers."""


def operator() -> tuple[str, str | None]:
    """Who is acting: the OS user, and the SSH client address when there is one."""
    try:
        user = pwd.getpwuid(os.getuid()).pw_name  # not getpass: $USER is anyone's to set
    except KeyError:
        user = str(os.getuid())
    ssh = os.environ.get("SSH_CLIENT") or os.environ.get("SSH_CONNECTION")
    return user, ssh.split()[0] if ssh else None


def event_hash(prev: str, event: Mapping[str, object]) -> str:
    """The chain link: SHA-256 over the previous hash and the event's canonical JSON."""
    body = {k: event[k] for k in CHAINED}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256((prev + canonical).encode()).hexdigest()


def link(
    last: tuple[int, str] | None,
    *,
    at: str,
    user: str,
    ssh: str | None,
    kind: str,
    pairs: Iterable[str],
    detail: Mapping[str, object],
    outcome: str,
) -> AuditRecord:
    """The next event after ``last`` (its seq and hash; None for the first), hashed."""
    seq, prev = (last[0] + 1, last[1]) if last else (1, GENESIS)
    event = AuditRecord(
        seq=seq,
        at=at,
        operator=user,
        ssh_client=ssh,
        kind=kind,
        pairs=json.dumps(sorted(pairs)),
        detail=json.dumps(detail, sort_keys=True),
        outcome=outcome,
        prev=prev,
        hash="",
    )
    event["hash"] = event_hash(prev, event)
    return event


@dataclass(frozen=True)
class ChainCheck:
    """The result of verifying the audit chain: ok, how many events, the first bad one."""

    ok: bool
    events: int
    bad_seq: int | None = None
    problem: str = ""


def verify(
    events: Iterable[AuditRecord], head: HeadRow | None, verify_key: bytes | None
) -> ChainCheck:
    """Walk the stored events (in rowid order); name the first edited, deleted or reordered one.

    With the controller's ``verify_key`` the head must also carry its signature.
    """
    prev, expected_seq, count = GENESIS, 1, 0
    for row in events:
        count += 1
        if row["seq"] != expected_seq:
            why = "deleted or reordered" if row["seq"] > expected_seq else "reordered"
            return ChainCheck(
                False,
                count,
                row["seq"],
                f"expected event {expected_seq} here, found {row['seq']} ({why})",
            )
        if row["prev"] != prev:
            return ChainCheck(
                False,
                count,
                row["seq"],
                "does not link to the event before it (an event was deleted or swapped)",
            )
        if event_hash(prev, row) != row["hash"]:
            return ChainCheck(
                False, count, row["seq"], "its content was edited after it was written"
            )
        prev, expected_seq = row["hash"], expected_seq + 1
    if head is not None and (head["seq"], head["hash"]) != (expected_seq - 1, prev):
        return ChainCheck(
            False,
            count,
            head["seq"],
            "the newest events were deleted (the chain ends early)",
        )
    if head is None and count:
        return ChainCheck(False, count, None, "the chain's head record is missing")
    if head is not None and verify_key is not None:
        try:
            if not head["sig"]:
                raise CryptoError("unsigned")
            crypto.verify(
                head_message(head["seq"], head["hash"]),
                crypto.unb64(head["sig"]),
                verify_key,
                "controller",
            )
        except (CryptoError, ValueError):
            return ChainCheck(
                False,
                count,
                head["seq"],
                "the newest event is not signed by the controller key "
                "(the log was rewritten, or written without controller keys)",
            )
    return ChainCheck(True, count)
