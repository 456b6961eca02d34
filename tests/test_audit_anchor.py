"""The audit log survives a wipe: every agent keeps the longest audit head it was shown.

Real agents (``meshtui host serve`` on Unix sockets), a command provisioner (``/bin/true``: the
chain is what matters here, not PostgreSQL), and the real CLI. The attacks are done to the
inventory file itself, as someone who can write it would: delete every event and the head,
put back an older copy, or an older copy that then went on.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from meshtui import crypto
from meshtui.controller.agents.channel import Answer, request_bytes
from meshtui.controller.agents.client import channel_to, exchange, read_anchor
from meshtui.controller.core import INVENTORY
from meshtui.errors import AgentError, EnvelopeError, MessageError
from meshtui.host.server.routes import Agent
from meshtui.host.state.anchor import ANCHOR
from meshtui.host.state.identity import load
from meshtui.lab.mesh import agent_answers
from meshtui.protocol import messages, wire
from tests.fix_agents import Mesh

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]

NODES = ["app1", "app2", "db1"]


@pytest.fixture
def mesh(mesh_with_agents: Callable[..., Mesh]) -> Mesh:
    m = mesh_with_agents(
        consumers={"app1": ["gitea"], "app2": ["wiki"]},
        port=5432,
        admin=None,
        provisioner=["/bin/true"],
    )
    for _ in range(2):  # the first push shows the declare's head; the second shows the first push's
        assert m.cli("push").returncode == 0
    return m


def kept(mesh: Mesh, node: str) -> int:
    """The event number of the audit head ``node``'s agent keeps on disk."""
    return int(json.loads((mesh.nodes[node] / ANCHOR).read_text())["seq"])


def copy_db(src: Path, dst: Path) -> None:
    """Copy one SQLite file over another through SQLite's backup (WAL and all)."""
    with (
        contextlib.closing(sqlite3.connect(src)) as a,
        contextlib.closing(sqlite3.connect(dst)) as b,
    ):
        a.backup(b)


def verify(mesh: Mesh) -> tuple[int, str, str]:
    done = mesh.cli("audit", "--verify")
    return done.returncode, done.stdout, done.stderr


def test_an_intact_chain_passes_and_every_node_agrees(mesh: Mesh) -> None:
    code, out, err = verify(mesh)
    assert code == 0, err
    for node in NODES:
        assert kept(mesh, node) >= 2
        assert f"node {node}" in out and "agrees" in out
    with mesh.controller(read_only=True) as ctl:
        check = ctl.verify_anchors()
    assert check.ok and sorted(check.answered) == NODES


def test_wiping_every_event_and_the_head_fails_naming_the_nodes(mesh: Mesh) -> None:
    with contextlib.closing(sqlite3.connect(mesh.state / INVENTORY)) as db, db:
        db.execute("DELETE FROM audit")
        db.execute("DELETE FROM audit_head")
    with mesh.controller(read_only=True) as ctl:
        assert ctl.verify_chain().ok  # the hole: the inventory alone verifies as an empty log
        assert ctl.verify_chain().events == 0
    code, out, err = verify(mesh)
    assert code == 1
    assert "audit chain DISAGREES with what nodes saw: app1, app2, db1" in err
    for node in NODES:
        assert f"node {node}" in err
    assert "ends at event 0" in err


def test_an_older_copy_of_the_inventory_fails(mesh: Mesh) -> None:
    """Truncation with a valid signed head: an older copy put back (or cut and re-signed)."""
    backup = mesh.root / "old-inventory.db"
    copy_db(mesh.state / INVENTORY, backup)
    for _ in range(2):  # the agents are shown a head past the copy's end
        assert mesh.cli("push").returncode == 0
    copy_db(backup, mesh.state / INVENTORY)
    with mesh.controller(read_only=True) as ctl:
        assert ctl.verify_chain().ok  # signed by the controller key: the inventory alone agrees
        check = ctl.verify_anchors()
    assert check.disagreeing == NODES
    assert {n.verdict for n in check.nodes} == {"ahead"}
    code, _, err = verify(mesh)
    assert code == 1 and "app1, app2, db1" in err


def merged(mesh: Mesh, *args: str) -> tuple[int, list[str]]:
    """The real CLI with stdout and stderr in one pipe, in the order it wrote them."""
    done = subprocess.run(
        [sys.executable, "-m", "meshtui.cli", "--state", str(mesh.state), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        timeout=120,
    )
    return done.returncode, done.stdout.splitlines()


def test_the_verdict_comes_first_and_no_pass_precedes_a_disagreement(mesh: Mesh) -> None:
    code, lines = merged(mesh, "audit", "--verify")
    assert code == 0 and lines[0].startswith("audit chain verified: "), lines
    backup = mesh.root / "old-inventory.db"
    copy_db(mesh.state / INVENTORY, backup)
    for _ in range(2):
        assert mesh.cli("push").returncode == 0
    copy_db(backup, mesh.state / INVENTORY)
    code, lines = merged(mesh, "audit", "--verify")
    assert code == 1
    assert lines[0].startswith("audit chain DISAGREES with what nodes saw: app1, app2, db1"), lines
    assert not any("verified" in line for line in lines), lines
    assert [n for n in NODES if any(f"node {n}" in line for line in lines[1:])] == NODES


def test_a_chain_that_went_on_from_an_older_copy_diverges(mesh: Mesh) -> None:
    backup = mesh.root / "old-inventory.db"
    copy_db(mesh.state / INVENTORY, backup)
    with mesh.controller(read_only=True) as ctl:
        last = ctl.inventory.last_seq()
    assert mesh.cli("push").returncode == 0  # records event last+1
    assert mesh.cli("push").returncode == 0  # shows last+1 to every agent
    copy_db(backup, mesh.state / INVENTORY)
    with mesh.controller() as ctl:  # the old copy goes on: another event last+1, re-signed
        ctl.inventory.record("declare", [], {"note": "rewritten"}, "ok")
        assert ctl.verify_chain().ok
        check = ctl.verify_anchors()
    assert all(kept(mesh, n) == last + 1 for n in NODES)
    assert {n.verdict for n in check.nodes} == {"diverges"}, check
    code, _, err = verify(mesh)
    assert code == 1 and "saw another event" in err


def test_a_node_that_was_offline_keeps_an_older_head_and_that_is_fine(mesh: Mesh) -> None:
    mesh.stop("app2")
    before = kept(mesh, "app2")
    mesh.cli("push")  # app2 cannot be reached: the others see newer heads
    mesh.cli("push")
    code, out, _ = verify(mesh)
    assert code == 0
    assert "node app2" in out and "not asked" in out  # said, not hidden
    mesh.start("app2")
    assert kept(mesh, "app2") == before < kept(mesh, "app1")
    code, out, err = verify(mesh)
    assert code == 0, err
    assert out.count("agrees") == 3


def test_the_agent_keeps_only_a_longer_head_signed_by_the_controller(mesh: Mesh) -> None:
    """Agent level, on app1's real state folder: a forged head, a shorter one, and a restart."""
    mesh.stop("app1")
    folder = mesh.nodes["app1"]
    agent = Agent(load(folder))
    held = agent.anchor.head
    assert held is not None and held.seq == kept(mesh, "app1")
    keys = crypto.load_private(mesh.state / "controller.key")
    forger = crypto.PrivateKeys.generate(node=False)

    def show(head: wire.SignedHead, signer: crypto.PrivateKeys) -> int:
        env, _ = wire.envelope(
            wire.STATE, {}, sender=wire.CONTROLLER, to="app1", keys=signer, head=head
        )
        return agent.handle(env)[0]

    def head(seq: int, by: crypto.PrivateKeys) -> wire.SignedHead:
        digest = "ab" * 32
        return wire.SignedHead(seq, digest, crypto.b64(by.sign(wire.head_message(seq, digest))))

    # a longer head signed by another key, inside a request the controller signed: not kept
    assert show(head(held.seq + 10, forger), keys) == 200
    assert agent.anchor.head == held
    # a shorter head, properly signed: never goes back
    assert show(head(held.seq - 1, keys), keys) == 200
    assert agent.anchor.head == held
    # a request not signed by the controller: refused, its head never looked at
    assert show(head(held.seq + 5, keys), forger) == 403
    assert agent.anchor.head == held
    # a longer, signed head is kept, on disk, and survives a restart
    assert show(head(held.seq + 1, keys), keys) == 200
    assert kept(mesh, "app1") == held.seq + 1
    assert Agent(load(folder)).anchor.head == head(held.seq + 1, keys)


def test_the_unsigned_read_changes_nothing_and_its_answer_is_the_nodes(mesh: Mesh) -> None:
    """No key asks; the node signs the answer and quotes the fresh nonce; nothing is recorded."""
    folder = mesh.nodes["db1"]
    before = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    with mesh.controller(read_only=True) as ctl:
        row = ctl.inventory.nodes()["db1"]
        head = read_anchor(row)
        assert head is not None and head.seq == kept(mesh, "db1")
        assert head.verifies(
            crypto.load_public(mesh.state / "controller.pub", need_seal=False).verify
        )
        # an answer for another node's key is not trusted: app1's row pointed at db1's socket
        wrong = {**ctl.inventory.nodes()["app1"], "agent": row["agent"]}
        with pytest.raises(AgentError, match="answer not trusted"):
            read_anchor(wrong)
    channel = channel_to("db1", str(row["agent"]))

    def get(target: str) -> Answer:
        return exchange("db1", channel, request_bytes(channel.host, target, None), 5.0)

    try:
        assert get("/v1/anchor").status_code == 400  # no nonce
        assert get("/v1/anchor?nonce=" + "x" * 32).status_code == 400
        answer = get("/v1/anchor?nonce=" + "ab" * 16).body
    finally:
        channel.close()
    verify_key = crypto.unb64(row["verify_key"])
    with pytest.raises(EnvelopeError, match="does not answer this request"):
        wire.open_envelope(
            answer, verify_key=verify_key, sender="db1", to=wire.CONTROLLER, reply_to="cd" * 16
        )
    after = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    assert after == before


def test_the_head_is_kept_in_the_requests_own_durable_record(mesh: Mesh) -> None:
    """The longer head is written with the request's line in the guard's record (one
    fdatasync, before the request is acted on); ``audit-head.json`` is only a readable copy: a
    restart with that copy behind (a crash before it reached the disk) keeps the longer head."""
    from meshtui.host.state.guard import LEDGER

    mesh.stop("app1")
    folder = mesh.nodes["app1"]
    agent = Agent(load(folder))
    held = agent.anchor.head
    assert held is not None
    stale = (folder / ANCHOR).read_bytes()
    keys = crypto.load_private(mesh.state / "controller.key")
    digest = "cd" * 32
    longer = wire.SignedHead(
        held.seq + 3, digest, crypto.b64(keys.sign(wire.head_message(held.seq + 3, digest)))
    )
    env, _ = wire.envelope(
        wire.STATE, {}, sender=wire.CONTROLLER, to="app1", keys=keys, head=longer
    )
    assert agent.handle(env)[0] == 200
    last = json.loads((folder / LEDGER).read_bytes().splitlines()[-1])
    assert last["h"] == longer.to_json()
    agent.accepted.close()
    (folder / ANCHOR).write_bytes(stale)  # the copy never reached the disk
    assert Agent(load(folder)).anchor.head == longer
    assert kept(mesh, "app1") == held.seq  # the copy is refreshed on the next longer head only


def serve_headless(state: Path, listen: str) -> None:
    """The real agent and server, whose anchor answer names no node (an agent of another
    contract): its answer is still signed by the node and quotes the nonce."""
    from meshtui.host.server.serve import _Server, build_app, uvicorn_config

    class Headless(Agent):
        def read_anchor(self, nonce: str) -> tuple[int, dict[str, str]]:
            head = self.anchor.head
            assert head is not None
            return 200, self._reply(messages.ANCHOR.name, {"head": head.to_json()}, nonce)

    _Server(uvicorn_config(build_app(Headless(load(state))), listen)).run()


def test_an_anchor_answer_without_its_shape_is_refused_naming_the_field(
    mesh: Mesh, tmp_path: Path
) -> None:
    mesh.stop("db1")
    sock = mesh.sockets["db1"]
    log = open(tmp_path / "db1.log", "ab")  # noqa: SIM115
    argv = [sys.executable, "-m", "tests.test_audit_anchor", str(mesh.nodes["db1"]), f"unix:{sock}"]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 15
        while not agent_answers(sock):
            assert proc.poll() is None and time.monotonic() < deadline, (
                tmp_path / "db1.log"
            ).read_text()
            time.sleep(0.05)
        with mesh.controller(read_only=True) as ctl, pytest.raises(AgentError) as caught:
            read_anchor(ctl.inventory.nodes()["db1"])
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()
    assert caught.value.node == "db1"
    assert caught.value.reason == (
        "answer refused: anchor answer: Object missing required field `node` - at `$`"
    )


def test_an_anchor_answer_is_checked_by_its_kind() -> None:
    head = {"seq": 4, "hash": "ab" * 32, "sig": "c2ln"}
    assert messages.ANCHOR.answer_of({"node": "db1", "head": head})["head"] == head
    assert messages.ANCHOR.answer_of({"node": "db1", "head": None})["head"] is None
    with pytest.raises(
        MessageError, match=r"anchor answer: Expected `int`, got `str` - at `\$.head.seq`"
    ):
        messages.ANCHOR.answer_of({"node": "db1", "head": {**head, "seq": "4"}})
    with pytest.raises(MessageError, match="anchor answer: Object contains unknown field `held`"):
        messages.ANCHOR.answer_of({"node": "db1", "head": None, "held": 1})


if __name__ == "__main__":
    serve_headless(Path(sys.argv[1]), sys.argv[2])
