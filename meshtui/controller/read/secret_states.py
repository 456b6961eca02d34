"""Where each of a module's own secrets stands: the version the mesh wants, the versions its
vault and the module's file hold, and why it is behind.

A read of the inventory only, apart from the actions in own_secrets.py (minting, sealing,
storing, delivering), so that ``meshtui status`` and the dashboard do not import the messages
and sealing those need.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime

from meshtui.controller.reports import SecretStatus
from meshtui.inventory import Inventory
from meshtui.inventory.rows import OwnSecretSpec, PairRow
from meshtui.model import KV_MOUNT, VAULT_PROVISION, format_duration

OUTSIDE = "vault: "
"""How the error of a secret whose vault's current version was written outside meshtui begins
(act/secret_versions.py records it; cleared by the next version meshtui makes)."""


@dataclass(frozen=True)
class Declared:
    """One declared own secret, with the module's vault pair (None: not resolved)."""

    module: str
    spec: OwnSecretSpec
    pair: PairRow | None

    @property
    def key(self) -> tuple[str, str]:
        return (self.module, self.spec.name)


def declared(inv: Inventory) -> list[Declared]:
    """Every declared own secret of every declared module, with its module's vault pair (the
    pairs are read only when a module declares a secret: status reads this on every refresh)."""
    specs = [
        (mid, spec)
        for mid, module in inv.modules_naming("secrets").items()
        for spec in module["spec"].secrets
    ]
    if not specs:
        return []
    pairs = [p for p in inv.pairs() if p["provision"] == VAULT_PROVISION and not p["withdrawn_at"]]
    by_consumer = {p["consumer"]: p for p in pairs}
    return [Declared(mid, spec, by_consumer.get(mid)) for mid, spec in specs]


def _since(stamp: str | None) -> float | None:
    """An inventory timestamp as epoch seconds, or None."""
    try:
        return datetime.fromisoformat(stamp).timestamp() if stamp else None
    except ValueError:
        return None


def _version(held: int | None) -> str:
    """``version 3``, or ``no version`` where nothing was read (not ``none``, which reads as a
    value)."""
    return f"version {held}" if held else "no version"


def status(inv: Inventory, at: float | None = None) -> list[SecretStatus]:
    """Every declared own secret: the version the vault and the module's file hold, and why;
    a supplied one held longer than its ``max_age`` at ``at`` (now) is overdue."""
    at = time.time() if at is None else at
    found = declared(inv)
    if not found:
        return []
    rows = inv.own_secrets()
    out: list[SecretStatus] = []
    for d in found:
        row = rows.get(d.key)
        version = row["version"] if row else 0
        vault_v = row["vault_version"] if row else None
        file_v = row["file_version"] if row else None
        error = row["error"] if row else None
        if d.pair is None:
            state, reason = "stale", f"{d.module} has no live vault pair"
        elif version == 0:
            state, reason = (
                ("stale", f"not supplied yet: meshtui secret put {d.module} {d.spec.name}")
                if d.spec.supplied
                else ("unknown", "not minted yet: meshtui push")
            )
        elif error and error.startswith(OUTSIDE):
            state, reason = "stale", error.removeprefix(OUTSIDE)
        elif vault_v == version and file_v == version and not error:
            state, reason = "working", f"version {version} in the vault and in the file"
        else:
            state = "stale"
            held = f"the vault holds {_version(vault_v)}, the file {_version(file_v)}"
            reason = f"wants version {version}; {held}" + (f"; {error}" if error else "")
        max_age = d.spec.max_age
        since = _since(row["supplied_at"]) if row and row["version"] else None
        overdue = bool(max_age and d.spec.supplied and since and at - since > max_age)
        if overdue and max_age:
            reason += (
                f"; held longer than its max_age {format_duration(max_age)}: supply a new "
                f"one with meshtui secret put {d.module} {d.spec.name}"
            )
        out.append(
            SecretStatus(
                module=d.module,
                name=d.spec.name,
                origin="supplied" if d.spec.supplied else "minted",
                pair=d.pair["id"] if d.pair else None,
                vault=d.pair["provider"] if d.pair else None,
                path=f"{KV_MOUNT}/{d.pair['login']}/{d.spec.name}" if d.pair else None,
                file=d.spec.file,
                version=version,
                vault_version=vault_v,
                file_version=file_v,
                state=state,
                reason=reason,
                supplied_by=row["supplied_by"] if row else None,
                supplied_at=row["supplied_at"] if row and row["supplied_by"] else None,
                since=row["supplied_at"] if row and row["version"] else None,
                max_age=max_age,
                overdue=overdue,
            )
        )
    return out
