"""Replays and stale deliveries against real agents (uvicorn processes on Unix sockets): a
captured request is refused even after the agent restarts, an older generation is never
delivered again unless the signed request is a rollback from the generation the node holds, and
a controller whose clock is a few seconds behind is not locked out by an agent restart."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
import pytest

from meshtui import crypto
from meshtui.controller.agents.channel import Answer, Channel
from meshtui.controller.agents.client import AgentClient
from meshtui.controller.plan.planner import Planner
from meshtui.errors import EnvelopeError, WireError
from meshtui.protocol import messages, wire

GITEA = "database:app1/gitea->db1/postgres"
CREDENTIAL = "srv/app1/gitea/db.password"


@pytest.fixture
def mesh(mesh_with_agents):
    # a command provisioner keeps these tests about the agent, not PostgreSQL
    return mesh_with_agents(
        consumers={"app1": ["gitea"]}, port=5432, admin=None, provisioner=["true"]
    )


def post(mesh, node: str, envelope: dict[str, Any]) -> httpx.Response:
    transport = httpx.HTTPTransport(uds=str(mesh.sockets[node]))
    with httpx.Client(transport=transport, base_url="http://agent", timeout=10) as client:
        return client.post("/v1", json=envelope)


def payload_of(envelope: dict[str, Any]) -> dict[str, Any]:
    return dict(json.loads(crypto.unb64(envelope["body"]))["payload"])


def answer(resp: httpx.Response) -> dict[str, Any]:
    return payload_of(resp.json())


def controller_keys(mesh) -> crypto.PrivateKeys:
    return crypto.load_private(mesh.state / "controller.key")


def holdings(mesh, node: str) -> dict[str, Any]:
    return dict(json.loads((mesh.nodes[node] / "holdings.json").read_text()))


def held_generation(mesh, node: str, pair: str, want: int) -> int:
    """The consumer generation ``node``'s holdings record names for ``pair``: the agent writes
    that record once its answer is sent, so it is read again for a moment until it says ``want``."""
    deadline = time.monotonic() + 3.0
    while True:
        got = int(holdings(mesh, node)["consumer"][pair]["generation"])
        if got == want or time.monotonic() > deadline:
            return got
        time.sleep(0.02)


class Wiretap:
    """Records every envelope the controller posts (what an attacker on the path would see)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []
        real_exchange = Channel.exchange

        def exchange(channel: Channel, request: bytes, timeout: float) -> Answer:
            _, _, body = request.partition(b"\r\n\r\n")
            self.sent.append((channel.host, json.loads(body)))
            return real_exchange(channel, request, timeout)

        monkeypatch.setattr(Channel, "exchange", exchange)

    def deliveries(self, to: str) -> list[dict[str, Any]]:
        out = []
        for _, env in self.sent:
            body = json.loads(crypto.unb64(env["body"]))
            if body["kind"] == wire.DELIVER and body["to"] == to:
                out.append(env)
        return out


def skew_controller_clock(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """The controller runs in this process, every agent in its own: only the controller's clock
    moves."""
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + seconds)


def test_captured_delivery_replayed_after_agent_restart_is_refused(mesh, monkeypatch):
    # a controller 20 s ahead is inside the clock limit, so the captured message stays "fresh"
    # for the agent's clock long enough to outlive a restart
    skew_controller_clock(monkeypatch, 20)
    tap = Wiretap(monkeypatch)
    with mesh.controller() as ctl:
        assert ctl.push().ok
    (gen1,) = tap.deliveries("app1")
    assert payload_of(gen1)["consumer"][0]["generation"] == 1
    gen1_secret = mesh.secret(CREDENTIAL)
    with mesh.controller() as ctl:
        report = ctl.rotate([GITEA])
    assert report.outcome == "done", report.reason
    gen2_secret = mesh.secret(CREDENTIAL)
    assert gen2_secret != gen1_secret
    mesh.start("app1")  # restart: everything in memory is gone

    resp = post(mesh, "app1", gen1)

    assert resp.status_code == 403, resp.text
    assert "replayed" in answer(resp)["error"]
    assert mesh.secret(CREDENTIAL) == gen2_secret
    assert holdings(mesh, "app1")["consumer"][GITEA]["generation"] == 2


def test_captured_state_request_replayed_after_agent_restart_is_refused(mesh, monkeypatch):
    skew_controller_clock(monkeypatch, 20)
    env, _ = wire.envelope(
        wire.STATE, {}, sender="controller", to="app1", keys=controller_keys(mesh)
    )
    assert post(mesh, "app1", env).status_code == 200
    mesh.start("app1")
    resp = post(mesh, "app1", env)
    assert resp.status_code == 403 and "replayed" in answer(resp)["error"]


def test_fresh_signed_delivery_of_an_older_generation_is_refused_unless_a_rollback(mesh):
    with mesh.controller() as ctl:
        assert ctl.push().ok
        old_items = Planner(ctl.inventory).consumer_items([GITEA], {})["app1"]
        assert ctl.rotate([GITEA]).outcome == "done"
    gen2_secret = mesh.secret(CREDENTIAL)
    keys = controller_keys(mesh)
    # a correctly signed, never-seen request carrying generation 1 (an out-of-date inventory)
    env, _ = wire.envelope(
        wire.DELIVER, {"consumer": old_items}, sender="controller", to="app1", keys=keys
    )
    resp = post(mesh, "app1", env)
    assert resp.status_code == 200
    (got,) = answer(resp)["consumer"]
    assert not got["ok"]
    assert "generation 1 is older than generation 2" in got["error"]
    assert mesh.secret(CREDENTIAL) == gen2_secret
    assert holdings(mesh, "app1")["consumer"][GITEA]["generation"] == 2

    # a rollback that names another generation is no rollback of what this node holds
    wrong = [{**i, "rollback": {"from": [7], "rotations": []}} for i in old_items]
    env, _ = wire.envelope(
        wire.DELIVER, {"consumer": wrong}, sender="controller", to="app1", keys=keys
    )
    (got,) = answer(post(mesh, "app1", env))["consumer"]
    assert not got["ok"] and mesh.secret(CREDENTIAL) == gen2_secret

    # the controller's explicit rollback from generation 2 is obeyed
    back = [{**i, "rollback": {"from": [2], "rotations": [1]}} for i in old_items]
    env, _ = wire.envelope(
        wire.DELIVER, {"consumer": back}, sender="controller", to="app1", keys=keys
    )
    (got,) = answer(post(mesh, "app1", env))["consumer"]
    assert got["ok"], got
    assert held_generation(mesh, "app1", GITEA, 1) == 1


def test_agent_restart_does_not_lock_out_a_controller_5s_behind(mesh, monkeypatch):
    with mesh.controller() as ctl:
        assert ctl.push().ok
    for node in mesh.nodes:
        mesh.start(node)
    skew_controller_clock(monkeypatch, -5)
    with mesh.controller() as ctl:
        report = ctl.push()
        assert report.ok, report.behind
        assert ctl.rotate([GITEA]).outcome == "done"
    # and a controller process that starts fresh, without the state folder's last number
    env, _ = wire.envelope(
        wire.STATE,
        {},
        sender="controller",
        to="app1",
        keys=controller_keys(mesh),
        sequence=wire.Sequence(),
    )
    assert post(mesh, "app1", env).status_code == 200


def test_concurrent_requests_to_one_node_are_all_accepted(mesh):
    """Two controller processes (two sequences) and many threads at once, arriving in any order."""
    with mesh.controller() as ctl:
        assert ctl.push().ok
        node = ctl.inventory.nodes()["app1"]
    keys = controller_keys(mesh)
    first, second = wire.Sequence(), wire.Sequence()
    # signed in one order, delivered in the other
    early, _ = wire.envelope(
        wire.STATE, {}, sender="controller", to="app1", keys=keys, sequence=first
    )
    late, _ = wire.envelope(
        wire.STATE, {}, sender="controller", to="app1", keys=keys, sequence=second
    )
    assert post(mesh, "app1", late).status_code == 200
    assert post(mesh, "app1", early).status_code == 200

    errors: list[str] = []

    def ask(seq: wire.Sequence) -> None:
        client = AgentClient(node, keys, sequence=seq)
        try:
            for _ in range(5):
                client.call(messages.STATE, {})
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(repr(exc))
        finally:
            client.close()

    threads = [threading.Thread(target=ask, args=(s,)) for s in [first, second] * 3]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_the_high_water_mark_does_not_depend_on_either_clock(mesh, tmp_path):
    """The controller's numbers ran ahead of its clock (it was 10 minutes fast, then fixed):
    its state folder's sequence carries on above them, and a number below the agent's
    high-water mark is refused even though its timestamp is fresh."""
    keys = controller_keys(mesh)
    ahead = tmp_path / "sequence"
    ahead.write_text(f"{int((time.time() + 600) * 1_000_000):020d}\n")
    carried = wire.Sequence(ahead)
    env, _ = wire.envelope(
        wire.STATE, {}, sender="controller", to="app1", keys=keys, sequence=carried
    )
    assert post(mesh, "app1", env).status_code == 200
    mesh.start("app1")
    env, _ = wire.envelope(
        wire.STATE, {}, sender="controller", to="app1", keys=keys, sequence=wire.Sequence(ahead)
    )
    assert post(mesh, "app1", env).status_code == 200  # another process on the same folder
    stale, _ = wire.envelope(
        wire.STATE, {}, sender="controller", to="app1", keys=keys, sequence=wire.Sequence()
    )
    resp = post(mesh, "app1", stale)
    assert resp.status_code == 403
    assert "older than the requests this agent already accepted" in answer(resp)["error"]


def test_a_sequence_file_never_repeats_across_processes_or_a_clock_stepping_back(tmp_path):
    path = tmp_path / "sequence"
    now = [1_000.0]
    first, second = wire.Sequence(path, clock=lambda: now[0]), wire.Sequence(path)
    seen = [first.next()[0]]
    now[0] = 900.0  # stepped back
    for _ in range(100):
        seen += [first.next()[0], second.next()[0]]
    assert seen == sorted(seen) and len(set(seen)) == len(seen)
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_an_upgraded_agent_starts_from_the_generations_it_holds(tmp_path):
    from meshtui.host.state.guard import Accepted

    held = [{"end": "consumer", "pair": GITEA, "generation": 3, "digest": "x"}]
    accepted = Accepted(tmp_path, "app1", held)
    item = {"pair": GITEA, "node": "app1", "generation": 2}
    (refusal,), _ = accepted.check({"consumer": [item]})
    assert "generation 2 is older than generation 3" in refusal.reason
    refused, changes = accepted.check({"consumer": [{**item, "generation": 4}]})
    assert refused == [] and changes == [("consumer", GITEA, 4)]
    accepted.take(7)
    accepted.record(7, changes)
    accepted.close()
    again = Accepted(tmp_path, "app1", [])
    assert again.get("consumer", GITEA) == 4
    with pytest.raises(EnvelopeError, match="replayed"):
        again.take(7)


def test_an_agent_reads_the_record_of_the_version_before(tmp_path):
    """Upgrading from two files (requests.json, generations.json) keeps what they say."""
    from meshtui.host.state.guard import Accepted

    (tmp_path / "requests.json").write_text(json.dumps({"floor": 5, "recent": [9]}))
    (tmp_path / "generations.json").write_text(json.dumps({"consumer": {GITEA: 6}, "provider": {}}))
    accepted = Accepted(tmp_path, "app1", [])
    assert accepted.get("consumer", GITEA) == 6
    for seq in (5, 9):
        with pytest.raises(EnvelopeError):
            accepted.take(seq)
    accepted.take(10)


def test_a_torn_last_line_is_dropped_and_any_other_bad_line_stops_the_agent(tmp_path):
    """A crash inside an append (before its fdatasync returned: nothing was acted on) leaves a
    line without its newline: dropped. A broken line before the last is not guessed at."""
    from meshtui.host.state.guard import LEDGER, Accepted

    accepted = Accepted(tmp_path, "app1", [])
    accepted.take(11)
    accepted.record(11, [("consumer", GITEA, 2)])
    accepted.close()
    path = tmp_path / LEDGER
    path.write_bytes(path.read_bytes() + b'{"s":12,"g":[["consu')
    again = Accepted(tmp_path, "app1", [])
    assert again.get("consumer", GITEA) == 2
    again.take(12)  # never recorded, so never acted on
    again.close()
    path.write_bytes(b'{"s":1\n' + path.read_bytes())
    with pytest.raises(WireError, match="line 1 cannot be read"):
        Accepted(tmp_path, "app1", [])


@pytest.mark.parametrize(
    ("line", "field"),
    [
        (b'{"s":"13"}', "$.s"),
        (b'{"g":[["consumer","p",2.5]]}', "$.g[0][2]"),
        (b'{"consumer":{"p":"2"}}', "$.consumer"),
        (b"[13]", "object"),
    ],
)
def test_a_line_of_the_wrong_shape_stops_the_agent_naming_the_field(tmp_path, line, field):
    """JSON that parses but is not a line of the record (a number as text, a fraction of a
    generation, a list) is named, field and all, never folded in half-read."""
    from meshtui.host.state.guard import LEDGER, Accepted

    accepted = Accepted(tmp_path, "app1", [])
    accepted.take(11)
    accepted.record(11, [("consumer", GITEA, 2)])
    accepted.close()
    path = tmp_path / LEDGER
    path.write_bytes(path.read_bytes() + line + b"\n")
    with pytest.raises(WireError, match="line 3 cannot be read") as caught:  # after snapshot, 11
        Accepted(tmp_path, "app1", [])
    assert field in str(caught.value)


def test_an_unknown_end_in_a_line_stops_the_agent(tmp_path):
    from meshtui.host.state.guard import LEDGER, Accepted

    (tmp_path / LEDGER).write_bytes(b'{"s":5,"g":[["sideways","p",2]]}\n')
    with pytest.raises(WireError, match="unknown end 'sideways'"):
        Accepted(tmp_path, "app1", [])


def test_an_agent_that_cannot_read_what_it_accepted_does_not_start(mesh):
    import subprocess
    import sys

    mesh.stop("app1")
    record = mesh.nodes["app1"] / "accepted.log"
    record.write_text("{not json\n")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "meshtui.cli",
            "host",
            "serve",
            "--state",
            str(mesh.nodes["app1"]),
            "--listen",
            f"unix:{mesh.sockets['app1']}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 1
    assert str(record) in done.stderr and "stopped for over a minute" in done.stderr
