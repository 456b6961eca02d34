"""A node's identity: its name, its keys (0600), and the controller key it pinned at init.

``meshtui host init`` writes these once; the agent refuses to start without them. It obeys the
pinned controller key unless its policy names the controllers it accepts
(:mod:`meshtui.host.policy.controller_keys`).
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from meshtui import crypto, folders
from meshtui.atomic import write_private
from meshtui.errors import HostFileError, InputError, KeyFileError
from meshtui.model import NAME_RE

NODE_FILE = "node.toml"


@dataclass(frozen=True)
class Identity:
    """Who this agent is and whom it obeys."""

    name: str
    state_dir: Path
    keys: crypto.PrivateKeys
    controller: crypto.PublicKeys


def init(name: str, state_dir: Path, controller_pub: Path) -> tuple[Path, bool]:
    """Write ``node.key``/``node.pub`` and pin the controller key; keeps existing keys."""
    if not NAME_RE.match(name):
        raise InputError(f"node name {name!r} is not allowed (1-32 of a-z 0-9 - _)")
    controller = crypto.load_public(controller_pub, need_seal=False)
    _own_folder(state_dir, create=True)
    pub = state_dir / "node.pub"
    created = not (state_dir / "node.key").exists()
    if created:
        crypto.write_keys(state_dir, "node", crypto.PrivateKeys.generate(node=True))
    else:
        existing = _read_name(state_dir)
        if existing is not None and existing != name:
            raise InputError(
                f"{state_dir} already belongs to node {existing!r}; use another --state"
            )
        _refuse_another_pin(state_dir, controller)
    write_private(state_dir / "controller.pub", controller.to_toml().encode(), mode=0o644)
    write_private(state_dir / NODE_FILE, f'name = "{name}"\n'.encode(), mode=0o644)
    return pub, created


def _refuse_another_pin(state_dir: Path, controller: crypto.PublicKeys) -> None:
    """InputError when the node already pins another controller key: a pin changes only by
    the operator's explicit act on the node (``meshtui host rekey``)."""
    try:
        pinned = crypto.load_public(state_dir / "controller.pub", need_seal=False)
    except KeyFileError:
        return  # no pin yet (or an unreadable one): init writes it
    if pinned.verify != controller.verify:
        raise InputError(
            f"{state_dir} pins controller key {pinned.fingerprint()}, not "
            f"{controller.fingerprint()}; host init never changes a pin. If the controller's "
            "key was lost and this is its new one, stop the agent and run: meshtui host rekey "
            f"--state {state_dir} --controller NEW_CONTROLLER.pub --yes"
        )


def _read_name(state_dir: Path) -> str | None:
    try:
        return str(tomllib.loads((state_dir / NODE_FILE).read_text())["name"])
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return None


def _own_folder(state_dir: Path, *, create: bool) -> bool:
    """Check (or make) the node's state folder: a real folder of the agent's own, 0700, that
    nobody else can write, so its keys and holdings can be read and replaced by path."""
    try:
        folder = folders.open_folder(
            state_dir.absolute(), create=0o700 if create else None, own=True
        )
    except HostFileError as exc:
        raise KeyFileError(f"node state folder: {exc}") from None
    if folder is None:
        return False
    with folder:
        os.fchmod(folder.fd, 0o700)
    return True


def load(state_dir: Path) -> Identity:
    """Read an initialised node state folder."""
    if not _own_folder(state_dir, create=False):
        raise KeyFileError(f"{state_dir}: not a node state folder (run meshtui host init)")
    name = _read_name(state_dir)
    if name is None:
        raise KeyFileError(f"{state_dir}: not a node state folder (run meshtui host init)")
    return Identity(
        name=name,
        state_dir=state_dir,
        keys=crypto.load_private(state_dir / "node.key"),
        controller=crypto.load_public(state_dir / "controller.pub", need_seal=False),
    )
