"""The mesh's digest key: the one secret every controller of a mesh derives each own secret's
digest key from (docs/several-controllers.md, "A module's own secrets").

It is 32 random bytes, never stored in the clear: the inventory keeps it sealed to each
controller that holds it (``digest_keys``, one row per controller, to the X25519 form of that
controller's Ed25519 key), each row signed by the controller that sealed it, so a row planted by
whoever can write the inventory but holds no controller key is refused rather than used.

- **made** by the first controller that needs it (:func:`open_key` in a writing action, when no
  controller holds one): the digests it made before (with a key derived from its own signing
  key) keep matching, because that key is kept beside each such secret, boxed under the mesh's
  key (``own_secrets.digest_key``), and used for that secret from then on;
- **shared** by a controller that holds it with every controller it knows (its own key and
  ``controllers/NAME.pub``) that has no copy yet (:func:`share`, run by every push);
- **refused** to a controller that has no copy: it says which controller it is, who holds the
  key and what to run; it never falls back to a key of its own.
"""

from __future__ import annotations

import secrets as random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from meshtui import crypto
from meshtui.controller.keys import PEERS, Keyring, keyring
from meshtui.errors import DigestKeyError, MeshtuiError
from meshtui.inventory import Inventory, now
from meshtui.inventory.rows import DigestKeyRow, OwnSecretRow

if TYPE_CHECKING:
    from meshtui.controller.reach import Reach

KEY_BYTES = 32

OWN_SECRETS = "own secrets"
"""Where a push that could not open the mesh's digest key says so, beside the pairs it pushed."""


def context(module: str, name: str) -> bytes:
    """What one own secret's digest key is derived for (and its earlier key is boxed with)."""
    return f"own-secret\0{module}\0{name}".encode()


def signed_text(controller: str, verify_key: bytes, sealed: bytes) -> bytes:
    """What the sealing controller signs for one row: to whom (name and key) and the sealed
    bytes, so a row is never moved to another controller or another key unnoticed."""
    return b"meshtui digest key\0" + controller.encode() + b"\0" + verify_key + sealed


@dataclass(frozen=True)
class MeshKey:
    """The mesh's digest key, opened: each own secret's digest key from it."""

    _root: bytes = field(repr=False)

    def of(self, row: OwnSecretRow | None, module: str, name: str) -> bytes:
        """The key of ``module``'s secret ``name``'s keyed digest: the earlier key kept in its
        row when there is one, else derived from the mesh's key (the same for every version,
        so a drill compares versions)."""
        boxed = row.get("digest_key") if row is not None else None
        if boxed:
            try:
                return crypto.box_open(self._root, bytes(boxed), context(module, name))
            except MeshtuiError as exc:
                raise DigestKeyError(
                    f"{module} secret {name}: the key its digests were made with before the "
                    f"mesh had a digest key does not open ({exc}); its record in the inventory "
                    "was changed: restore the inventory from a backup (nothing was digested)"
                ) from None
        return crypto.derive_digest_key(self._root, context(module, name))


def _row(ctl: Reach, root: bytes, name: str, verify_key: bytes) -> DigestKeyRow:
    sealed = crypto.seal_to_verify_key(root, verify_key)
    sig = ctl.keys().sign(signed_text(name, verify_key, sealed))
    return {
        "controller": name,
        "sealed": sealed,
        "sealed_by": ctl.fence.controller,
        "sig": crypto.b64(sig),
        "at": now(),
    }


def _open(ctl: Reach, row: DigestKeyRow, ring: Keyring) -> MeshKey:
    me = ctl.fence.controller
    sealer = ring.key_of(row["sealed_by"])
    if sealer is None:
        raise DigestKeyError(
            f"controller {me}: its copy of the mesh's digest key was sealed by controller "
            f"{row['sealed_by']}, whose key this controller does not know; put its "
            f"controller.pub as {ctl.state_dir / PEERS / (row['sealed_by'] + '.pub')}"
        )
    mine = ctl.keys()
    try:
        crypto.verify(
            signed_text(me, mine.public().verify, bytes(row["sealed"])),
            crypto.unb64(row["sig"], "signature"),
            sealer,
            f"controller {row['sealed_by']}",
        )
        root = mine.unseal_as_signer(bytes(row["sealed"]))
    except (MeshtuiError, ValueError) as exc:
        raise DigestKeyError(
            f"controller {me}: its copy of the mesh's digest key in the inventory is not one "
            f"a known controller sealed to it ({exc}); nothing was digested with it. Have a "
            f"controller that holds the key share it again: meshtui secret share-key {me} "
            "(when none can, this one's key having been made anew: meshtui secret share-key "
            "--anew here)"
        ) from None
    if len(root) != KEY_BYTES:
        raise DigestKeyError(f"controller {me}: its copy of the mesh's digest key is malformed")
    return MeshKey(root)


def missing(ctl: Reach, held: dict[str, DigestKeyRow]) -> DigestKeyError:
    """The error of a controller that holds no copy while others do: who, who holds it, what
    to run there."""
    me = ctl.fence.controller
    holders = ", ".join(sorted(held))
    return DigestKeyError(
        f"controller {me} holds no copy of the mesh's digest key (held by {holders}): a "
        f"module's own secrets are digested with it, and {me} would read every one as written "
        f"outside meshtui. On a controller that holds it, with {me}'s controller.pub as "
        f"controllers/{me}.pub in its state folder, run meshtui push (it shares the key) or "
        f"meshtui secret share-key {me}"
    )


def open_key(ctl: Reach, *, make: bool) -> MeshKey:
    """This controller's copy of the mesh's digest key, opened. When no controller holds one
    and ``make`` (a writing action), it is made now (see the module docstring); DigestKeyError
    when this controller holds none, never a key of its own instead."""
    inv: Inventory = ctl.inventory
    held = inv.digest_keys()
    me = ctl.fence.controller
    if me in held:
        return _open(ctl, held[me], keyring(ctl.state_dir, me))
    if held or not make:
        if not held:
            raise DigestKeyError(
                f"no controller holds the mesh's digest key yet; run meshtui push on "
                f"controller {me} to make it"
            )
        raise missing(ctl, held)
    made = _make(ctl)
    if made is None:  # another controller made it meanwhile
        return open_key(ctl, make=False)
    return made


def _make(ctl: Reach, *, anew: bool = False) -> MeshKey | None:
    """Make the mesh's digest key, sealed to this controller, keeping each keyed digest made
    before by the key this controller derived for it; None when another made one first.
    ``anew``: every copy of the old one is dropped first (see :func:`make_anew`)."""
    inv: Inventory = ctl.inventory
    keys = ctl.keys()
    root = random.token_bytes(KEY_BYTES)
    mine = _row(ctl, root, ctl.fence.controller, keys.public().verify)
    kept: list[OwnSecretRow] = []
    for (module, name), row in inv.own_secrets().items():
        digest = row["digest"] or ""
        if not anew and digest.startswith(crypto.KEYED_PREFIX) and not row.get("digest_key"):
            earlier = keys.digest_key(context(module, name))
            boxed = crypto.box_seal(root, earlier, context(module, name))
            kept.append({**row, "digest_key": boxed})
    with inv.transaction("digest-key-made") as tx:
        if anew:
            tx.drop_digest_keys()
        elif tx.has_digest_key():
            return None
        tx.put_digest_keys([mine])
        if kept:
            tx.put_own_secrets(kept)
        detail = {"controller": ctl.fence.controller, "earlier_keys_kept": len(kept)}
        tx.audit("digest-key-made", [], {**detail, "anew": anew}, "ok")
    return MeshKey(root)


def make_anew(ctl: Reach) -> MeshKey:
    """A new mesh digest key in place of one no controller can open any more (the only holder's
    key was lost and made anew): every copy of the old one is dropped, and each own secret's
    version digested with it reads as written outside meshtui until it is put or rotated."""
    made = _make(ctl, anew=True)
    assert made is not None  # anew never yields to another's key
    return made


def _sound(row: DigestKeyRow | None, name: str, verify_key: bytes, ring: Keyring) -> bool:
    """Whether ``row`` is ``name``'s copy as a known controller sealed it (its signature over
    ``name``, its key and the sealed bytes verifies): sharing to it again would change nothing."""
    if row is None:
        return False
    sealer = ring.key_of(row["sealed_by"])
    if sealer is None:
        return False
    try:
        crypto.verify(
            signed_text(name, verify_key, bytes(row["sealed"])),
            crypto.unb64(row["sig"], "signature"),
            sealer,
            f"controller {row['sealed_by']}",
        )
    except (MeshtuiError, ValueError):
        return False
    return True


def share(ctl: Reach, key: MeshKey, names: list[str] | None = None) -> list[str]:
    """Seal the mesh's digest key to every controller this one knows that has no copy (or to
    ``names``, which must be known: KeyFileError-like DigestKeyError otherwise; one whose copy
    is sound already is left as it is); audited, one
    ``digest-key-shared`` event naming them. The controllers it was sealed to."""
    inv: Inventory = ctl.inventory
    ring = keyring(ctl.state_dir, ctl.fence.controller)
    held = inv.digest_keys()
    wanted = ring.besides(held) if names is None else names
    rows: list[DigestKeyRow] = []
    for name in wanted:
        verify_key = ring.keys.get(name)
        if verify_key is None:
            raise DigestKeyError(
                f"controller {name} is not known here: put its controller.pub as "
                f"{ctl.state_dir / PEERS / (name + '.pub')} first"
            )
        if names is not None and _sound(held.get(name), name, verify_key, ring):
            continue  # named again: its copy is there, sealed by a known controller
        rows.append(_row(ctl, key._root, name, verify_key))
    if not rows:
        return []
    with inv.transaction("digest-key-shared") as tx:
        tx.put_digest_keys(rows)
        tx.audit("digest-key-shared", [], {"controllers": [r["controller"] for r in rows]}, "ok")
    return [r["controller"] for r in rows]
