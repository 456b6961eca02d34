"""Build inventories for the dashboard's tests, benchmark and screenshots through the real API.

A state folder is made the way an operator makes one: controller keys, one node identity per
node, a declaration TOML, :meth:`Controller.declare`. Then typed rows are written through the
inventory's own transaction (deliveries, probes, drills, backdated pairs), so pairs come out
working, stale, revoked or unknown without any agent running.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from meshtui.controller.core import Controller, init_keys
from meshtui.host.state.identity import init as host_init
from meshtui.inventory.rows import DeliveryRow, DrillRecord, PairRecord, ProbeRecord

FIXED_NOW = datetime(2026, 5, 4, 12, 0, 0, tzinfo=UTC)
"""The clock every builder row is stamped against, so snapshots do not drift."""


def _stamp(minutes_ago: float) -> str:
    return (FIXED_NOW - timedelta(minutes=minutes_ago)).isoformat(timespec="microseconds")


@dataclass(frozen=True)
class Built:
    """A state folder and what the builder declared in it."""

    state: Path
    declaration: Path
    pairs: list[str]


def write_declaration(
    root: Path,
    *,
    providers: int,
    consumers_per_node: int,
    consumer_nodes: int,
    requires_each: int | None = None,
) -> Path:
    """A declaration of ``providers`` postgres modules (one per db node) and consumer modules.

    Each consumer module requires ``database`` from ``requires_each`` providers (default all),
    so the pair count is consumer_nodes * consumers_per_node * requires_each.
    """
    state = root / "st"
    pub, _ = init_keys(state)
    node_names = [f"db{i + 1}" for i in range(providers)] + [
        f"app{i + 1}" for i in range(consumer_nodes)
    ]
    lines: list[str] = []
    for i, name in enumerate(node_names):
        host_init(name, root / "nodes" / name, pub)
        lines += [
            f"[nodes.{name}]",
            f'address = "10.213.{i // 250}.{i % 250 + 2}"',
            f'agent = "unix:{root}/run/{name}.sock"',
            f'keys = "nodes/{name}/node.pub"',
        ]
    for i in range(providers):
        m = f"db{i + 1}/postgres"
        lines += [
            f'[modules."{m}"]',
            'provides = [{ name = "database", port = 5432 }]',
            f'receives = {{ database = "/srv/{m}/mesh.json" }}',
            f'grants = {{ database = "/srv/{m}/grants" }}',
            f'admin = "/srv/{m}/admin.conninfo"',
        ]
    apps = ["gitea", "keycloak", "grafana", "wiki", "chat", "ci", "registry", "metrics", "mail"]
    take = providers if requires_each is None else requires_each
    for n in range(consumer_nodes):
        for k in range(consumers_per_node):
            mod = apps[k] if k < len(apps) else f"svc{k}"
            mid = f"app{n + 1}/{mod}"
            reqs = []
            for j in range(take):
                prov = f"db{(n + k + j) % providers + 1}/postgres"
                reqs.append(
                    f'{{ name = "database", values = {{ database = "{mod}" }}, '
                    f'file = "/srv/{mid}/db{j}.password", from = "{prov}" }}'
                )
            lines += [f'[modules."{mid}"]', "requires = [" + ", ".join(reqs) + "]"]
    path = root / "mesh.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def build(
    root: Path,
    *,
    providers: int = 2,
    consumers_per_node: int = 4,
    consumer_nodes: int = 2,
    requires_each: int | None = 1,
    vary: bool = True,
) -> Built:
    """Declare a mesh under ``root`` and give its pairs a mix of states (when ``vary``)."""
    decl = write_declaration(
        root,
        providers=providers,
        consumers_per_node=consumers_per_node,
        consumer_nodes=consumer_nodes,
        requires_each=requires_each,
    )
    state = root / "st"
    with Controller.open(state) as ctl:
        ctl.declare(decl)
        pairs = ctl.live_pairs()
        if vary:
            vary_states(ctl, pairs)
    return Built(state=state, declaration=decl, pairs=pairs)


def vary_states(ctl: Controller, pairs: list[str]) -> None:
    """Deliveries and probes so pairs cycle working, working, stale, unknown; with latency."""
    deliveries: list[DeliveryRow] = []
    probes: list[ProbeRecord] = []
    for i, pid in enumerate(pairs):
        kind = i % 4
        consumer_gen = 1 if kind != 2 else None
        for end, gen in (("provider", 1), ("consumer", consumer_gen)):
            deliveries.append(
                {
                    "pair": pid,
                    "end": end,
                    "generation": gen,
                    "digest": None,
                    "since": _stamp(600 + i),
                    "attempted_at": _stamp(600 + i),
                    "error": None if gen else "agent unreachable",
                }
            )
        if kind in (0, 1):
            for t in range(8):
                probes.append(
                    {
                        "pair": pid,
                        "at": _stamp(60 * (8 - t) + i % 60),
                        "generation": 1,
                        "verdict": "accepted",
                        "reason": "logged in",
                        "latency_ms": 2.0 + ((i * 7 + t * 13) % 29) / 3,
                        "used_password": 1,
                        "loopback": 0,
                        "client_addr": "10.213.0.3",
                        "control": None,
                        "withdrawn": 0,
                    }
                )
    ages = {pid: _stamp(60 * 24 * ((i * 37) % 120)) for i, pid in enumerate(pairs)}
    records = ctl.inventory.pair_records()
    backdated = [PairRecord(**(records[pid] | {"created_at": at})) for pid, at in ages.items()]
    with ctl.inventory.transaction("test rows") as tx:
        tx.put_deliveries(deliveries)
        tx.add_probes(probes)
        tx.put_pairs(backdated)


def add_drill(ctl: Controller, pid: str, *, ok: bool = True) -> None:
    """One stored drill with its three logins."""
    steps = [
        {"name": "old before", "expected": "accepted", "verdict": "accepted", "latency_ms": 3.1},
        {"name": "new after", "expected": "accepted", "verdict": "accepted", "latency_ms": 2.8},
        {
            "name": "old after",
            "expected": "refused",
            "verdict": "refused" if ok else "accepted",
            "latency_ms": 2.2,
        },
    ]
    evidence = {
        "pair": pid,
        "ok": ok,
        "steps": steps,
        "window_ms": 41.5,
        "rotation": None,
        "reason": "",
    }
    with ctl.inventory.transaction("test rows") as tx:
        tx.add_drill(
            DrillRecord(
                pair=pid,
                at=_stamp(5),
                rotation=None,
                ok=int(ok),
                window_ms=41.5,
                evidence=json.dumps(evidence),
            )
        )


def withdraw(ctl: Controller, pid: str, *, refused: bool) -> None:
    """Mark a pair withdrawn; with ``refused`` its login was seen refused, so it is revoked."""
    with ctl.inventory.transaction("test rows") as tx:
        tx.withdraw_pairs([pid], _stamp(30))
        if refused:
            tx.add_probes(
                [
                    {
                        "pair": pid,
                        "at": _stamp(20),
                        "generation": 1,
                        "verdict": "refused",
                        "reason": "28P01",
                        "latency_ms": 1.5,
                        "used_password": 1,
                        "loopback": 0,
                        "client_addr": "10.213.0.3",
                        "control": None,
                        "withdrawn": 1,
                    }
                ]
            )


def insert_raw_pair(ctl: Controller, module: str = "x[b]y") -> str:
    """A pair whose consumer module name carries markup (the declaration would refuse it)."""
    consumer = f"app1/{module}"
    pid = f"database:{consumer}->db1/postgres"
    with ctl.inventory.transaction("test rows") as tx:
        tx.put_pairs(
            [
                {
                    "id": pid,
                    "provision": "database",
                    "consumer": consumer,
                    "provider": "db1/postgres",
                    "login": "login[/]x",
                    "file": "/srv/[red]f[/red]",
                    "port": 5432,
                    "values": "{}",
                    "reload": "[]",
                    "generation": 1,
                    "created_at": _stamp(10),
                    "rotated_at": None,
                    "withdrawn_at": None,
                    "file_owner": None,
                    "file_group": None,
                    "file_mode": "0600",
                }
            ]
        )
    return pid
