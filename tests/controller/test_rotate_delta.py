"""A rotation sends the provider only what changed (a delta on a base), with real agents and a
real PostgreSQL: the manifest the node then holds is the one a whole delivery writes, a node
whose manifest is not the base refuses the delta and the controller sends it whole in the same
call, and a crash between the files and the provisioner converges on the next push."""

from __future__ import annotations

import json
import re
import signal
import threading
import time
from typing import Any

import psycopg
import pytest
from psycopg import sql

from meshtui.controller.act.recording import Delivered
from meshtui.controller.act.sending import send_providers
from meshtui.controller.agents.client import Agents
from meshtui.controller.plan.planner import Planner
from meshtui.crypto import secret_digest
from tests.controller.test_rotate import GITEA, OTHER, WIKI, can_login, login_of, refused

MANIFEST = "srv/db1/postgres/mesh.json"


@pytest.fixture
def mesh(mesh_with_agents, pg, pg_clean, pg_admin_file):
    m = mesh_with_agents(
        consumers={"app1": ["gitea", "wiki"], "app2": ["grafana"]},
        port=pg.port,
        admin=pg_admin_file,
    )
    with m.controller() as ctl:
        assert ctl.push().ok
    return m


@pytest.fixture
def delivered(monkeypatch) -> list[tuple[str, dict[str, Any], Any]]:
    """Every deliver request the controller sends to db1, with db1's answer (observed, the call
    itself goes through)."""
    seen: list[tuple[str, dict[str, Any], Any]] = []
    real = Agents.call_many

    def call_many(self, kind, payloads, **kw):
        answers = real(self, kind, payloads, **kw)
        if kind.name == "deliver" and "db1" in payloads:
            seen.append(("db1", payloads["db1"], answers["db1"]))
        return answers

    monkeypatch.setattr(Agents, "call_many", call_many)
    return seen


def body(mesh) -> dict[str, Any]:
    data = json.loads((mesh.root / MANIFEST).read_text())
    data.pop("serial")
    return data


def whole_delivery(mesh) -> None:
    """The same inventory delivered whole (every consumer), as push delivers it."""
    with mesh.controller() as ctl, Agents(ctl.inventory.nodes(), ctl.keys()) as agents:
        plan = Planner(ctl.inventory)
        pair = plan.pairs[GITEA]
        sets = plan.provider_sets([(pair["provider"], pair["provision"])], {})
        result = Delivered()
        send_providers(agents, ctl.inventory, sets, result)
    assert all(result.provider_ok.values()), result.errors


def test_a_rotation_sends_a_delta_and_the_manifest_is_what_a_whole_delivery_writes(
    mesh, pg, delivered
):
    old = mesh.secret("srv/app1/gitea/db.password")
    with mesh.controller() as ctl:
        assert ctl.rotate([GITEA]).outcome == "done"
    ((_, request, answer),) = delivered
    (spec,) = request["provider"]
    assert "base" in spec and [c["pair"] for c in spec["consumers"]] == [GITEA]
    (outcome,) = answer["provider"]
    login = login_of(mesh, GITEA)
    # only the rotated login was applied and read back
    assert [(o["login"], o["outcome"]) for o in outcome["outcomes"]] == [(login, "updated")]
    merged = body(mesh)
    whole_delivery(mesh)
    assert body(mesh) == merged  # what a whole delivery writes, line for line
    assert len(merged["consumers"]) == 3
    new = mesh.secret("srv/app1/gitea/db.password")
    assert can_login(pg, login, new, "gitea_app1") is True
    assert refused(can_login(pg, login, old, "gitea_app1"))
    for pid, rel, db in ((WIKI, "srv/app1/wiki/db.password", "wiki_app1"),
                         (OTHER, "srv/app2/grafana/db.password", "grafana_app2")):  # fmt: skip
        assert can_login(pg, login_of(mesh, pid), mesh.secret(rel), db) is True


def test_deltas_in_a_row_merged_from_the_agents_memory_write_what_a_whole_delivery_writes(
    mesh, pg, delivered
):
    """The agent keeps the manifest it wrote last (its lines and their text): rotations in a
    row, of one pair then of another, each merge from it and the file stays, byte for byte,
    the one a whole delivery writes."""
    with mesh.controller() as ctl:
        for pid in (GITEA, WIKI, GITEA):
            assert ctl.rotate([pid]).outcome == "done"
    assert all("base" in request["provider"][0] for _, request, _ in delivered)
    assert all(answer["provider"][0]["ok"] for _, _, answer in delivered)
    merged = (mesh.root / MANIFEST).read_bytes()
    whole_delivery(mesh)
    rewritten = (mesh.root / MANIFEST).read_bytes()
    serial = re.compile(rb'"serial": \d+')
    assert serial.sub(b"", merged) == serial.sub(b"", rewritten)  # byte for byte but the serial
    for pid, rel, db in ((GITEA, "srv/app1/gitea/db.password", "gitea_app1"),
                         (WIKI, "srv/app1/wiki/db.password", "wiki_app1")):  # fmt: skip
        assert can_login(pg, login_of(mesh, pid), mesh.secret(rel), db) is True


@pytest.mark.parametrize("spoil", ["edited", "missing"])
def test_a_delta_on_another_base_is_refused_and_sent_whole_in_the_same_call(
    mesh, pg, delivered, spoil
):
    manifest = mesh.root / MANIFEST
    if spoil == "missing":
        manifest.unlink()
        why = "holds no manifest to apply a delta to"
    else:  # someone changed where wiki connects from
        data = json.loads(manifest.read_text())
        data["consumers"][1]["at"] = "10.9.9.9"
        manifest.write_text(json.dumps(data))
        why = "does not hold the consumer set the delta applies to"
    with mesh.controller() as ctl:
        assert ctl.rotate([GITEA]).outcome == "done"
    (_, first, refusal), (_, second, answer) = delivered[:2]
    assert "base" in first["provider"][0]
    (got,) = refusal["provider"]
    assert not got["ok"] and why in got["base_refused"] and "database" in got["base_refused"]
    (spec,) = second["provider"]
    assert "base" not in spec and len(spec["consumers"]) == 3
    assert answer["provider"][0]["ok"]
    merged = body(mesh)
    assert "10.9.9.9" not in json.dumps(merged)
    whole_delivery(mesh)
    assert body(mesh) == merged
    login = login_of(mesh, GITEA)
    assert can_login(pg, login, mesh.secret("srv/app1/gitea/db.password"), "gitea_app1") is True


def digests(mesh) -> dict[str, str]:
    return {
        c["as"]: c["digest"] for c in json.loads((mesh.root / MANIFEST).read_text())["consumers"]
    }


def test_a_crash_between_the_files_and_the_provisioner_converges_on_the_next_push(mesh, pg):
    """The provider's agent is killed (-9) after the delta's files are written and while its
    provisioner waits on PostgreSQL (the test holds the role's row locked): the rotation cannot
    finish, files are ahead of the database, and the next push makes them agree again."""
    login = login_of(mesh, GITEA)
    before = digests(mesh)
    result: list[Any] = []
    with psycopg.connect(pg.admin_conninfo()) as blocker:
        blocker.execute(
            sql.SQL("ALTER ROLE {} CONNECTION LIMIT -1").format(sql.Identifier(login))
        )  # uncommitted: the provisioner's ALTER ROLE of the same role waits for it

        def rotate() -> None:
            with mesh.controller() as ctl:
                result.append(ctl.rotate([GITEA]))

        worker = threading.Thread(target=rotate)
        worker.start()
        deadline = time.monotonic() + 60
        while digests(mesh)[login] == before[login]:  # the delta's merge is written
            assert time.monotonic() < deadline, "the delta was never written"
            time.sleep(0.02)
        time.sleep(0.3)  # and the provisioner is waiting on the lock
        mesh.stop("db1", signal.SIGKILL)
        blocker.rollback()
    worker.join(timeout=120)
    (report,) = result
    assert report.outcome != "done"
    held = digests(mesh)  # files ahead of the database: the kill came before the commit
    assert held[login] != before[login]
    assert {k: v for k, v in held.items() if k != login} == {
        k: v for k, v in before.items() if k != login
    }
    mesh.start("db1")
    with mesh.controller() as ctl:
        assert ctl.push().ok
    credential = mesh.secret("srv/app1/gitea/db.password")
    assert can_login(pg, login, credential, "gitea_app1") is True
    manifest = json.loads((mesh.root / MANIFEST).read_text())
    grants = mesh.root / "srv/db1/postgres"
    for line in manifest["consumers"]:  # every secret file is what the manifest says
        assert secret_digest((grants / line["secret"]).read_bytes()) == line["digest"]
    # and the database holds what the files say: the consumer's credential is the manifest's
    assert digests(mesh)[login] == secret_digest(credential.encode())
    assert digests(mesh) == before


def test_rotations_one_after_another_each_apply_as_a_delta_on_the_kept_base(mesh, pg, delivered):
    """The inventory keeps each provision's base as it delivers and moves it past every delta
    in the delta's size: each later rotation's base is the node's manifest (never refused)."""
    with mesh.controller() as ctl:
        for ids in ([GITEA], [WIKI], [GITEA], [GITEA, OTHER]):
            assert ctl.rotate(ids).outcome == "done"
    assert len(delivered) == 4
    for _, request, answer in delivered:
        (spec,) = request["provider"]
        (got,) = answer["provider"]
        assert "base" in spec and got["ok"] and "base_refused" not in got
    merged = body(mesh)
    whole_delivery(mesh)
    assert body(mesh) == merged


def test_a_rotation_reads_only_the_pairs_it_rotates(mesh, monkeypatch):
    """Rotating one pair reads that pair's rows, not its provider's every pair (the kept base
    names what the manifest holds), so it costs the same among 10 or 10,000 pairs."""
    from meshtui.inventory import Inventory

    asked: list[dict[str, Any]] = []
    real = Inventory.pairs

    def pairs(self, ids=None, *, providers=None):
        asked.append({"ids": None if ids is None else sorted(ids), "providers": providers})
        return real(self, ids, providers=providers)

    monkeypatch.setattr(Inventory, "pairs", pairs)
    with mesh.controller() as ctl:
        assert ctl.rotate([GITEA]).outcome == "done"
    assert asked and all(a["providers"] is None and a["ids"] == [GITEA] for a in asked), asked


def _redeclare(mesh, edit) -> None:
    mesh.decl.write_text(edit(mesh.decl.read_text()))
    with mesh.controller() as ctl:
        ctl.declare(mesh.decl)


def test_a_declare_that_moves_a_consumer_node_makes_the_next_rotation_whole(mesh, pg, delivered):
    """The kept base is what the node holds, not what the inventory now wants: a node's new
    address changes its consumers' manifest lines, so the next rotation of any pair sends the
    manifest whole and the node holds the new address (a delta would have kept the old)."""
    block = '[nodes.app2]\naddress = "127.0.0.1"'
    _redeclare(mesh, lambda text: text.replace(block, '[nodes.app2]\naddress = "127.0.0.2"'))
    with mesh.controller() as ctl:
        assert ctl.rotate([GITEA]).outcome == "done"
    (_, request, answer) = delivered[0]
    (spec,) = request["provider"]
    assert "base" not in spec and len(spec["consumers"]) == 3 and answer["provider"][0]["ok"]
    at = {c["as"]: c["at"] for c in body(mesh)["consumers"]}
    assert at[login_of(mesh, OTHER)] == "127.0.0.2"
    with mesh.controller() as ctl:  # and from there a delta again
        assert ctl.rotate([WIKI]).outcome == "done"
    assert "base" in delivered[-1][1]["provider"][0]


def test_a_declare_that_adds_a_pair_to_the_provision_makes_the_next_rotation_whole(
    mesh, pg, delivered
):
    added = (
        '\n[modules."app2/notes"]\nrequires = [{ name = "database", values = { database = '
        '"notes_app2" }, file = "srv/app2/notes/db.password" }]\n'
    )
    _redeclare(mesh, lambda text: text + added)
    with mesh.controller() as ctl:
        assert ctl.rotate([GITEA]).outcome == "done"
    (spec,) = delivered[0][1]["provider"]
    assert "base" not in spec and len(spec["consumers"]) == 4
    assert len(body(mesh)["consumers"]) == 4
