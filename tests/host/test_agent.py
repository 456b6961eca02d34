"""The host agent over real HTTP (uvicorn on a Unix socket): what it refuses, and that a
refusal writes nothing."""

from __future__ import annotations

import copy
import json

import httpx
import pytest

from meshtui import crypto
from meshtui.controller.plan.planner import Planner
from meshtui.protocol import messages, wire

GITEA = "database:app1/gitea->db1/postgres"


@pytest.fixture
def mesh(mesh_with_agents):
    # a command provisioner keeps these tests about the agent, not PostgreSQL
    return mesh_with_agents(
        consumers={"app1": ["gitea"]}, port=5432, admin=None, provisioner=["true"]
    )


def post(mesh, node: str, envelope: dict) -> httpx.Response:
    transport = httpx.HTTPTransport(uds=str(mesh.sockets[node]))
    with httpx.Client(transport=transport, base_url="http://agent", timeout=10) as client:
        return client.post("/v1", json=envelope)


def consumer_delivery(mesh) -> dict:
    with mesh.controller() as ctl:
        return Planner(ctl.inventory).consumer_items([GITEA], {})


def controller_keys(mesh) -> crypto.PrivateKeys:
    return crypto.load_private(mesh.state / "controller.key")


def files(mesh) -> dict[str, bytes]:
    return (
        {
            str(p.relative_to(mesh.root)): p.read_bytes()
            for p in (mesh.root / "srv").rglob("*")
            if p.is_file()
        }
        if (mesh.root / "srv").exists()
        else {}
    )


def test_a_good_delivery_is_written_and_answered_signed(mesh):
    items = consumer_delivery(mesh)
    env, nonce = wire.envelope(
        wire.DELIVER,
        {"consumer": items["app1"]},
        sender="controller",
        to="app1",
        keys=controller_keys(mesh),
    )
    resp = post(mesh, "app1", env)
    assert resp.status_code == 200
    node_pub = crypto.load_public(mesh.nodes["app1"] / "node.pub")
    msg = wire.open_envelope(
        resp.json(), verify_key=node_pub.verify, sender="app1", to="controller", reply_to=nonce
    )
    (got,) = messages.DELIVER.answer_of(msg.payload)["consumer"]
    assert got["ok"] and got["digest"] == items["app1"][0]["digest"]
    written = (mesh.root / "srv/app1/gitea/db.password").read_bytes()
    assert crypto.secret_digest(written) == got["digest"]
    assert written not in bytes(msg.payload)


def test_request_signed_by_another_key_is_refused_and_writes_nothing(mesh):
    stranger = crypto.PrivateKeys.generate(node=False)
    env, _ = wire.envelope(
        wire.DELIVER,
        {"consumer": consumer_delivery(mesh)["app1"]},
        sender="controller",
        to="app1",
        keys=stranger,
    )
    resp = post(mesh, "app1", env)
    assert resp.status_code == 403
    assert "not signed by controller" in resp.text or resp.status_code == 403
    assert files(mesh) == {}


def test_replayed_request_is_refused(mesh):
    items = consumer_delivery(mesh)["app1"]
    env, _ = wire.envelope(
        wire.DELIVER,
        {"consumer": items},
        sender="controller",
        to="app1",
        keys=controller_keys(mesh),
    )
    assert post(mesh, "app1", env).status_code == 200
    path = mesh.root / "srv/app1/gitea/db.password"
    path.unlink()
    resp = post(mesh, "app1", env)
    assert resp.status_code == 403
    body = json.loads(crypto.unb64(resp.json()["body"]))
    assert "replayed" in body["payload"]["error"]
    assert not path.exists()


def test_tampered_sealed_blob_is_refused_and_writes_nothing(mesh):
    items = copy.deepcopy(consumer_delivery(mesh)["app1"])
    blob = bytearray(crypto.unb64(items[0]["sealed"]))
    blob[-1] ^= 0x01
    items[0]["sealed"] = crypto.b64(bytes(blob))
    env, nonce = wire.envelope(
        wire.DELIVER,
        {"consumer": items},
        sender="controller",
        to="app1",
        keys=controller_keys(mesh),
    )
    resp = post(mesh, "app1", env)
    node_pub = crypto.load_public(mesh.nodes["app1"] / "node.pub")
    msg = wire.open_envelope(
        resp.json(), verify_key=node_pub.verify, sender="app1", to="controller", reply_to=nonce
    )
    (got,) = messages.DELIVER.answer_of(msg.payload)["consumer"]
    assert not got["ok"] and "does not open" in got["error"]
    assert files(mesh) == {}


def test_tampered_provider_blob_changes_nothing_at_the_provider(mesh):
    with mesh.controller() as ctl:
        assert ctl.push().ok
        sets = Planner(ctl.inventory).provider_sets([("db1/postgres", "database")], {})
    before = files(mesh)
    spec = copy.deepcopy(sets["db1"])
    blob = bytearray(crypto.unb64(spec[0]["consumers"][0]["sealed"]))
    blob[5] ^= 0xFF
    spec[0]["consumers"][0]["sealed"] = crypto.b64(bytes(blob))
    spec[0]["consumers"][0]["digest"] = "blake2b:" + "0" * 64  # force the agent to unseal it
    env, _ = wire.envelope(
        wire.DELIVER, {"provider": spec}, sender="controller", to="db1", keys=controller_keys(mesh)
    )
    resp = post(mesh, "db1", env)
    body = json.loads(crypto.unb64(resp.json()["body"]))
    (got,) = body["payload"]["provider"]
    assert not got["ok"] and "does not open" in got["error"]
    assert files(mesh) == before


def test_delivery_for_another_node_is_refused(mesh):
    items = consumer_delivery(mesh)["app1"]
    # addressed to db1 in the envelope: db1's agent must refuse an envelope for app1 ...
    env, _ = wire.envelope(
        wire.DELIVER,
        {"consumer": items},
        sender="controller",
        to="app1",
        keys=controller_keys(mesh),
    )
    assert post(mesh, "db1", env).status_code == 403
    # ... and an envelope for db1 whose items are app1's credentials writes nothing either
    env, _ = wire.envelope(
        wire.DELIVER, {"consumer": items}, sender="controller", to="db1", keys=controller_keys(mesh)
    )
    body = json.loads(crypto.unb64(post(mesh, "db1", env).json()["body"]))
    (got,) = body["payload"]["consumer"]
    assert not got["ok"] and "for node 'app1'" in got["error"]
    assert files(mesh) == {}


def test_stale_clock_is_refused(mesh, monkeypatch):
    import time

    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() - 3600)
    env, _ = wire.envelope(
        wire.STATE, {}, sender="controller", to="app1", keys=controller_keys(mesh)
    )
    monkeypatch.setattr(time, "time", real)
    resp = post(mesh, "app1", env)
    assert resp.status_code == 403


def test_state_answers_by_digest_never_the_secret(mesh):
    with mesh.controller() as ctl:
        assert ctl.push().ok
    secret = mesh.secret("srv/app1/gitea/db.password")
    env, _ = wire.envelope(
        wire.STATE, {}, sender="controller", to="app1", keys=controller_keys(mesh)
    )
    resp = post(mesh, "app1", env)
    assert resp.status_code == 200
    assert secret not in resp.text
    body = json.loads(crypto.unb64(resp.json()["body"]))
    (held,) = body["payload"]["holdings"]
    assert held["pair"] == GITEA and held["generation"] == 1 and held["present"] is True


def test_paths_that_climb_are_refused_and_nothing_is_written(mesh):
    items = copy.deepcopy(consumer_delivery(mesh)["app1"])
    items[0]["file"] = str(mesh.root / "srv/app1/../../escape/db.password")
    env, _ = wire.envelope(
        wire.DELIVER,
        {"consumer": items},
        sender="controller",
        to="app1",
        keys=controller_keys(mesh),
    )
    body = json.loads(crypto.unb64(post(mesh, "app1", env).json()["body"]))
    (got,) = body["payload"]["consumer"]
    assert not got["ok"] and "'..'" in got["error"]
    assert not (mesh.root / "escape").exists() and files(mesh) == {}


def test_probe_reads_only_files_this_agent_wrote(mesh, tmp_path):
    planted = tmp_path / "not-a-credential"
    planted.write_text("something private")
    env, _ = wire.envelope(
        wire.PROBE,
        {
            "targets": [
                {
                    "pair": GITEA,
                    "file": str(planted),
                    "host": "127.0.0.1",
                    "port": 9,
                    "login": "x",
                    "dbname": "x",
                }
            ]
        },
        sender="controller",
        to="app1",
        keys=controller_keys(mesh),
    )
    body = json.loads(crypto.unb64(post(mesh, "app1", env).json()["body"]))
    (res,) = body["payload"]["results"]
    assert res["result"] is None and res["digest"] is None
    assert "holds no credential" in res["error"]


def test_agent_socket_is_private(mesh):
    import stat

    mode = stat.S_IMODE(mesh.sockets["app1"].stat().st_mode)
    assert mode == 0o600


def test_a_body_without_length_or_too_large_is_refused_unread(mesh):
    import socket

    for header in (f"Content-Length: {10**12}\r\n", "Transfer-Encoding: chunked\r\n"):
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(10)
            sock.connect(str(mesh.sockets["app1"]))
            sock.sendall(f"POST /v1 HTTP/1.1\r\nHost: agent\r\n{header}\r\n".encode())
            answer = sock.recv(4096).decode()
        assert answer.startswith("HTTP/1.1 413"), answer


def test_a_state_asked_without_the_listing_reads_no_credential_file(mesh):
    from meshtui.controller.agents.client import Agents

    with mesh.controller() as ctl:
        assert ctl.push().ok
        (mesh.root / "srv/app1/gitea/db.password").unlink()  # a listing would report it missing
        with Agents(ctl.inventory.nodes(), ctl.keys(), sequence=ctl.sequence) as agents:
            brief = agents.call("app1", messages.STATE, {"holdings": False})
            full = agents.call("app1", messages.STATE, {})
    assert brief["node"] == "app1" and brief["fingerprint"] == full["fingerprint"]
    assert "holdings" not in brief
    assert [h["present"] for h in full["holdings"]] == [False]


def test_a_check_is_answered_in_its_one_shape_and_a_misshapen_one_is_named(mesh):
    """doctor's check travels as messages.CheckRequest/CheckAnswer, nothing re-declares them."""
    from meshtui.controller.agents.client import Agents
    from meshtui.errors import AgentError

    consumer = {
        "pair": GITEA,
        "file": str(mesh.root / "srv/app1/gitea/db.password"),
        "owner": None,
        "group": None,
        "reload": ["/nonexistent/meshtui-reload"],
    }
    port = {"host": "127.0.0.1", "port": 1, "provider": "db1/postgres", "pairs": [GITEA]}
    ask = {"consumers": [consumer], "providers": [], "ports": [port]}
    bad = {**ask, "consumers": [{**consumer, "reload": "/bin/true"}]}
    with (
        mesh.controller() as ctl,
        Agents(ctl.inventory.nodes(), ctl.keys(), sequence=ctl.sequence) as agents,
    ):
        answer = agents.call("app1", messages.CHECK, ask)
        with pytest.raises(AgentError) as caught:
            agents.call("app1", messages.CHECK, bad)
    assert set(answer) == {"node", "at", "passed", "findings", "elapsed_ms"}
    assert answer["node"] == "app1"
    checks = {(f["check"], f["subject"]) for f in answer["findings"]}
    # the reload is not in the node's policy: that is the finding, the program is not looked at
    assert {("policy", GITEA), ("port", "127.0.0.1:1")} <= checks
    assert ("reload", GITEA) not in checks
    assert caught.value.reason == (
        "app1 refused: check request: Expected `array`, got `str` - at `$.consumers[0].reload`"
    )
