"""The typed messages: every kind round-trips between a real controller client and real agents;
a request that does not have its kind's shape is a 400 naming the field (and writes nothing);
an answer that does not have its kind's shape is an AgentError naming the node and the field."""

from __future__ import annotations

import copy
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from meshtui import crypto
from meshtui.controller.agents.client import Agents
from meshtui.controller.plan.planner import Planner, target_of
from meshtui.controller.read import doctor
from meshtui.errors import AgentError, MessageError
from meshtui.host.policy import node_policy
from meshtui.lab.mesh import agent_answers
from meshtui.model import Drift, End, OutcomeName, Verdict, node_of
from meshtui.protocol import messages, wire
from meshtui.protocol.messages import (
    DeliverRequest,
    DrillRequest,
    InspectSpec,
    PrepareRequest,
    ProbeItem,
    ProbeRequest,
    SecretCheckItem,
    SecretCheckRequest,
    SecretFetchItem,
    SecretFetchRequest,
    SecretStoreItem,
    SecretStoreRequest,
    StateRequest,
    WithdrawItem,
    WithdrawRequest,
)
from tests.fix_agents import mesh_policy

GITEA = "database:app1/gitea->db1/postgres"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def mesh(mesh_with_agents):
    # a command provisioner and a closed port: real agents, no PostgreSQL needed
    return mesh_with_agents(consumers={"app1": ["gitea"]}, port=1, admin=None, provisioner=["true"])


def planned(mesh) -> tuple[dict, dict, dict, dict]:
    """The real producers' payloads: provider sets, consumer items, the pair, its target."""
    with mesh.controller() as ctl:
        plan = Planner(ctl.inventory)
        pair = plan.pairs[GITEA]
        sets = plan.provider_sets([(pair["provider"], pair["provision"])], {})
        items = plan.consumer_items([GITEA], {})
        return sets, items, pair, target_of(pair, plan.nodes, plan.modules)


def doctor_asks(mesh) -> dict:
    """What ``meshtui doctor`` asks each node (its real producer)."""
    with mesh.controller() as ctl:
        inv = ctl.inventory
        return doctor.requests(inv.nodes(), inv.modules(), inv.pairs())


def agents(mesh) -> Agents:
    with mesh.controller() as ctl:
        nodes, keys = ctl.inventory.nodes(), ctl.keys()
    return Agents(nodes, keys)


def folder(path: Path) -> dict[str, str]:
    return {
        str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(path.rglob("*"))
        if p.is_file()
    }


def test_every_kind_round_trips_through_real_agents(mesh):
    sets, items, pair, target = planned(mesh)
    drill = DrillRequest(drill="d1", pair=GITEA, file=pair["file"], target=target)
    spec = sets["db1"][0]
    inspect = InspectSpec(
        provider=spec["provider"],
        provision=spec["provision"],
        receives=spec["receives"],
        admin=spec["admin"],
        provisioner=spec["provisioner"],
    )
    requests = [
        ("db1", messages.STATE, StateRequest()),
        ("db1", messages.STATE, StateRequest(inspect=[inspect])),
        ("db1", messages.DELIVER, DeliverRequest(provider=sets["db1"])),
        ("app1", messages.PREPARE, PrepareRequest(consumer=items["app1"])),
        ("app1", messages.DELIVER, DeliverRequest(consumer=items["app1"])),
        (
            "app1",
            messages.PROBE,
            ProbeRequest(targets=[ProbeItem(pair=GITEA, file=pair["file"], **target)]),
        ),
        ("app1", messages.DRILL_HOLD, drill),
        ("app1", messages.DRILL_CHECK, drill),
        (
            "app1",
            messages.WITHDRAW,
            WithdrawRequest(consumer=[WithdrawItem(pair=GITEA, file=pair["file"], target=target)]),
        ),
    ]
    asks = doctor_asks(mesh)
    requests += [(node, messages.CHECK, ask) for node, ask in sorted(asks.items())]
    digest = "blake2b:" + "0" * 64
    store = SecretStoreItem(
        module="app1/gitea", login="gitea_app1_x", name="key", version=1, digest=digest,
        sealed="AA==",
    )  # fmt: skip
    fetch = SecretFetchItem(
        module="app1/gitea", name="key", version=1, kv_version=1, digest=digest,
        login="gitea_app1_x", credential=pair["file"], host="10.213.9.9", port=1, ca=None,
        file=pair["file"] + ".key", owner=None, group=None, mode="0600", reload=[],
    )  # fmt: skip
    requests += [
        (
            "db1",
            messages.SECRET_STORE,
            SecretStoreRequest(
                vault="db1/bao",
                kind="openbao",
                receives="/nonexistent/m.json",
                grants="/nonexistent/g",
                admin="/nonexistent/a",
                items=[store],
            ),
        ),
        ("app1", messages.SECRET_FETCH, SecretFetchRequest(items=[fetch])),
        (
            "app1",
            messages.SECRET_CHECK,
            SecretCheckRequest(
                items=[
                    SecretCheckItem(
                        module="app1/gitea",
                        name="key",
                        login="gitea_app1_x",
                        credential=pair["file"],
                        host="10.213.9.9",
                        port=1,
                        ca=None,
                        file=pair["file"] + ".key",
                    )  # fmt: skip
                ]
            ),
        ),
    ]
    seen = set()
    with agents(mesh) as client:
        for node, kind, request in requests:
            # what the producer built is its kind's request, also after a trip through JSON
            assert kind.request_of(json.loads(json.dumps(request))) == request
            answer = client.call(node, kind, request)  # the client checked it
            assert kind.answer_of(json.loads(json.dumps(answer))) == answer
            seen.add(kind.name)
            if kind is messages.STATE and "inspect" in request:
                (got,) = answer["inspected"]
                assert not got["ok"] and "cannot be inspected" in got["error"]
            if kind is messages.DELIVER and node == "db1":
                assert answer["provider"][0]["ok"] and answer["consumer"] == []
            if kind is messages.PREPARE:
                assert answer["consumer"][0]["ok"]
            if kind is messages.DELIVER and node == "app1":
                assert answer["consumer"][0]["ok"]
            if kind is messages.PROBE:
                (got,) = answer["results"]
                assert got["result"] is not None and got["result"]["verdict"] == "unknown"
            if kind is messages.DRILL_CHECK:
                assert answer["error"] is None and answer["old"] is not None
            if kind is messages.CHECK:
                assert answer["node"] == node
            if kind is messages.SECRET_STORE:
                (got,) = answer["stored"]
                assert got["kv_version"] is None and "policy.toml" in str(got["error"])
            if kind is messages.SECRET_FETCH:
                (got,) = answer["fetched"]
                assert got["digest"] is None and got["error"]
            if kind is messages.SECRET_CHECK:
                (got,) = answer["checked"]
                assert got["file_digest"] is None and "not a file this agent wrote" in str(
                    got["error"]
                )
            if kind is messages.WITHDRAW:
                (got,) = answer["consumer"]
                assert got["probe"] is not None and not got["removed"]  # not proven refused
    assert seen == set(messages.KINDS)


def post(mesh, node: str, payload: dict) -> tuple[int, str]:
    """Send ``payload`` as a signed deliver request over the agent's real socket."""
    keys = crypto.load_private(mesh.state / "controller.key")
    env, nonce = wire.envelope(wire.DELIVER, payload, sender="controller", to=node, keys=keys)
    transport = httpx.HTTPTransport(uds=str(mesh.sockets[node]))
    with httpx.Client(transport=transport, base_url="http://agent", timeout=10) as http:
        resp = http.post("/v1", json=env)
    node_pub = crypto.load_public(mesh.nodes[node] / "node.pub")
    msg = wire.open_envelope(
        resp.json(), verify_key=node_pub.verify, sender=node, to="controller", reply_to=nonce
    )
    return resp.status_code, str(json.loads(bytes(msg.payload)).get("error", ""))


def spoil_missing(item: dict) -> str:
    del item["digest"]
    return "Object missing required field `digest` - at `$.consumer[0]`"


def spoil_type(item: dict) -> str:
    item["generation"] = "1"
    return "Expected `int`, got `str` - at `$.consumer[0].generation`"


def spoil_extra(item: dict) -> str:
    item["colour"] = "blue"
    return "Object contains unknown field `colour` - at `$.consumer[0]`"


def spoil_nested(item: dict) -> str:
    item["rollback"] = {"from": [1, "2"], "rotations": []}
    return "Expected `int`, got `str` - at `$.consumer[0].rollback.from[1]`"


@pytest.mark.parametrize("spoil", [spoil_missing, spoil_type, spoil_extra, spoil_nested])
def test_a_misshapen_request_is_a_400_naming_the_field_and_writes_nothing(mesh, spoil):
    _, items, _, _ = planned(mesh)
    (item,) = items["app1"]
    bad = copy.deepcopy(dict(item))
    where = spoil(bad)
    node_before = {k: v for k, v in folder(mesh.nodes["app1"]).items() if k != "requests.json"}
    status, error = post(mesh, "app1", {"consumer": [bad]})
    assert status == 400
    assert error == f"app1 refused: deliver request: {where}"
    assert not (mesh.root / "srv").exists()  # no credential file, no folder
    after = {k: v for k, v in folder(mesh.nodes["app1"]).items() if k != "requests.json"}
    assert after == node_before  # no holding, no accepted generation
    # the same payload sent by the controller's client: an AgentError naming node and field
    with agents(mesh) as client, pytest.raises(AgentError) as caught:
        client.call("app1", messages.DELIVER, {"consumer": [bad]})  # type: ignore[typeddict-item]
    assert caught.value.node == "app1" and where in caught.value.reason
    # and the untouched item is still delivered: the refusals spent nothing
    status, error = post(mesh, "app1", {"consumer": [item]})
    assert status == 200, error


def test_an_unknown_top_level_field_is_refused_naming_it(mesh):
    status, error = post(mesh, "app1", {"consumer": [], "delta": True})
    assert status == 400
    assert error == "app1 refused: deliver request: Object contains unknown field `delta` - at `$`"


MISWIRED = "login"


def serve_miswired(state: Path, listen: str) -> None:
    """The real agent, whose provisioner seam reports a login that is not a string."""
    from meshtui.host.server.routes import Agent
    from meshtui.host.server.serve import _Server, build_app, uvicorn_config
    from meshtui.host.state import identity

    def provisioner(manifest: Path, admin: Path, only: frozenset[str] | None) -> dict:
        logins = json.loads(manifest.read_text())["consumers"]
        outcomes = [{"login": 7, "outcome": "updated", "reason": ""} for _ in logins]
        return {"ok": True, "outcomes": outcomes}

    agent = Agent(identity.load(state), allow_loopback=True, provisioner=provisioner)  # type: ignore[arg-type]
    _Server(uvicorn_config(build_app(agent), listen)).run()  # type: ignore[arg-type]


def test_a_misshapen_answer_is_an_agent_error_naming_node_and_field(mesh, tmp_path):
    sets, _, pair, _ = planned(mesh)
    for spec in sets["db1"]:
        spec["provisioner"], spec["admin"] = None, str(tmp_path / "admin")  # the built-in seam
    mesh.stop("db1")
    node_policy.write(
        mesh.nodes["db1"], mesh_policy("db1", mesh.root, admin=(str(tmp_path / "admin"),))
    )
    err = open(tmp_path / "db1.err", "ab")  # noqa: SIM115
    sock = mesh.sockets["db1"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.test_messages", str(mesh.nodes["db1"]), f"unix:{sock}"],
        cwd=ROOT,
        stdout=err,
        stderr=err,
        stdin=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 15
        while not agent_answers(sock):
            assert proc.poll() is None and time.monotonic() < deadline, (
                tmp_path / "db1.err"
            ).read_text()
            time.sleep(0.05)
        with agents(mesh) as client, pytest.raises(AgentError) as caught:
            client.call("db1", messages.DELIVER, DeliverRequest(provider=sets["db1"]))
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        err.close()
    assert caught.value.node == "db1"
    assert caught.value.reason == (
        "answer refused: deliver answer: Expected `str`, got `int` - at "
        "`$.provider[0].outcomes[0].login`"
    )
    assert node_of(pair["provider"]) == "db1"


def test_validation_names_the_path_without_an_agent():
    with pytest.raises(MessageError, match=r"probe request: .* at `\$.targets\[0\]`"):
        messages.PROBE.request_of({"targets": [{"pair": "p"}]})
    with pytest.raises(MessageError, match=r"state answer: Invalid enum value 'both'"):
        messages.STATE.answer_of(
            {
                "node": "n",
                "fingerprint": "f",
                "holdings": [{"end": "both", "pair": "p", "generation": 1, "digest": "d"}],
            }
        )


def login_report(verdict: str) -> dict:
    return {
        "verdict": verdict,
        "reason": "r",
        "latency_ms": 1.0,
        "used_password": True,
        "client_addr": None,
        "loopback": False,
        "system_user": None,
    }


def test_verdict_outcome_drift_and_end_names_are_the_cores():
    """A name the core (meshtui/model.py) does not know is refused naming the field; a known
    one arrives as the core's member, not a string that merely equals it."""
    probe = {"verdict": "accepted", "reason": "r", "loopback": False, "control": None}
    answer = {
        "results": [
            {"pair": "p", "digest": None, "result": {**probe, "login": login_report("maybe")}}
        ]
    }
    with pytest.raises(
        MessageError,
        match=r"Invalid enum value 'maybe' - at `\$.results\[0\].result.login.verdict`",
    ):
        messages.PROBE.answer_of(answer)
    answer["results"][0]["result"]["login"]["verdict"] = "accepted"
    got = messages.PROBE.answer_of(answer)["results"][0]["result"]
    assert got is not None and got["verdict"] is Verdict.ACCEPTED
    assert got["login"]["verdict"] is Verdict.ACCEPTED
    outcome = {"login": "l", "outcome": "sort of", "reason": ""}
    delivered = {
        "provider": [
            {"provider": "db1/postgres", "provision": "x", "ok": True, "outcomes": [outcome]}
        ],
        "consumer": [],
    }
    with pytest.raises(
        MessageError,
        match=r"Invalid enum value 'sort of' - at `\$.provider\[0\].outcomes\[0\].outcome`",
    ):
        messages.DELIVER.answer_of(delivered)
    outcome["outcome"] = "unchanged"
    assert (
        messages.DELIVER.answer_of(delivered)["provider"][0]["outcomes"][0]["outcome"]
        is OutcomeName.UNCHANGED
    )
    inspected = {
        "provider": "db1/postgres",
        "provision": "x",
        "ok": True,
        "logins": [{"login": "l", "verdict": "fine", "reason": ""}],
    }
    state = {"node": "db1", "fingerprint": "f", "inspected": [inspected]}
    with pytest.raises(
        MessageError,
        match=r"Invalid enum value 'fine' - at `\$.inspected\[0\].logins\[0\].verdict`",
    ):
        messages.STATE.answer_of(state)
    inspected["logins"][0]["verdict"] = "changed"
    state["holdings"] = [{"end": "provider", "pair": "p", "generation": 1, "digest": "d"}]
    got_state = messages.STATE.answer_of(state)
    assert got_state["inspected"][0]["logins"][0]["verdict"] is Drift.CHANGED
    assert got_state["holdings"][0]["end"] is End.PROVIDER


if __name__ == "__main__":
    serve_miswired(Path(sys.argv[1]), sys.argv[2])


def test_a_delta_and_its_refusal_have_their_shapes(mesh):
    """A provider set with ``base`` (and ``removed``) is a deliver request; a delta on a base the
    node does not hold comes back as a ProviderOutcome with ``base_refused``, nothing written."""
    sets, _, _, _ = planned(mesh)
    with agents(mesh) as client:
        whole = client.call("db1", messages.DELIVER, DeliverRequest(provider=sets["db1"]))
        assert whole["provider"][0]["ok"]
        manifest = mesh.root / "srv/db1/postgres/mesh.json"
        before = manifest.read_bytes()
        delta = {**sets["db1"][0], "base": {"digest": "0" * 64}, "removed": ["nobody"]}
        request = DeliverRequest(provider=[delta])
        assert messages.DELIVER.request_of(json.loads(json.dumps(request))) == request
        answer = client.call("db1", messages.DELIVER, request)  # the client checked the answer
    (got,) = answer["provider"]
    assert not got["ok"] and got["outcomes"] == []
    assert "does not hold the consumer set the delta applies to" in got["base_refused"]
    assert got["error"] == got["base_refused"]
    assert manifest.read_bytes() == before


@pytest.mark.parametrize(
    ("base", "where"),
    [
        ({}, "Object missing required field `digest` - at `$.provider[0].base`"),
        (
            {"digest": "x", "serial": 3},
            "Object contains unknown field `serial` - at `$.provider[0].base`",
        ),
    ],
)
def test_a_misshapen_base_is_refused_naming_the_field(mesh, base, where):
    sets, _, _, _ = planned(mesh)
    with pytest.raises(MessageError) as caught:
        messages.DELIVER.request_of({"provider": [{**sets["db1"][0], "base": base}]})
    assert where in str(caught.value)


def test_a_consumer_set_digest_is_moved_past_a_delta_in_the_deltas_size():
    from meshtui.protocol.messages import ConsumerLine, consumer_set_digest, rebased_digest

    lines = [ConsumerLine(f"l{i}", "app1", f"m{i}", "10.0.0.2", {"database": f"d{i}"}, f"g{i}")
             for i in range(50)]  # fmt: skip
    base = consumer_set_digest(lines)
    assert consumer_set_digest(reversed(lines)) == base  # any order
    new = lines[7]._replace(digest="rotated")
    moved = rebased_digest(base, [lines[7]], [new])
    assert moved == consumer_set_digest([*lines[:7], new, *lines[8:]])
    assert moved != base
    assert rebased_digest(moved, [new], [lines[7]]) == base
    # one field of one line differs: another digest
    assert consumer_set_digest([lines[0]._replace(at="10.0.0.3"), *lines[1:]]) != base
    assert consumer_set_digest(lines[1:]) != base  # a line missing
