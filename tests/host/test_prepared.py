"""Consumer credentials written ahead (``prepare``), against real agents over their sockets:
nothing is held, named or readable until a delivery of the same item names the prepared file;
another delivery of the pair, or time, lets it go; an older generation is not prepared."""

from __future__ import annotations

import copy
import json
import os
import stat
import time
from pathlib import Path

import httpx
import pytest

from meshtui import crypto
from meshtui.controller.agents import client as client_module
from meshtui.controller.plan.planner import Planner
from meshtui.host import credential_files as files
from meshtui.host.receive.prepared import Prepared
from meshtui.protocol import messages, wire
from meshtui.protocol.messages import ConsumerItem

GITEA = "database:app1/gitea->db1/postgres"
CREDENTIAL = "srv/app1/gitea/db.password"


@pytest.fixture
def mesh(mesh_with_agents):
    # a command provisioner keeps these tests about the agent, not PostgreSQL
    return mesh_with_agents(
        consumers={"app1": ["gitea"]}, port=5432, admin=None, provisioner=["true"]
    )


def item_of(mesh) -> ConsumerItem:
    with mesh.controller() as ctl:
        (item,) = Planner(ctl.inventory).consumer_items([GITEA], {})["app1"]
        return item


def call(mesh, kind, payload):
    with mesh.controller() as ctl, ctl.agents() as agents:
        return agents.call("app1", kind, payload)


def unnamed_in(pid: int, folder: Path) -> list[int]:
    """Inodes of the files under no name that process ``pid`` holds open in ``folder``."""
    found = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith(f"{folder}/#") and target.endswith("(deleted)"):
                found.append(os.stat(f"/proc/{pid}/fd/{fd}").st_ino)
        except OSError:
            continue  # closed meanwhile
    return found


def test_a_prepared_credential_is_held_by_nobody_until_its_delivery_names_it(mesh):
    item = item_of(mesh)
    credential = mesh.root / CREDENTIAL
    agent = mesh.procs["app1"].pid
    (got,) = call(mesh, messages.PREPARE, {"consumer": [item]})["consumer"]
    assert got == {"pair": GITEA, "ok": True}
    # written ahead, under no name: the folder shows nothing, the file does not exist
    assert os.listdir(credential.parent) == []
    (prepared,) = unnamed_in(agent, credential.parent)
    (done,) = call(mesh, messages.DELIVER, {"consumer": [item]})["consumer"]
    assert done["ok"]
    # the delivery named the very file prepared ahead, and the agent let go of it
    assert os.stat(credential).st_ino == prepared
    assert crypto.secret_digest(credential.read_bytes()) == item["digest"]
    assert stat.S_IMODE(os.stat(credential).st_mode) == 0o600
    assert os.listdir(credential.parent) == ["db.password"]
    assert unnamed_in(agent, credential.parent) == []


def test_another_delivery_of_the_pair_lets_the_prepared_one_go(mesh):
    item = item_of(mesh)
    credential = mesh.root / CREDENTIAL
    agent = mesh.procs["app1"].pid
    call(mesh, messages.PREPARE, {"consumer": [item]})
    assert len(unnamed_in(agent, credential.parent)) == 1  # prepared 0600
    other = copy.deepcopy(item)
    other["mode"] = "0640"  # not what was prepared: written in full, as declared
    (done,) = call(mesh, messages.DELIVER, {"consumer": [other]})["consumer"]
    assert done["ok"]
    assert stat.S_IMODE(os.stat(credential).st_mode) == 0o640  # not the prepared file
    assert crypto.secret_digest(credential.read_bytes()) == item["digest"]
    assert unnamed_in(agent, credential.parent) == []
    assert os.listdir(credential.parent) == ["db.password"]


def test_an_older_generation_is_not_prepared(mesh):
    item = item_of(mesh)
    (done,) = call(mesh, messages.DELIVER, {"consumer": [item]})["consumer"]
    assert done["ok"]
    older = copy.deepcopy(item)
    older["generation"] = item["generation"] - 1
    (got,) = call(mesh, messages.PREPARE, {"consumer": [older]})["consumer"]
    assert not got["ok"] and "older than generation" in got["error"]
    credential = mesh.root / CREDENTIAL
    assert unnamed_in(mesh.procs["app1"].pid, credential.parent) == []


def made_ahead(folder: Path, pair: str = GITEA) -> tuple[ConsumerItem, files.Unnamed]:
    """An item and its credential prepared in ``folder`` (no agent: the store alone)."""
    want = files.resolve_access(None, None, "0600")
    unnamed = files.prepare_credential(folder / "db.password", want, lambda: b"s3cret")
    item = ConsumerItem(
        pair=pair,
        node="app1",
        generation=2,
        digest=crypto.secret_digest(b"s3cret"),
        file=str(folder / "db.password"),
        owner=None,
        group=None,
        mode="0600",
        reload=[],
        sealed="",
    )
    return item, unnamed


def test_past_the_limit_a_credential_is_not_held_prepared(tmp_path):
    store = Prepared(limit=1)
    first, kept = made_ahead(tmp_path / "a")
    second, refused = made_ahead(tmp_path / "b", pair="database:app2/gitea->db1/postgres")
    assert store.put(first, kept) and not store.room(second["pair"])
    assert not store.put(second, refused)
    assert refused.fd == -1 and unnamed_in(os.getpid(), tmp_path / "b") == []
    assert store.take(second) is None and store.take(first) is kept
    kept.close()


def test_a_prepared_credential_never_delivered_is_let_go(tmp_path):
    folder = tmp_path / "srv"
    item, unnamed = made_ahead(folder)
    store = Prepared(keep_s=0.2)
    store.put(item, unnamed)
    assert unnamed_in(os.getpid(), folder) and os.listdir(folder) == []
    deadline = time.monotonic() + 10
    while len(store) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(store) == 0 and unnamed.fd == -1
    assert unnamed_in(os.getpid(), folder) == [] and os.listdir(folder) == []
    assert store.take(item) is None  # its delivery, too late, writes the credential in full


def test_a_prepared_credential_is_held_from_its_rename_and_durable_before_the_write_returns(
    tmp_path, monkeypatch
):
    """A rotation's window ends when the credential's name is there for the consumer's app to
    read (the rename), not after the folder's fsync; that fsync still comes before
    ``write_credential`` returns, so the agent answers only once it survives a crash."""
    folder = tmp_path / "srv"
    item, unnamed = made_ahead(folder)
    path = folder / "db.password"
    synced: list[tuple[float, bool]] = []
    real_fsync = os.fsync

    def slow_fsync(fd: int) -> None:  # the seam: an fsync that takes 0.2 s
        visible = path.exists()
        time.sleep(0.2)
        real_fsync(fd)
        synced.append((time.time(), visible))

    monkeypatch.setattr(os, "fsync", slow_fsync)
    want = files.resolve_access(None, None, "0600")
    held_at = files.write_credential(path, want, item["digest"], lambda: b"unused", unnamed)
    returned = time.time()
    unnamed.close()
    assert path.read_bytes() == b"s3cret"
    ((fsynced_at, visible),) = synced  # the folder's, and only after the name was given
    assert visible
    assert held_at <= fsynced_at - 0.2  # held from the rename, before the fsync began
    assert returned >= fsynced_at  # and durable before it returned


def post(mesh, envelope: dict) -> httpx.Response:
    transport = httpx.HTTPTransport(uds=str(mesh.sockets["app1"]))
    with httpx.Client(transport=transport, base_url="http://agent", timeout=10) as client:
        return client.post("/v1", json=envelope)


def signed(mesh, kind: str, payload: dict) -> dict:
    keys = crypto.load_private(mesh.state / "controller.key")
    env, _ = wire.envelope(kind, payload, sender="controller", to="app1", keys=keys)
    return env


def ledger_lines(mesh) -> list[dict]:
    raw = (mesh.nodes["app1"] / "accepted.log").read_bytes()
    return [json.loads(line) for line in raw.splitlines()]


def test_a_delivery_recorded_with_its_prepare_is_accepted_once_without_a_line_of_its_own(mesh):
    item = item_of(mesh)
    delivery = signed(mesh, wire.DELIVER, {"consumer": [item]})
    seq = wire.seq_of(delivery)
    prepare = signed(mesh, wire.PREPARE, {"consumer": [item], "delivery": seq})
    assert post(mesh, prepare).status_code == 200
    *_, line = ledger_lines(mesh)
    # the prepare's one durable line holds the delivery's number and its generation
    assert line["r"] == [seq] and line["g"] == [["consumer", GITEA, item["generation"]]]
    before = ledger_lines(mesh)

    resp = post(mesh, delivery)

    assert resp.status_code == 200
    assert json.loads(crypto.unb64(resp.json()["body"]))["payload"]["consumer"][0]["ok"]
    assert ledger_lines(mesh) == before  # its acceptance was on disk already
    again = post(mesh, delivery)
    assert again.status_code == 403
    assert "replayed" in json.loads(crypto.unb64(again.json()["body"]))["payload"]["error"]
    mesh.start("app1")  # restart: what was recorded ahead is refused like any used number
    after = post(mesh, delivery)
    assert after.status_code == 403
    assert "replayed" in json.loads(crypto.unb64(after.json()["body"]))["payload"]["error"]


def test_a_number_recorded_ahead_then_a_delivery_of_something_else_is_recorded(mesh):
    item = item_of(mesh)
    other = copy.deepcopy(item)
    other["generation"] = item["generation"] + 1  # not what the prepare recorded
    delivery = signed(mesh, wire.DELIVER, {"consumer": [other]})
    prepare = signed(mesh, wire.PREPARE, {"consumer": [item], "delivery": wire.seq_of(delivery)})
    assert post(mesh, prepare).status_code == 200
    before = ledger_lines(mesh)
    assert post(mesh, delivery).status_code == 200
    *_, line = ledger_lines(mesh)
    assert len(ledger_lines(mesh)) == len(before) + 1
    assert line["g"] == [["consumer", GITEA, other["generation"]]]


def test_a_fifo_planted_after_the_prepare_is_refused_not_replaced(mesh):
    item = item_of(mesh)
    credential = mesh.root / CREDENTIAL
    call(mesh, messages.PREPARE, {"consumer": [item]})
    os.mkfifo(credential, 0o600)
    (done,) = call(mesh, messages.DELIVER, {"consumer": [item]})["consumer"]
    assert not done["ok"] and "a FIFO, not a regular file" in done["error"]
    assert stat.S_ISFIFO(os.lstat(credential).st_mode)
    assert unnamed_in(mesh.procs["app1"].pid, credential.parent) == []


def test_a_delivery_signed_ahead_is_sent_as_built_then(mesh, monkeypatch):
    """A rotation's consumer delivery is encoded when it is signed, ahead of its window: the
    send inside the window builds nothing (and the agent takes it as signed)."""
    item = item_of(mesh)
    with mesh.controller() as ctl, ctl.agents() as agents:
        client = agents.client("app1")
        ahead = client.sign(messages.DELIVER, {"consumer": [item]}, built=True)
        prepare = {"consumer": [item], "delivery": ahead.seq}
        assert client.call(messages.PREPARE, prepare)["consumer"][0]["ok"]

        def built_now(*args, **kwargs):
            raise AssertionError("the delivery signed ahead was built again when sent")

        sent = []
        exchange = client._channel.exchange

        def written(request, timeout):
            sent.append((request, timeout))
            return exchange(request, timeout)

        monkeypatch.setattr(client_module, "request_bytes", built_now)
        monkeypatch.setattr(client_module, "json_body", built_now)
        monkeypatch.setattr(client._channel, "exchange", written)
        answer = client.call(messages.DELIVER, {"consumer": [item]}, timeout=7.0, signed=ahead)
    (done,) = answer["consumer"]
    assert done["ok"]
    assert sent == [(ahead.http, 7.0)] and ahead.http is not None
    credential = mesh.root / CREDENTIAL
    assert crypto.secret_digest(credential.read_bytes()) == item["digest"]


@pytest.mark.parametrize("built", [False, True])
def test_a_delivery_recorded_ahead_still_lands_after_the_agent_restarted(mesh, built):
    item = item_of(mesh)
    with mesh.controller() as ctl, ctl.agents() as agents:
        client = agents.client("app1")
        ahead = client.sign(messages.DELIVER, {"consumer": [item]}, built=built)
        prepare = {"consumer": [item], "delivery": ahead.seq}
        assert client.call(messages.PREPARE, prepare)["consumer"][0]["ok"]
        mesh.start("app1")  # restart: the number recorded ahead is now used, the file gone
        (done,) = client.call(messages.DELIVER, {"consumer": [item]}, signed=ahead)["consumer"]
    assert done["ok"]
    credential = mesh.root / CREDENTIAL
    assert crypto.secret_digest(credential.read_bytes()) == item["digest"]
