"""The controller's key files in its state folder: written once, read by the controller, the
lab and the CLI's ``init`` (so none of them needs the controller to make its keys)."""

from __future__ import annotations

from pathlib import Path

from meshtui import crypto
from meshtui.atomic import write_private
from meshtui.inventory import Inventory

INVENTORY = "inventory.db"
"""The inventory file's name in a state folder."""
KEY_STEM = "controller"
"""The controller's key files are ``controller.key`` (private) and ``controller.pub``."""


def init_keys(state_dir: Path) -> tuple[Path, bool]:
    """Write the controller's keys once; returns the .pub path and whether it was created."""
    pub = state_dir / f"{KEY_STEM}.pub"
    if (state_dir / f"{KEY_STEM}.key").exists():
        keys = crypto.load_private(state_dir / f"{KEY_STEM}.key")  # refuses a world-readable key
        if not pub.exists():  # the public half can always be rebuilt from the private one
            write_private(pub, keys.public().to_toml().encode(), mode=0o644)
        return pub, False
    keys = crypto.PrivateKeys.generate(node=False)
    crypto.write_keys(state_dir, KEY_STEM, keys)
    if (state_dir / INVENTORY).exists():  # re-sign the audit head with the new key, on record
        with Inventory.open(state_dir / INVENTORY) as inv:
            inv.signer = keys.sign
            inv.record("init", [], {"fingerprint": keys.public().fingerprint()}, "ok")
    return pub, True
