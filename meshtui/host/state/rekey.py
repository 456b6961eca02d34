"""``meshtui host rekey``: the operator's act, on the node itself, that makes it obey a new
controller key (the old one was lost with the controller's machine).

A node never takes a new controller key from the network: every request must be signed by the
key it pinned at ``host init``, and ``host init`` refuses to change an existing pin. This is
the one way: run on the node, with its agent stopped, naming the new ``controller.pub`` and
confirming (``--yes``) after checking the fingerprint. The audit head the node kept (signed by
the old key) moves into its history, so what it saw of the old chain stays on record; the
sequence numbers and generations it accepted stay as they were (a replay stays refused), and
``controller-keys.log`` beside its keys says when the pin changed, from what to what.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from meshtui import crypto
from meshtui.atomic import write_private
from meshtui.errors import InputError
from meshtui.host.state import identity
from meshtui.host.state.anchor import ANCHOR
from meshtui.host.state.guard import Accepted
from meshtui.host.state.holdings import Holdings

KEY_LOG = "controller-keys.log"
PINNED = "controller.pub"


@dataclass(frozen=True)
class Rekeyed:
    """What the re-key did: the node, the fingerprints before and after, the head kept aside."""

    node: str
    old: str
    new: str
    changed: bool
    head_kept_aside: int | None


def rekey(state_dir: Path, new_pub: Path, *, confirmed: bool) -> Rekeyed:
    """Pin ``new_pub`` on the node whose state is ``state_dir`` (see the module's docstring).

    Without ``confirmed`` nothing is written: InputError shows both fingerprints and says how
    to confirm."""
    me = identity.load(state_dir)
    new = crypto.load_public(new_pub, need_seal=False)
    old_fp, new_fp = me.controller.fingerprint(), new.fingerprint()
    if new.verify == me.controller.verify:
        return Rekeyed(me.name, old_fp, new_fp, changed=False, head_kept_aside=None)
    if not confirmed:
        raise InputError(
            f"node {me.name} pins controller key {old_fp}; {new_pub} is key {new_fp}. Check "
            "that this is your new controller's key (meshtui init printed its controller.pub; "
            "compare the fingerprint there), stop this node's agent, and run again with --yes"
        )
    accepted = Accepted(state_dir, me.name, Holdings(state_dir).listing())
    try:
        old_head = accepted.forget_head()
    finally:
        accepted.close()
    (state_dir / ANCHOR).unlink(missing_ok=True)
    write_private(state_dir / PINNED, new.to_toml().encode(), mode=0o644)
    line = f"{datetime.now(UTC).isoformat(timespec='seconds')} {old_fp} -> {new_fp} by uid {os.getuid()}\n"
    fd = os.open(state_dir / KEY_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    seq = old_head.get("seq") if old_head else None
    return Rekeyed(me.name, old_fp, new_fp, True, int(str(seq)) if seq is not None else None)
