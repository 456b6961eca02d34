"""What an agent leaves until its answer is sent: nothing at all when nothing is left (no
background task, each costs the server a hop to a worker thread), else the audit head's
readable copy, written once the answer is out (real agent state, the real Starlette app)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx

from meshtui import crypto
from meshtui.controller.core import init_keys
from meshtui.host.policy.node_policy import write_default
from meshtui.host.server.routes import Agent
from meshtui.host.server.serve import build_app
from meshtui.host.state import identity
from meshtui.protocol import wire

DIGEST = "ab" * 32


def _agent(tmp_path: Path) -> tuple[Agent, crypto.PrivateKeys, Path]:
    pub, _ = init_keys(tmp_path / "state")
    folder = tmp_path / "app1"
    identity.init("app1", folder, pub)
    write_default(folder, "app1")  # deny by default: nothing here delivers
    return (
        Agent(identity.load(folder)),
        crypto.load_private(tmp_path / "state/controller.key"),
        folder,
    )


def _state(keys: crypto.PrivateKeys, seq: int | None = None) -> dict[str, str]:
    head = None
    if seq is not None:
        signed = crypto.b64(keys.sign(wire.head_message(seq, DIGEST)))
        head = wire.SignedHead(seq, DIGEST, signed)
    env, _ = wire.envelope(wire.STATE, {}, sender="controller", to="app1", keys=keys, head=head)
    return env


def test_an_answer_with_nothing_left_to_do_leaves_nothing_to_run(tmp_path: Path) -> None:
    agent, keys, folder = _agent(tmp_path)
    status, _, after = agent.answer(_state(keys))
    assert (status, after) == (200, None)
    status, _, after = agent.answer({"not": "an envelope"})
    assert status >= 400 and after is None
    # a longer audit head: durable before the answer, its readable copy written after it
    status, _, after = agent.answer(_state(keys, 3))
    assert status == 200 and after is not None
    assert not (folder / "audit-head.json").exists()
    after()
    assert DIGEST in (folder / "audit-head.json").read_text()


def test_the_app_runs_what_is_left_once_the_answer_is_sent(tmp_path: Path) -> None:
    agent, keys, folder = _agent(tmp_path)
    copy = folder / "audit-head.json"

    async def talk() -> None:
        transport = httpx.ASGITransport(app=build_app(agent))  # awaits the app to its end
        async with httpx.AsyncClient(transport=transport, base_url="http://agent") as client:
            for body in (json.dumps(_state(keys)).encode(), b"not json"):
                answer = await client.post("/v1", content=body)
                assert answer.status_code in (200, 403)  # not JSON: not an envelope
                assert not copy.exists()
            answer = await client.post("/v1", content=json.dumps(_state(keys, 4)).encode())
            assert answer.status_code == 200
            assert DIGEST in copy.read_text()

    asyncio.run(talk())
