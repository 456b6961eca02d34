"""The controller's own config, ``<state>/controller.toml``: its name (and, beside it, the
tables other parts read). One reader, typed; a missing file is every default.

```toml
name = "ctl-a"   # this controller's name on every request, audit event and node policy
[inventory]
postgres = "/etc/meshtui/inventory.conninfo"  # a libpq conninfo file (0600); default: SQLite
[lease]          # the leader lease's numbers, in seconds (these are the defaults)
length_s = 15.0
renew_s = 5.0
deadline_s = 10.0
retry_s = 2.0
```

A file with no ``[inventory] postgres`` (nor ``MESHTUI_POSTGRES_FILE``) keeps the inventory in
SQLite; a ``[lease]`` table there says the operator meant several machines, which ``status``
and the dashboard say is not so (:attr:`ControllerConfig.alone`).

The name defaults to this machine's host name (made a controller name: lower case, other
characters as ``-``), so a one-controller mesh needs no file.
"""

from __future__ import annotations

import os
import re
import socket
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from meshtui.atomic import write_private
from meshtui.errors import InputError
from meshtui.protocol.fence import NAME

CONFIG_FILE = "controller.toml"
DEFAULT_NAME = "controller"
"""The name when the host name makes none."""
POSTGRES_ENV = "MESHTUI_POSTGRES_FILE"
"""An environment variable holding the *path* of the conninfo file (never the conninfo)."""


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
    """What ``controller.toml`` says (every field with its default when absent)."""

    name: str
    postgres: Path | None = None
    lease: LeaseConfig = field(default_factory=LeaseConfig)
    lease_declared: bool = False  # the file has a [lease] table: meant for several machines

    @property
    def alone(self) -> bool:
        """Configured for several machines (a ``[lease]`` table) but on SQLite, where no other
        controller can share the inventory: said, never silent."""
        return self.lease_declared and self.postgres is None


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
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        doc = {}
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise InputError(f"{path}: cannot be read ({exc}); fix it or remove it") from None
    name = doc.get("name")
    if name is None:
        name = host_name()
    if not isinstance(name, str) or not NAME.match(name):
        raise InputError(
            f"{path}: name = {name!r} is not a controller name (1-63 of a-z 0-9 . _ -, "
            'starting with a letter or digit); e.g. name = "ctl-a"'
        )
    table = doc.get("lease")
    return ControllerConfig(
        name=name,
        postgres=_postgres(doc, state_dir, str(path)),
        lease=_lease(table, str(path)),
        lease_declared=table is not None,
    )


def _postgres(doc: dict[str, object], state_dir: Path, where: str) -> Path | None:
    """The conninfo file ``[inventory] postgres`` (or ``MESHTUI_POSTGRES_FILE``) names, if any;
    a relative path is the state folder's."""
    inventory = doc.get("inventory", {})
    if not isinstance(inventory, dict):
        raise InputError(f"{where}: [inventory] must be a table")
    text = inventory.get("postgres") or os.environ.get(POSTGRES_ENV) or None
    if text is None:
        return None
    if not isinstance(text, str):
        raise InputError(f"{where}: inventory.postgres must be the path of a conninfo file")
    path = Path(text)
    return path if path.is_absolute() else Path(state_dir) / path


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
