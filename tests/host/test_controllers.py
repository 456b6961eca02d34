"""Several controllers against a real agent (a ``host serve`` process on a Unix socket): a node
accepts exactly the controllers its policy names, each with its own key; a request names its
controller and is verified with that controller's key; each controller's sequence numbers are
its own; a delivering request under an epoch below the highest accepted is refused, after a
restart too."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from meshtui import crypto
from meshtui.atomic import write_private
from meshtui.controller.agents.client import AgentClient
from meshtui.errors import AgentError, FencedOutError
from meshtui.host.policy import node_policy
from meshtui.protocol import messages, wire
from meshtui.protocol.fence import Fence
from tests.fix_agents import mesh_policy

NODE = "app1"


@pytest.fixture
def mesh(mesh_with_agents):
    return mesh_with_agents(
        consumers={NODE: ["gitea"]}, port=5432, admin=None, provisioner=["true"]
    )


def keys_a(mesh) -> crypto.PrivateKeys:
    return crypto.load_private(mesh.state / "controller.key")


def accept(mesh, node: str, controllers: dict[str, crypto.PrivateKeys]) -> None:
    """``node``'s policy names exactly ``controllers``; its agent restarted to read it."""
    entries = "\n\n".join(
        node_policy.ControllerKey(name, keys.public().verify).entry()
        for name, keys in controllers.items()
    )
    node_policy.write(mesh.nodes[node], mesh_policy(node, mesh.root) + "\n" + entries + "\n")
    mesh.start(node)


def post(mesh, envelope: dict[str, str]) -> httpx.Response:
    transport = httpx.HTTPTransport(uds=str(mesh.sockets[NODE]))
    with httpx.Client(transport=transport, base_url="http://agent", timeout=10) as client:
        return client.post("/v1", json=envelope)


def signed(
    keys: crypto.PrivateKeys,
    fence: Fence | None,
    kind: str = wire.STATE,
    payload: dict[str, Any] | None = None,
    sequence: wire.Sequence | None = None,
) -> dict[str, str]:
    env, _ = wire.envelope(
        kind,
        payload or {},
        sender=wire.CONTROLLER,
        to=NODE,
        keys=keys,
        fence=fence,
        sequence=sequence or wire.Sequence(),
    )
    return env


def said(resp: httpx.Response) -> str:
    """The refusal's text: the signed answer's payload, or the bare unsigned error."""
    got = resp.json()
    if "body" in got:
        return str(json.loads(crypto.unb64(got["body"]))["payload"]["error"])
    return str(got["error"])


def client(mesh, keys: crypto.PrivateKeys, fence: Fence) -> AgentClient:
    with mesh.controller() as ctl:
        row = ctl.inventory.nodes()[NODE]
    return AgentClient(row, keys, sequence=wire.Sequence(), fence=lambda: fence)


def test_a_node_whose_policy_names_no_controller_accepts_its_pinned_key_by_any_name(mesh):
    assert post(mesh, signed(keys_a(mesh), Fence("ctl-a"))).status_code == 200
    assert post(mesh, signed(keys_a(mesh), Fence("any-name"))).status_code == 200


def test_each_named_controller_is_verified_with_its_own_key(mesh):
    b = crypto.PrivateKeys.generate(node=False)
    accept(mesh, NODE, {"ctl-a": keys_a(mesh), "ctl-b": b})
    assert post(mesh, signed(keys_a(mesh), Fence("ctl-a"))).status_code == 200
    assert post(mesh, signed(b, Fence("ctl-b"))).status_code == 200


def test_a_controller_the_policy_does_not_name_is_refused_naming_it_and_the_node(mesh):
    accept(mesh, NODE, {"ctl-a": keys_a(mesh)})
    stranger = crypto.PrivateKeys.generate(node=False)
    resp = post(mesh, signed(stranger, Fence("ctl-c")))
    assert resp.status_code == 403, resp.text
    text = said(resp)
    assert "ctl-c" in text and NODE in text and "[[controllers]]" in text
    with pytest.raises(AgentError, match="could not verify"):
        client(mesh, stranger, Fence("ctl-c")).call(messages.STATE, {})


def test_a_request_naming_no_controller_is_refused_once_the_policy_names_them(mesh):
    accept(mesh, NODE, {"ctl-a": keys_a(mesh)})
    resp = post(mesh, signed(keys_a(mesh), None))
    assert resp.status_code == 403 and "names no controller" in said(resp)


def test_a_key_removed_from_the_policy_is_refused(mesh):
    b = crypto.PrivateKeys.generate(node=False)
    accept(mesh, NODE, {"ctl-a": keys_a(mesh), "ctl-b": b})
    assert post(mesh, signed(b, Fence("ctl-b"))).status_code == 200
    accept(mesh, NODE, {"ctl-a": keys_a(mesh)})  # ctl-b retired
    resp = post(mesh, signed(b, Fence("ctl-b")))
    assert resp.status_code == 403 and "ctl-b" in said(resp)
    assert post(mesh, signed(keys_a(mesh), Fence("ctl-a"))).status_code == 200


def test_the_pinned_key_is_refused_when_the_policy_names_only_others(mesh):
    b = crypto.PrivateKeys.generate(node=False)
    accept(mesh, NODE, {"ctl-b": b})
    resp = post(mesh, signed(keys_a(mesh), Fence("ctl-a")))
    assert resp.status_code == 403 and "ctl-a" in said(resp)


def test_a_body_naming_one_controller_signed_by_anothers_key_is_refused(mesh):
    b = crypto.PrivateKeys.generate(node=False)
    accept(mesh, NODE, {"ctl-a": keys_a(mesh), "ctl-b": b})
    resp = post(mesh, signed(b, Fence("ctl-a")))
    assert resp.status_code == 403, resp.text
    assert "not signed by controller ctl-a's key" in said(resp)


def test_two_controllers_sequences_are_independent(mesh):
    b = crypto.PrivateKeys.generate(node=False)
    accept(mesh, NODE, {"ctl-a": keys_a(mesh), "ctl-b": b})
    now = time.time()
    seq_a, seq_b = wire.Sequence(clock=lambda: now), wire.Sequence(clock=lambda: now)
    first = signed(keys_a(mesh), Fence("ctl-a"), sequence=seq_a)
    same_number = signed(b, Fence("ctl-b"), sequence=seq_b)
    assert wire.seq_of(first) == wire.seq_of(same_number)
    assert post(mesh, first).status_code == 200
    assert post(mesh, same_number).status_code == 200  # the same number, another controller's
    assert post(mesh, signed(keys_a(mesh), Fence("ctl-a"), sequence=seq_a)).status_code == 200
    mesh.start(NODE)  # each controller's numbers survive a restart
    replay = post(mesh, same_number)
    assert replay.status_code == 403 and "replayed" in said(replay)


WITHDRAW_NOTHING: dict[str, Any] = {"consumer": []}


def test_a_delivering_request_under_a_lower_epoch_is_refused_signed_also_after_a_restart(mesh):
    ahead = client(mesh, keys_a(mesh), Fence("ctl-b", 5))
    assert ahead.call(messages.WITHDRAW, WITHDRAW_NOTHING) == {"consumer": []}
    behind = client(mesh, keys_a(mesh), Fence("ctl-a", 4))
    with pytest.raises(AgentError) as refused:
        behind.call(messages.WITHDRAW, WITHDRAW_NOTHING)
    assert "controller ctl-a's epoch 4 is behind epoch 5" in str(refused.value)
    assert "another controller leads" in str(refused.value)
    assert refused.value.node == NODE
    resp = post(mesh, signed(keys_a(mesh), Fence("ctl-a", 4), wire.WITHDRAW, WITHDRAW_NOTHING))
    assert resp.status_code == 409 and "body" in resp.json()  # signed by the node
    # a read is never fenced
    assert behind.call(messages.STATE, {"holdings": False})["node"] == NODE

    mesh.start(NODE)
    again = client(mesh, keys_a(mesh), Fence("ctl-a", 4))
    with pytest.raises(AgentError, match="epoch 4 is behind epoch 5"):
        again.call(messages.WITHDRAW, WITHDRAW_NOTHING)
    past = client(mesh, keys_a(mesh), Fence("ctl-a", 6))
    assert past.call(messages.WITHDRAW, WITHDRAW_NOTHING) == {"consumer": []}
    guard = (mesh.nodes[NODE] / "accepted.log").stat()
    assert guard.st_mode & 0o777 == 0o600


def test_an_epoch_another_controller_reached_first_is_refused_also_after_a_restart(mesh):
    """Two holdings never share an epoch: after a switch of the lease's database to a standby
    that had not received the last holding, the next taker gets that holding's epoch again;
    the node, which accepted it from the lost holder, refuses it from anyone else and says the
    epoch it holds, so the new holder can raise its own past it."""
    first = client(mesh, keys_a(mesh), Fence("ctl-b", 5))
    assert first.call(messages.WITHDRAW, WITHDRAW_NOTHING) == {"consumer": []}
    for restarted in (False, True):
        if restarted:
            mesh.start(NODE)
        same = client(mesh, keys_a(mesh), Fence("ctl-a", 5))
        with pytest.raises(FencedOutError) as refused:
            same.call(messages.WITHDRAW, WITHDRAW_NOTHING)
        assert refused.value.highest == 5
        assert "controller ctl-a's epoch 5 was already taken on this node (app1) by " \
            "controller ctl-b" in str(refused.value)  # fmt: skip
        assert first.call(messages.WITHDRAW, WITHDRAW_NOTHING) == {"consumer": []}  # its own
    past = client(mesh, keys_a(mesh), Fence("ctl-a", 6))
    assert past.call(messages.WITHDRAW, WITHDRAW_NOTHING) == {"consumer": []}
    with pytest.raises(FencedOutError, match="epoch 5 is behind epoch 6"):
        first.call(messages.WITHDRAW, WITHDRAW_NOTHING)


def test_epoch_0_meshes_are_never_refused_among_themselves(mesh):
    for name in ("ctl-a", "ctl-b", "ctl-a"):
        c = client(mesh, keys_a(mesh), Fence(name, 0))
        assert c.call(messages.WITHDRAW, WITHDRAW_NOTHING) == {"consumer": []}


def test_the_highest_epoch_is_kept_in_the_record_beside_the_sequence_numbers(mesh):
    client(mesh, keys_a(mesh), Fence("ctl-a", 7)).call(messages.WITHDRAW, WITHDRAW_NOTHING)
    record = Path(mesh.nodes[NODE] / "accepted.log").read_text()
    assert '"e":7' in record.replace(" ", "")


def test_an_epoch_kept_without_whose_it_is_goes_to_the_first_controller_to_show_it(mesh):
    """A guard compacted before nodes kept whose their highest epoch is holds the epoch alone
    (an upgrade): the first controller to show that epoch takes it, and the same epoch from
    another is refused, also after a restart."""
    mesh.stop(NODE)
    old = {"floor": 0, "recent": [], "consumer": {}, "provider": {}, "epoch": 5}
    write_private(mesh.nodes[NODE] / "accepted.log", (json.dumps(old) + "\n").encode())
    mesh.start(NODE)
    first = client(mesh, keys_a(mesh), Fence("ctl-a", 5))
    assert first.call(messages.WITHDRAW, WITHDRAW_NOTHING) == {"consumer": []}
    for restarted in (False, True):
        if restarted:
            mesh.start(NODE)
        other = client(mesh, keys_a(mesh), Fence("ctl-b", 5))
        with pytest.raises(
            FencedOutError, match="already taken on this node .* by controller ctl-a"
        ):
            other.call(messages.WITHDRAW, WITHDRAW_NOTHING)
        assert first.call(messages.WITHDRAW, WITHDRAW_NOTHING) == {"consumer": []}


def test_a_refusal_for_the_epoch_says_when_the_node_first_accepted_it_also_after_a_restart(mesh):
    """A holder raises past an epoch a switch lost, never past one accepted after its own
    database last raised: the refusal says when, by the node's clock, kept across a restart."""
    before = time.time()
    first = client(mesh, keys_a(mesh), Fence("ctl-b", 5))
    for _ in range(3):  # later requests under the epoch do not move it
        assert first.call(messages.WITHDRAW, WITHDRAW_NOTHING) == {"consumer": []}
    after = time.time()
    told: list[float] = []
    for restarted in (False, True):
        if restarted:
            mesh.start(NODE)
        resp = post(mesh, signed(keys_a(mesh), Fence("ctl-a", 4), wire.WITHDRAW, WITHDRAW_NOTHING))
        assert resp.status_code == 409
        payload = json.loads(crypto.unb64(resp.json()["body"]))["payload"]
        assert payload["highest"] == 5
        told.append(payload["at"])
    assert before <= told[0] <= after
    assert told[1] == told[0]


def test_whose_epoch_and_when_survive_a_compaction_of_the_record(tmp_path, monkeypatch):
    from meshtui.errors import FencedError
    from meshtui.host.state import guard

    monkeypatch.setattr(guard, "COMPACT_EVERY", 3)
    accepted = guard.Accepted(tmp_path, NODE, [])
    for seq in range(1, 9):
        accepted.take(seq, "ctl-b", 5)
        accepted.record(seq, (), controller="ctl-b", epoch=5)
    at = accepted.epoch_at
    accepted.close()
    assert len((tmp_path / "accepted.log").read_text().splitlines()) < 8  # compacted
    again = guard.Accepted(tmp_path, NODE, [])
    assert (again.epoch, again.epoch_by, again.epoch_at) == (5, "ctl-b", at)
    with pytest.raises(FencedError, match="already taken on this node"):
        again.take(100, "ctl-a", 5)
