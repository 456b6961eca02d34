"""The controller's own config, ``<state>/controller.toml``: its name, where its inventory
lives, and the leader lease's numbers. Read once, into typed fields; a bad value is an
InputError naming the file, the key and what to write instead.

```toml
name = "ctl-a"                              # default: this machine's host name
[inventory]
postgres = "/etc/meshtui/inventory.conninfo"  # a libpq conninfo file (0600); default: SQLite
[lease]                                     # seconds; the defaults below
length_s = 15.0
renew_s = 5.0
deadline_s = 10.0
retry_s = 2.0
```

A file with no ``[inventory] postgres`` (nor ``MESHTUI_POSTGRES_FILE``) keeps the inventory in
SQLite, as before; a ``[lease]`` table then says the operator meant several machines, which
``status`` and the dashboard say is not so (:attr:`ControllerConfig.alone`).
"""

from __future__ import annotations

import os
import socket
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from meshtui.errors import InputError

CONFIG_FILE = "controller.toml"
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
    """What ``controller.toml`` says, with its defaults filled in."""

    name: str
    postgres: Path | None = None
    lease: LeaseConfig = field(default_factory=LeaseConfig)
    lease_declared: bool = False  # the file has a [lease] table: meant for several machines

    @property
    def alone(self) -> bool:
        """Configured for several machines (a ``[lease]`` table) but on SQLite, where no other
        controller can share the inventory: said, never silent."""
        return self.lease_declared and self.postgres is None


def _seconds(table: dict[str, object], key: str, default: float, where: str) -> float:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(f"{where}: lease.{key} must be a number of seconds, not {value!r}")
    return float(value)


def load(state_dir: Path) -> ControllerConfig:
    """The config of the controller in ``state_dir`` (defaults when the file is absent)."""
    path = Path(state_dir) / CONFIG_FILE
    where = str(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        data = {}
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{where}: cannot be read ({exc})") from exc
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{where}: not valid TOML: {exc}") from exc
    name = data.get("name", socket.gethostname())
    if not isinstance(name, str) or not name.strip():
        raise InputError(f'{where}: name must be a non-empty string (e.g. name = "ctl-a")')
    inventory = data.get("inventory", {})
    if not isinstance(inventory, dict):
        raise InputError(f"{where}: [inventory] must be a table")
    postgres_text = inventory.get("postgres") or os.environ.get(POSTGRES_ENV) or None
    if postgres_text is not None and not isinstance(postgres_text, str):
        raise InputError(f"{where}: inventory.postgres must be the path of a conninfo file")
    postgres = None
    if postgres_text:
        postgres = Path(postgres_text)
        if not postgres.is_absolute():
            postgres = Path(state_dir) / postgres
    table = data.get("lease")
    if table is not None and not isinstance(table, dict):
        raise InputError(f"{where}: [lease] must be a table")
    raw = table or {}
    unknown = sorted(set(raw) - set(LeaseConfig.__dataclass_fields__))
    if unknown:
        raise InputError(
            f"{where}: lease.{unknown[0]} is not a lease setting "
            f"(known: {', '.join(LeaseConfig.__dataclass_fields__)})"
        )
    base = LeaseConfig()
    lease = LeaseConfig(
        **{k: _seconds(raw, k, getattr(base, k), where) for k in LeaseConfig.__dataclass_fields__}
    )
    lease.check(where)
    return ControllerConfig(
        name=name.strip(), postgres=postgres, lease=lease, lease_declared=table is not None
    )
