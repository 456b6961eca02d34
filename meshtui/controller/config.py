"""The controller's own settings, ``<state>/controller.toml``: its name and where its inventory is.

```toml
name = "ctl-a"                       # default: this machine's host name

[inventory]
postgres = "/etc/meshtui/inventory.conninfo"   # absent: the SQLite file in the state folder

[lease]            # the leader lease's numbers, in seconds (these are the defaults)
length_s = 15.0
renew_s = 5.0
deadline_s = 10.0
retry_s = 2.0
```

A ``[lease]`` table with the inventory on SQLite says the operator meant several machines,
which ``status`` and the dashboard say is not so (:attr:`ControllerConfig.alone`).

``postgres`` names a libpq conninfo *file* (0600, this user's; relative paths are read from the
state folder); the environment variable :data:`ENV` naming such a file wins over it, for one
command. Nothing here ever holds a password. This module is the one reader and writer of the
file.
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass, field, replace
from pathlib import Path

from meshtui.atomic import write_private
from meshtui.errors import InputError
from meshtui.model import CONTROLLER_NAME_RE

CONFIG = "controller.toml"
"""The settings' file name in a state folder."""

ENV = "MESHTUI_POSTGRES_FILE"
"""Names a conninfo file (its path, never its text): this command's inventory is there."""


@dataclass(frozen=True)
class LeaseConfig:
    """The leader lease's numbers, in seconds.

    The defaults sit between the two references an operator knows: Vault's (and OpenBao's)
    PostgreSQL HA lock (TTL 15 s, renewed every 5 s, retried every 1 s) and Kubernetes'
    leader election (lease 15 s, renew deadline 10 s, retry every 2 s). A holder that has not
    renewed within ``deadline_s`` stops acting, ``length_s - deadline_s`` before anyone else may
    take over, so two controllers never believe they lead at once.
    """

    length_s: float = 15.0
    renew_s: float = 5.0
    deadline_s: float = 10.0
    retry_s: float = 2.0

    def check(self, where: str) -> None:
        """InputError naming ``where`` unless 0 < renew < deadline < length and retry > 0."""
        for key in ("length_s", "renew_s", "deadline_s", "retry_s"):
            if getattr(self, key) <= 0:
                raise InputError(f"{where}: lease.{key} must be a number of seconds above 0")
        if not self.renew_s < self.deadline_s < self.length_s:
            raise InputError(
                f"{where}: [lease] needs renew_s < deadline_s < length_s (got {self.renew_s}, "
                f"{self.deadline_s}, {self.length_s}): a holder must stop acting before its "
                "lease can be taken over, and renew before it must stop"
            )


@dataclass(frozen=True)
class ControllerConfig:
    """What ``controller.toml`` says (every field has its default when the file is absent)."""

    name: str
    postgres: Path | None = None
    """The conninfo file of a PostgreSQL inventory (None: SQLite in the state folder)."""
    lease: LeaseConfig = field(default_factory=LeaseConfig)
    lease_declared: bool = False  # the file has a [lease] table: meant for several machines

    @property
    def alone(self) -> bool:
        """Configured for several machines (a ``[lease]`` table) but on SQLite, where no other
        controller can share the inventory: said, never silent."""
        return self.lease_declared and self.postgres is None


def default_name() -> str:
    """This controller's name when none is set: the host name, made a controller name (lower
    case, other characters as ``-``; "controller" when it makes none)."""
    host = socket.gethostname().split(".")[0].lower()
    text = re.sub(r"[^a-z0-9_.-]", "-", host).strip("-")[:63]
    return text if CONTROLLER_NAME_RE.match(text) else "controller"


def path_of(state_dir: Path) -> Path:
    """Where a state folder's settings are."""
    return Path(state_dir) / CONFIG


def load(state_dir: Path) -> ControllerConfig:
    """The settings of ``state_dir``; InputError naming the file and key when one is wrong."""
    path = Path(state_dir) / CONFIG
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ControllerConfig(name=default_name())
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot be read ({exc})") from None
    import tomllib  # only where the file is: a state folder without one starts without it

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path}: not TOML ({exc})") from None
    name = data.get("name", default_name())
    if not isinstance(name, str) or not CONTROLLER_NAME_RE.match(name):
        raise InputError(
            f"{path}: name = {name!r} is not a controller name (1-63 of a-z 0-9 . _ -, "
            'starting with a letter or digit), e.g. name = "ctl-a"'
        )
    table = data.get("inventory", {})
    if not isinstance(table, dict):
        raise InputError(f"{path}: [inventory] must be a table")
    unknown = sorted(set(table) - {"postgres"})
    if unknown:
        raise InputError(f"{path}: [inventory] has no key {unknown[0]!r} (known: postgres)")
    postgres = table.get("postgres")
    if postgres is not None and (not isinstance(postgres, str) or not postgres):
        raise InputError(
            f"{path}: [inventory] postgres must name a conninfo file, "
            'e.g. postgres = "/etc/meshtui/inventory.conninfo"'
        )
    lease = data.get("lease")
    return ControllerConfig(
        name=name,
        postgres=Path(state_dir, postgres) if postgres else None,
        lease=_lease(lease, str(path)),
        lease_declared=lease is not None,
    )


def _seconds(table: dict[str, object], key: str, default: float, where: str) -> float:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(f"{where}: lease.{key} must be a number of seconds, not {value!r}")
    return float(value)


def _lease(table: object, where: str) -> LeaseConfig:
    """The ``[lease]`` table's numbers over the defaults, checked."""
    if table is not None and not isinstance(table, dict):
        raise InputError(f"{where}: [lease] must be a table")
    raw: dict[str, object] = table or {}
    known = LeaseConfig.__dataclass_fields__
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise InputError(
            f"{where}: lease.{unknown[0]} is not a lease setting (known: {', '.join(known)})"
        )
    base = LeaseConfig()
    lease = LeaseConfig(**{k: _seconds(raw, k, getattr(base, k), where) for k in known})
    lease.check(where)
    return lease


def inventory_postgres(state_dir: Path) -> Path | None:
    """The conninfo file of this command's PostgreSQL inventory: :data:`ENV`'s, else the
    settings'; None for the SQLite file in the state folder."""
    return postgres_of(None if os.environ.get(ENV) else load(state_dir))


def postgres_of(settings: ControllerConfig | None) -> Path | None:
    """:func:`inventory_postgres` for settings already read (None: not read, :data:`ENV` names
    the file): a caller that needs both reads the file once."""
    named = os.environ.get(ENV)
    if named:
        return Path(named).absolute()
    return settings.postgres if settings is not None else None


def save(state_dir: Path, config: ControllerConfig) -> Path:
    """Write ``config`` as ``state_dir``'s settings (0600), whole; the file's path."""
    lines = [f"name = {quoted(config.name)}"]
    if config.postgres is not None:
        lines += ["", "[inventory]", f"postgres = {quoted(str(config.postgres))}"]
    if config.lease_declared:
        lines += ["", "[lease]"]
        lines += [f"{k} = {getattr(config.lease, k)}" for k in LeaseConfig.__dataclass_fields__]
    path = Path(state_dir) / CONFIG
    write_private(path, ("\n".join(lines) + "\n").encode())
    return path


def write_name(state_dir: Path, name: str) -> Path:
    """Set this controller's name in ``state_dir``'s settings, keeping the rest; the file's
    path (InputError for a name that is not one)."""
    if not CONTROLLER_NAME_RE.match(name):
        raise InputError(f"controller name {name!r} is not allowed (1-63 of a-z 0-9 . _ -)")
    return save(state_dir, replace(load(state_dir), name=name))


def quoted(text: str) -> str:
    """A TOML basic string."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    if any(ord(c) < 0x20 or c == "\x7f" for c in escaped):
        raise InputError(f"{text!r}: a name or path with control characters")
    return f'"{escaped}"'
