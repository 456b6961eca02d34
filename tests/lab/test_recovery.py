"""The controller's machine is lost, end to end in the lab (root, namespaces, real PostgreSQL and
agents): a backup; rotations and a drill after it; the backup restored into a fresh folder; one
push that names every end ahead of the inventory and brings every pair to one generation; every
probe working; ``audit --verify`` passing and showing the restore; a rotation and a drill at once.
And the old way, an inventory put back without ``restore``, is still caught by every node."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from meshtui import crypto
from meshtui.controller.agents.client import read_anchor_answer
from meshtui.controller.core import Controller
from meshtui.controller.records.backup import open_file
from tests.fix_lab import cli, running_lab

pytestmark = [pytest.mark.root, pytest.mark.slow]

GITEA = "database:app1/gitea->db1/postgres"
KEYCLOAK = "database:app1/keycloak->db1/postgres"
WIKI = "database:app2/wiki->db1/postgres"
OTHERS = ["database:app1/grafana->db1/postgres", "database:app2/gitea->db1/postgres"]


@pytest.fixture(scope="module")
def lab():
    with running_lab("meshtui-recovery-", kinds={"redis": False, "seaweedfs": False}) as found:
        yield found


def ok(result) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_lost_controller_restored_converges_with_the_gap_on_record(lab, tmp_path: Path) -> None:
    state, built = lab
    pw = tmp_path / "pass"
    pw.write_text("a long passphrase for the night\n")
    pw.chmod(0o600)
    backup = tmp_path / "nightly.backup"
    held = json.loads(ok(cli(state, "backup", str(backup), "--passphrase-file", str(pw), "--json")))
    assert held["generations"][GITEA] == 1

    # after the backup the mesh moves on: two pairs rotated twice, one drilled
    for _ in range(2):
        ok(cli(state, "rotate", "--yes", GITEA, KEYCLOAK))
    ok(cli(state, "drill", WIKI))
    with Controller.open(state, read_only=True) as old:
        lost_head = old.inventory.last_seq()
    assert lost_head > held["events"]

    # the machine is lost: restore into a fresh folder
    fresh = tmp_path / "restored"
    restored = json.loads(
        ok(cli(fresh, "restore", str(backup), "--passphrase-file", str(pw), "--json"))
    )
    assert restored["events"] == held["events"]
    seen = restored["seen_up_to"]  # the nodes saw the lost events (all but the last few,
    assert held["events"] < seen <= lost_head  # recorded after the last request)
    assert restored["gap"] == [held["events"] + 1, seen]
    assert all(n["seen_seq"] > held["events"] for n in restored["nodes"])  # every node

    # one push: names every end ahead, and brings every pair to one generation
    pushed = cli(fresh, "push")
    text = ok(pushed)
    for pid in (GITEA, KEYCLOAK, WIKI):
        assert f"AHEAD     {pid}" in text
    assert "generation 3" in text  # GITEA's ends hold 3, the inventory knew 1
    assert "all ends agree" in text
    for pid in OTHERS:
        assert f"AHEAD     {pid}" not in text
    rows = {r["pair"]: r for r in json.loads(ok(cli(fresh, "status", "--json")))}
    for pid, r in rows.items():
        assert r["consumer_generation"] == r["provider_generation"] == r["generation"], pid
    assert rows[GITEA]["generation"] == 4 and rows[KEYCLOAK]["generation"] == 4
    assert rows[WIKI]["generation"] == 3
    again = ok(cli(fresh, "push", "--json"))
    assert json.loads(again)["ahead"] == {}

    # probe right after: every pair working
    probes = json.loads(ok(cli(fresh, "probe", "--json")))
    assert {p["verdict"] for p in probes} == {"accepted"}

    # the audit chain verifies, every node agrees, and the restore is on record
    audit = json.loads(ok(cli(fresh, "audit", "--verify", "--json")))
    assert audit["verified"]
    kinds = [e["kind"] for e in audit["events"]]
    assert "restore" in kinds and "ahead" in kinds
    (event,) = [e for e in audit["events"] if e["kind"] == "restore"]
    assert event["detail"]["gap"] == [held["events"] + 1, seen]
    assert {n["verdict"] for n in audit["anchors"]["nodes"]} == {"agrees"}
    assert all("restore" in n["reason"] for n in audit["anchors"]["nodes"])
    text = ok(cli(fresh, "audit", "--verify"))
    assert "restored" in text and f"{held['events'] + 1}..{seen}" in text
    with Controller.open(fresh, read_only=True) as ctl:
        for name, row in ctl.inventory.nodes().items():
            got = read_anchor_answer(row)
            before = {n["node"]: n["seen_seq"] for n in restored["nodes"]}[name]
            assert [h.seq for h in got.history] == [before], name  # the old head kept

    # the mesh works as before: a rotation and a drill pass at once
    ok(cli(fresh, "rotate", "--yes", GITEA))
    drill = json.loads(ok(cli(fresh, "drill", "--json", KEYCLOAK)))
    assert drill[0]["ok"]

    # an inventory put back WITHOUT restore (even with the restore's proof beside it) is caught
    payload, _ = open_file(backup, pw.read_bytes().rstrip(b"\n"))
    back = tmp_path / "put-back"
    back.mkdir(mode=0o700)
    (back / "inventory.db").write_bytes(crypto.unb64(payload.inventory))
    for name, text64 in payload.files.items():
        (back / name).write_bytes(crypto.unb64(text64))
    (back / "controller.key").chmod(0o600)
    shutil.copy(fresh / "restored.json", back / "restored.json")
    ok(cli(back, "probe"))  # shows the nodes its head: they do not take it
    verify = cli(back, "audit", "--verify", "--json")
    assert verify.returncode == 1, verify.stdout
    anchors = json.loads(verify.stdout)["anchors"]
    assert set(anchors["disagreeing"]) == {"db1", "app1", "app2"}
    assert json.loads(ok(cli(fresh, "audit", "--verify", "--json")))["verified"]
