"""The controller's own config, ``<state>/controller.toml``: its name (and, beside it, the
tables other parts read). One reader, typed; a missing file is every default.

```toml
name = "ctl-a"   # this controller's name on every request, audit event and node policy
```

The name defaults to this machine's host name (made a controller name: lower case, other
characters as ``-``), so a one-controller mesh needs no file.
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass
from pathlib import Path

from meshtui.atomic import write_private
from meshtui.errors import InputError
from meshtui.model import CONTROLLER_NAME_RE as NAME

CONFIG_FILE = "controller.toml"
DEFAULT_NAME = "controller"
"""The name when the host name makes none."""


@dataclass(frozen=True)
class ControllerConfig:
    """What ``controller.toml`` says (every field with its default when absent)."""

    name: str


def host_name() -> str:
    """This machine's host name as a controller name (DEFAULT_NAME when it makes none)."""
    text = re.sub(r"[^a-z0-9_.-]", "-", socket.gethostname().split(".")[0].lower()).strip("-")
    text = text[:63]
    return text if NAME.match(text) else DEFAULT_NAME


def path_of(state_dir: Path) -> Path:
    """Where a state folder's config lives."""
    return Path(state_dir) / CONFIG_FILE


def load(state_dir: Path) -> ControllerConfig:
    """The config of the controller whose state folder is ``state_dir``; InputError naming the
    file and the key when it cannot be read."""
    path = path_of(state_dir)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ControllerConfig(name=host_name())
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot be read ({exc}); fix it or remove it") from None
    import tomllib  # only when there is a file: a status without one stays light

    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path}: cannot be read ({exc}); fix it or remove it") from None
    name = doc.get("name", None)
    if name is None:
        return ControllerConfig(name=host_name())
    if not isinstance(name, str) or not NAME.match(name):
        raise InputError(
            f"{path}: name = {name!r} is not a controller name (1-63 of a-z 0-9 . _ -, "
            'starting with a letter or digit); e.g. name = "ctl-a"'
        )
    return ControllerConfig(name=name)


def write_name(state_dir: Path, name: str) -> Path:
    """Write ``name = NAME`` into the config (its top, before any table), keeping the rest of
    the file; InputError for a name that is not one."""
    if not NAME.match(name):
        raise InputError(f"controller name {name!r} is not allowed (1-63 of a-z 0-9 . _ -)")
    path = path_of(state_dir)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        lines = []
    top = next((i for i, line in enumerate(lines) if line.lstrip().startswith("[")), len(lines))
    head = [line for line in lines[:top] if not re.match(r"\s*name\s*=", line)]
    text = "\n".join([*head, f'name = "{name}"', *lines[top:]]) + "\n"
    write_private(path, text.encode(), mode=0o644)
    return path
