"""The lab's controllers: the state folder's own (``ctl-a``) and, with ``lab up --controllers
N``, more beside it (``ctl-b``, ... in ``<state>/lab/controllers/NAME``), each with its own keys,
each knowing the others' public keys, all accepted by every lab node's policy."""

from __future__ import annotations

import string
from pathlib import Path

from meshtui import crypto
from meshtui.controller.config import load as load_config
from meshtui.controller.config import path_of as config_path
from meshtui.controller.config import write_name
from meshtui.controller.keys import KEY_STEM, PEERS, add_peer, write_keys_once
from meshtui.errors import LabError
from meshtui.host.policy.node_policy import ControllerKey

FOLDER = "controllers"
"""Where the lab keeps the state folders of its other controllers (in its own folder)."""
MAX = 8


def names(count: int) -> list[str]:
    """The lab's controller names: ctl-a, ctl-b, ..."""
    if not 1 <= count <= MAX:
        raise LabError(f"--controllers {count}: the lab raises 1 to {MAX} controllers")
    return [f"ctl-{letter}" for letter in string.ascii_lowercase[:count]]


def state_of(lab_folder: Path, name: str) -> Path:
    """The state folder of the lab's controller ``name`` (not the first: that is the lab's own)."""
    return lab_folder / FOLDER / name


def raised(lab_folder: Path) -> int:
    """How many controllers the lab in ``lab_folder`` was raised with: its own, and each of
    ctl-b, ctl-c... whose state folder is there (kept by ``lab down``, removed by ``--purge``)."""
    count = 1
    for name in names(MAX)[1:]:
        if not config_path(state_of(lab_folder, name)).exists():
            break
        count += 1
    return count


def make(state_dir: Path, lab_folder: Path, count: int) -> list[ControllerKey]:
    """Name the first controller (``state_dir``'s, unless its controller.toml names it), make
    the others' state folders and keys, give each the others' public keys; every controller as
    a node policy accepts it (none for a lab of one controller: its nodes pin its key, as
    ever)."""
    if count == 1:
        return []
    folders: dict[str, Path] = {}
    for n, name in enumerate(names(count)):
        folder = state_dir if n == 0 else state_of(lab_folder, name)
        if n > 0:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not config_path(folder).exists():
            write_name(folder, name)
        write_keys_once(folder)
        folders[load_config(folder).name] = folder
    for name, folder in folders.items():
        for other, theirs in folders.items():
            if other != name:
                add_peer(folder, other, theirs / f"{KEY_STEM}.pub")
    return [
        ControllerKey(name, crypto.load_public(folder / f"{KEY_STEM}.pub", need_seal=False).verify)
        for name, folder in folders.items()
    ]


def forget(state_dir: Path, lab_folder: Path) -> list[str]:
    """Before ``lab down --purge`` deletes the lab's other controllers: the state folder's own
    copy of each one's public key (``controllers/NAME.pub``, which :func:`make` put there), so
    that ``doctor`` on a later lab does not ask every node to accept a controller that is gone.
    A copy that is not that controller's key (put there by the operator) is left."""
    done = []
    for folder in sorted((lab_folder / FOLDER).glob("ctl-*")):
        kept = state_dir / PEERS / f"{folder.name}.pub"
        try:
            if kept.read_bytes() != (folder / f"{KEY_STEM}.pub").read_bytes():
                continue
        except OSError:
            continue
        kept.unlink()
        done.append(f"forgot controller {folder.name} (removed {kept})")
    return done
