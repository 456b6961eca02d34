"""Which version of each of a module's own secrets the vault and the module's file really hold,
against the inventory's record: the truth after a restore, and after a hand-made version.

Each module's node reads, as the module (``secret-check``), the digest of its file and of the
vault's current version, with the version and digest meshtui's last store marked the KV entry
with. Per secret:

- **ahead**: the vault's current version is one meshtui stored (its digest is the marked one)
  and it is newer than the inventory's (a rotation after the backup a restore put back): it is
  adopted — version, digest and KV version — named, and audited as ``secret-ahead``;
- **outside meshtui**: the vault's current version is not the one meshtui marked (``bao kv put``
  by hand): named, recorded as the secret's error (status says stale, push fails), audited as
  ``secret-outside``, never adopted; a rotation (or a put) meshtui makes puts it right.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from meshtui.controller.act.own_secrets import (
    TIMEOUT_S,
    _reach,
    _row,
    mesh_key,
    sealed_digest_key,
)
from meshtui.controller.read.secret_states import OUTSIDE, Declared, declared
from meshtui.errors import MeshtuiError
from meshtui.inventory import Inventory
from meshtui.inventory.rows import OwnSecretRow
from meshtui.model import node_of
from meshtui.protocol.messages import (
    SECRET_CHECK,
    SecretChecked,
    SecretCheckItem,
    SecretCheckRequest,
)

if TYPE_CHECKING:
    from meshtui.controller.reach import Reach


@dataclass(frozen=True)
class VersionsReport:
    """Secrets ahead of the inventory (adopted) and secrets moved outside meshtui, with why."""

    ahead: dict[str, str] = field(default_factory=dict)
    outside: dict[str, str] = field(default_factory=dict)


def _label(d: Declared) -> str:
    return f"{d.module} {d.spec.name}"


def _remedy(d: Declared) -> str:
    verb = "put" if d.spec.supplied else "rotate"
    return f"meshtui secret {verb} {d.module} {d.spec.name}"


def read_versions(ctl: Reach) -> VersionsReport:
    """Ask each module's node what the vault's current version and its file hold, adopt what
    meshtui made and the inventory does not know, name what someone else made (see the module
    docstring). A node that does not answer changes nothing (push names it behind)."""
    inv: Inventory = ctl.inventory
    rows = inv.own_secrets()
    stored = [
        d
        for d in declared(inv)
        if d.pair is not None
        and (row := rows.get(d.key)) is not None
        and row["version"]
        and row["vault_version"] is not None
        and row["digest"]
    ]
    report = VersionsReport()
    if not stored:
        return report
    mesh = mesh_key(ctl)  # made now, on the first run after an upgrade: rows read again after
    rows, nodes, modules = inv.own_secrets(), inv.nodes(), inv.modules()
    by_node: dict[str, list[Declared]] = {}
    for d in stored:
        by_node.setdefault(node_of(d.module), []).append(d)
    requests: dict[str, SecretCheckRequest] = {}
    for node, found in by_node.items():
        items: list[SecretCheckItem] = []
        for d in found:
            assert d.pair is not None
            items.append({
                "module": d.module,
                "name": d.spec.name,
                **_reach(d.pair, nodes, modules),
                "file": d.spec.file,
                **sealed_digest_key(mesh, rows[d.key], nodes[node]),
            })  # fmt: skip
        requests[node] = {"items": items}
    with ctl.agents(timeout=TIMEOUT_S) as agents:
        answers = agents.call_many(SECRET_CHECK, requests, timeout=TIMEOUT_S)
    checked: dict[tuple[str, str], SecretChecked] = {}
    for answer in answers.values():
        if not isinstance(answer, MeshtuiError):
            checked.update({(c["module"], c["name"]): c for c in answer["checked"]})
    adopted: list[tuple[Declared, OwnSecretRow]] = []
    outside: list[tuple[Declared, OwnSecretRow]] = []
    cleared: list[OwnSecretRow] = []
    for d in stored:
        c, row = checked.get(d.key), rows[d.key]
        if c is None or c["error"] or c["vault_digest"] is None or "marked_digest" not in c:
            continue  # not known (or an agent that does not read the marks): nothing believed
        marked, kv = c.get("marked_version"), c["kv_version"]
        if c.get("marked_digest") != c["vault_digest"] or marked is None:
            why = (
                f"the vault's current version (KV {kv}) was written outside meshtui "
                f"(meshtui's is version {row['version']}, KV {row['kv_version']}); not "
                f"adopted: {_remedy(d)} makes a version meshtui knows"
            )
            report.outside[_label(d)] = why
            if row["error"] != OUTSIDE + why:
                outside.append((d, _row(d, row, error=OUTSIDE + why)))
        elif marked > row["version"]:
            held = c["file_digest"] == c["vault_digest"]
            report.ahead[_label(d)] = (
                f"the vault holds version {marked} (KV {kv})"
                + (" and so does the file" if held else "")
                + f", the inventory knew version {row['version']}: adopted"
            )
            adopted.append((
                d,
                _row(
                    d, row, version=marked, digest=c["vault_digest"], sealed=None,
                    vault_version=marked, kv_version=kv, file_version=marked if held else None,
                    error=None,
                ),
            ))  # fmt: skip
        elif (row["error"] or "").startswith(OUTSIDE):
            cleared.append(_row(d, row, error=None))
    _record(inv, adopted, outside, cleared)
    return report


def _record(
    inv: Inventory,
    adopted: Sequence[tuple[Declared, OwnSecretRow]],
    outside: Sequence[tuple[Declared, OwnSecretRow]],
    cleared: Sequence[OwnSecretRow],
) -> None:
    """The rows after :func:`read_versions`, each kind of finding one audited transaction."""
    for event, found, outcome in (
        ("secret-ahead", adopted, "ok"),
        ("secret-outside", outside, "failed"),
    ):
        if not found:
            continue
        with inv.transaction(event) as tx:
            tx.put_own_secrets([row for _, row in found])
            detail: dict[str, object] = (
                {
                    "adopted": {
                        _label(d): {"version": row["version"], "kv_version": row["kv_version"]}
                        for d, row in found
                    }
                }
                if event == "secret-ahead"
                else {"not adopted": sorted(_label(d) for d, _ in found)}
            )
            tx.audit(event, [d.pair["id"] for d, _ in found if d.pair is not None], detail, outcome)
    if cleared:
        with inv.transaction("secret-versions") as tx:
            tx.put_own_secrets(list(cleared))
