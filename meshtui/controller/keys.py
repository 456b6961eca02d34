"""The controller's key files in its state folder: written once, read by the controller, the
lab and the CLI's ``init`` (so none of them needs the controller to make its keys). It knows
nothing of the inventory: re-signing an existing audit head with new keys is the controller's
(:func:`meshtui.controller.core.init_keys`)."""

from __future__ import annotations

from pathlib import Path

from meshtui import crypto
from meshtui.atomic import write_private

KEY_STEM = "controller"
"""The controller's key files are ``controller.key`` (private) and ``controller.pub``."""


def write_keys_once(state_dir: Path) -> tuple[Path, crypto.PrivateKeys | None]:
    """Write the controller's keys unless they exist; the .pub path, and the keys just made
    (None when they were kept)."""
    pub = state_dir / f"{KEY_STEM}.pub"
    if (state_dir / f"{KEY_STEM}.key").exists():
        keys = crypto.load_private(state_dir / f"{KEY_STEM}.key")  # refuses a world-readable key
        if not pub.exists():  # the public half can always be rebuilt from the private one
            write_private(pub, keys.public().to_toml().encode(), mode=0o644)
        return pub, None
    made = crypto.PrivateKeys.generate(node=False)
    crypto.write_keys(state_dir, KEY_STEM, made)
    return pub, made
