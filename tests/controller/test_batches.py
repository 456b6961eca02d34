"""A rotation larger than a batch (``sending.BATCH``, lowered here to one pair) is built from
its journal and sent a batch of nodes at a time, with real agents and a real PostgreSQL: every
provider applies before any consumer is sent anything, each end ends up holding the new
credential, and an end that fails in a later batch still rolls back every pair, the ones
already delivered in an earlier batch included (all-or-nothing is kept by the batches). A push
sends its manifests and credentials in batches too."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from meshtui.controller.act import sending
from meshtui.controller.agents.client import Agents
from tests.controller.test_rotate import GITEA, OTHER, WIKI, can_login, login_of, refused

FILES = {
    GITEA: ("srv/app1/gitea/db.password", "gitea_app1"),
    WIKI: ("srv/app1/wiki/db.password", "wiki_app1"),
    OTHER: ("srv/app2/grafana/db.password", "grafana_app2"),
}


@pytest.fixture
def mesh(mesh_with_agents, pg, pg_clean, pg_admin_file, monkeypatch):
    m = mesh_with_agents(
        consumers={"app1": ["gitea", "wiki"], "app2": ["grafana"]},
        port=pg.port,
        admin=pg_admin_file,
    )
    with m.controller() as ctl:
        assert ctl.push().ok
    monkeypatch.setattr(sending, "BATCH", 1)  # three pairs: the batched path, app1 then app2
    return m


@pytest.fixture
def sent(monkeypatch) -> list[tuple[str, list[str]]]:
    """Every deliver and prepare the controller sends, in order: (kind and end, nodes)."""
    seen: list[tuple[str, list[str]]] = []
    real, begun = Agents.call_many, Agents.begin_many

    def note(kind: Any, payloads: Any) -> None:
        if kind.name in ("deliver", "prepare"):
            end = "provider" if any("provider" in p for p in payloads.values()) else "consumer"
            seen.append((f"{kind.name} {end}", sorted(payloads)))

    def call_many(self: Agents, kind: Any, payloads: Any, **kw: Any) -> Any:
        if len(payloads) != 1:  # more than one: sent through begin_many, noted there
            return real(self, kind, payloads, **kw)
        note(kind, payloads)
        return real(self, kind, payloads, **kw)

    def begin_many(self: Agents, kind: Any, payloads: Any, **kw: Any) -> Any:
        note(kind, payloads)  # sent now (a large rotation's provider batch, on its way)
        return begun(self, kind, payloads, **kw)

    monkeypatch.setattr(Agents, "call_many", call_many)
    monkeypatch.setattr(Agents, "begin_many", begin_many)
    return seen


def test_a_first_push_in_batches_delivers_every_end(mesh_with_agents, pg, pg_clean,
                                                    pg_admin_file, monkeypatch, sent):  # fmt: skip
    m = mesh_with_agents(
        consumers={"app1": ["gitea", "wiki"], "app2": ["grafana"]},
        port=pg.port,
        admin=pg_admin_file,
    )
    monkeypatch.setattr(sending, "BATCH", 1)
    with m.controller() as ctl:
        report = ctl.push()
        assert report.ok, report.behind
        rows = {r.pair: r for r in ctl.status()}
    assert [what for what in sent if what[0] == "deliver consumer"] == [
        ("deliver consumer", ["app1"]),
        ("deliver consumer", ["app2"]),
    ]
    assert sent.index(("deliver provider", ["db1"])) == 0
    for pid, (rel, db) in FILES.items():
        assert (rows[pid].consumer_generation, rows[pid].provider_generation) == (1, 1)
        assert can_login(pg, login_of(m, pid), m.secret(rel), db) is True


def test_batches_are_whole_nodes_of_at_most_the_limit_a_larger_node_alone() -> None:
    assert sending.batches({"d": 5, "b": 1, "a": 3, "c": 1}, 2) == [["a"], ["b", "c"], ["d"]]
    assert sending.batches({}, 2) == []
    pairs = [f"database:n{n}/m{i}->db0/postgres" for n in (2, 1, 3) for i in range(n)]
    got = sending.node_batches(pairs, lambda pid: pid.split(":")[1].split("/")[0], 3)
    assert got == [sorted(p for p in pairs if "n1/" in p or "n2/" in p),
                   sorted(p for p in pairs if "n3/" in p)]  # fmt: skip
    assert sorted(p for batch in got for p in batch) == sorted(pairs)


def secrets_of(mesh) -> dict[str, str]:
    return {pid: mesh.secret(rel) for pid, (rel, _) in FILES.items()}


def test_a_large_rotation_is_sent_in_batches_providers_first_and_every_end_holds_it(mesh, pg, sent):
    old = secrets_of(mesh)
    with mesh.controller() as ctl:
        report = ctl.rotate([GITEA, WIKI, OTHER])
        assert report.outcome == "done", report.reason
        rows = {r.pair: r for r in ctl.status()}
    # nothing built ahead (no prepare); db1 first, then one batch per consumer node
    assert sent == [
        ("deliver provider", ["db1"]),
        ("deliver consumer", ["app1"]),
        ("deliver consumer", ["app2"]),
    ]
    new = secrets_of(mesh)
    for pid, (_, db) in FILES.items():
        row = rows[pid]
        assert (row.generation, row.consumer_generation, row.provider_generation) == (2, 2, 2)
        assert new[pid] != old[pid]
        assert can_login(pg, login_of(mesh, pid), new[pid], db) is True
        assert refused(can_login(pg, login_of(mesh, pid), old[pid], db))
    result = mesh.cli("push")  # the deltas left the manifest as a whole delivery writes it
    assert result.returncode == 0, result.stdout + result.stderr
    assert "every end already holds its generation" in result.stdout


def test_an_end_failing_in_a_later_batch_rolls_back_the_pairs_of_earlier_batches(mesh, pg):
    old = secrets_of(mesh)
    with mesh.controller() as ctl:
        # app1's batch is delivered (its files hold generation 2), then app2 goes down
        ctl.faults["after-consumer-batch:to"] = lambda: mesh.stop("app2", signal.SIGKILL)
        report = ctl.rotate([GITEA, WIKI, OTHER])
        assert report.outcome in ("rolled back", "converging")
        assert "app2" in report.reason
        rows = {r.pair: r for r in ctl.status()}
    assert all(rows[pid].generation == 1 for pid in FILES)
    # app1 was rolled back: its files hold the old credential again, which the provider takes
    for pid in (GITEA, WIKI):
        assert mesh.secret(FILES[pid][0]) == old[pid]
        assert can_login(pg, login_of(mesh, pid), old[pid], FILES[pid][1]) is True
    assert can_login(pg, login_of(mesh, OTHER), old[OTHER], FILES[OTHER][1]) is True
    mesh.start("app2")
    result = mesh.cli("push")
    assert result.returncode == 0, result.stdout + result.stderr
    with mesh.controller() as ctl:
        rows = {r.pair: r for r in ctl.status()}
    assert all((rows[p].consumer_generation, rows[p].provider_generation) == (1, 1) for p in FILES)


def test_a_provider_failing_sends_no_consumer_anything(mesh, pg, sent):
    old = secrets_of(mesh)
    with mesh.controller() as ctl:
        ctl.faults["after-journal"] = lambda: mesh.stop("db1", signal.SIGKILL)
        report = ctl.rotate([GITEA, WIKI, OTHER])
        assert report.outcome in ("rolled back", "converging")
        assert "db1" in report.reason
    assert sent and all(what == "deliver provider" for what, _ in sent)  # and its rollback
    assert secrets_of(mesh) == old  # no consumer moved
    mesh.start("db1")
    result = mesh.cli("push")
    assert result.returncode == 0, result.stdout + result.stderr
    for pid, (_, db) in FILES.items():
        assert can_login(pg, login_of(mesh, pid), old[pid], db) is True


def test_a_controller_killed_between_batches_is_finished_by_the_next_push(mesh, pg):
    script = textwrap.dedent(f"""
        import os, signal
        from meshtui.controller.act import sending
        from meshtui.controller.core import Controller
        sending.BATCH = 1
        ctl = Controller.open({str(mesh.state)!r})
        ctl.faults["after-consumer-batch:to"] = lambda: os.kill(os.getpid(), signal.SIGKILL)
        ctl.rotate([{GITEA!r}, {WIKI!r}, {OTHER!r}])
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert done.returncode == -signal.SIGKILL, done.stderr
    with mesh.controller() as ctl:
        (rotation,) = ctl.inventory.open_rotations()
        assert rotation["state"] == "delivering"
    result = mesh.cli("push")  # recovers it: sent again in batches, finished all-new
    assert result.returncode == 0, result.stdout + result.stderr
    with mesh.controller() as ctl:
        assert ctl.inventory.open_rotations() == []
        rows = {r.pair: r for r in ctl.status()}
    for pid, (rel, db) in FILES.items():
        row = rows[pid]
        assert row.generation == row.consumer_generation == row.provider_generation == 2
        assert can_login(pg, login_of(mesh, pid), mesh.secret(rel), db) is True
    assert os.environ.get("MESHTUI_SECRET") is None
