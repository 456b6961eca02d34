"""The controller's key files in its state folder: written once, read by the controller, the
lab and the CLI's ``init`` (so none of them needs the controller to make its keys). It knows
nothing of the inventory: re-signing an existing audit head with new keys is the controller's
(:func:`meshtui.controller.core.init_keys`).

The other controllers of a mesh are known by their public keys only, ``controllers/NAME.pub``
in the state folder (:class:`Keyring`): an audit head another controller appended is checked
with its key."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from meshtui import crypto
from meshtui.atomic import write_private
from meshtui.errors import KeyFileError
from meshtui.model import CONTROLLER_NAME_RE as NAME

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


PEERS = "controllers"
"""The folder of the other controllers' public keys (``NAME.pub``) in a state folder."""


@dataclass(frozen=True)
class Keyring:
    """The verify keys of the controllers this one knows: its own (under its name) and the
    others' from ``controllers/NAME.pub``."""

    own: str
    keys: dict[str, bytes]

    def key_of(self, name: str | None) -> bytes | None:
        """The key of controller ``name`` (None: this one's, an event of before names); None
        when it is not known."""
        return self.keys.get(self.own if name is None else name)

    def besides(self, names: Iterable[str]) -> list[str]:
        """The controllers known here that are not among ``names``, sorted."""
        skip = set(names)
        return sorted(name for name in self.keys if name not in skip)


def keyring(state_dir: Path, own: str) -> Keyring:
    """The keys of ``state_dir``'s controller (named ``own``) and of the peers it holds;
    KeyFileError naming a peer file that cannot be read."""
    keys: dict[str, bytes] = {}
    folder = state_dir / PEERS
    if folder.is_dir():
        for pub in sorted(folder.glob("*.pub")):
            if not NAME.match(pub.stem):
                raise KeyFileError(f"{pub}: {pub.stem!r} is not a controller name")
            keys[pub.stem] = crypto.load_public(pub, need_seal=False).verify
    mine = state_dir / f"{KEY_STEM}.pub"
    if mine.exists():
        keys[own] = crypto.load_public(mine, need_seal=False).verify
    return Keyring(own, keys)


def add_peer(state_dir: Path, name: str, pub: Path) -> Path:
    """Keep controller ``name``'s public key (from ``pub``) among the peers; its path."""
    if not NAME.match(name):
        raise KeyFileError(f"controller name {name!r} is not allowed (1-63 of a-z 0-9 . _ -)")
    keys = crypto.load_public(pub, need_seal=False)
    path = state_dir / PEERS / f"{name}.pub"
    write_private(path, keys.to_toml().encode(), mode=0o644)
    return path
