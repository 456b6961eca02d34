"""A read-only controller never loads ``controller.key`` and never sends an agent a request.

Every public method of :class:`Controller` either answers from the inventory or raises
ReadOnlyError; the ones that would reach an agent say so and name the nodes. The one read it
does make is ``verify_anchors``: an unsigned ``GET /v1/anchor`` (the audit head each node
keeps), which needs no key and changes nothing; it is counted apart. The agents are
real (real sockets) and write down every request they receive; opens of the key are recorded by
an audit hook, and the same calls behave the same with the key gone from the state folder.
"""

from __future__ import annotations

import inspect
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from meshtui.atomic import write_private
from meshtui.controller.act import drill as drill_mod
from meshtui.controller.act import probe as probe_mod
from meshtui.controller.act import push as push_mod
from meshtui.controller.act import rotate as rotate_mod
from meshtui.controller.core import Controller
from meshtui.controller.plan.resolve import resolve_nodes
from meshtui.controller.reports import no_progress
from meshtui.errors import ReadOnlyError
from tests.fix_counted_agents import (
    GITEA,
    GRAFANA,
    CountedMesh,
    counted_mesh,
    folder_digest,
    watch_key_opens,
    written,
)

pytestmark = pytest.mark.slow

ALL = "app1, app2, db1"


@pytest.fixture
def mesh() -> Iterator[CountedMesh]:
    yield from counted_mesh()


def conninfo_file(root: Path) -> Path:
    """A private conninfo file naming a server nobody runs (``leases`` reads it, connects
    only when a turn is taken)."""
    path = root / "leases.conninfo"
    if not path.exists():
        write_private(path, b"host=/nonexistent dbname=meshtui\n")
    return path


def calls(mesh: CountedMesh) -> dict[str, list[tuple[Callable[[Controller], Any], str | None]]]:
    """Per public method: the calls to make, and None (answers) or the nodes a refusal names
    ("" for a refusal that contacts nobody, such as declare, which only writes)."""
    return {
        "open": [(lambda c: Controller.open(mesh.state, read_only=True).close(), None)],
        "close": [(lambda c: c.close(), None)],
        "read_only": [(lambda c: c.read_only, None)],
        "status": [(lambda c: c.status(), None), (lambda c: c.status([GITEA]), None)],
        "summary": [(lambda c: c.summary(), None)],
        "resolve_pairs": [(lambda c: c.resolve_pairs([GITEA, GRAFANA]), None)],
        "pairs_of_provider": [(lambda c: c.pairs_of_provider("db1/postgres"), None)],
        "live_pairs": [(lambda c: c.live_pairs(), None)],
        "pair_detail": [(lambda c: c.pair_detail(GITEA), None)],
        "inventory_stamp": [(lambda c: c.inventory_stamp(mesh.state), None)],
        "hosts": [(lambda c: c.hosts(), None), (lambda c: c.hosts(check=True), ALL)],
        "events": [(lambda c: c.events(), None), (lambda c: c.events(2), None)],
        "schedule": [(lambda c: c.schedule(), None)],
        "watch_heartbeat": [(lambda c: c.watch_heartbeat(), None)],
        "leadership": [(lambda c: c.leadership(mesh.state), None)],
        "verify_chain": [(lambda c: c.verify_chain(), None)],
        "verify_anchors": [(lambda c: c.verify_anchors(), None)],
        "keyring": [(lambda c: c.keyring(), None)],
        "doctor": [(lambda c: c.doctor(), ALL)],
        "export_events": [(lambda c: c.export_events("json"), None)]
        + [(lambda c: c.export_events("csv"), None)],
        "keys": [(lambda c: c.keys(), "an agent")],
        "agents": [(lambda c: c.agents(), "an agent")],
        "contact": [(lambda c: c.contact("a test", ["db1"]), "db1")],
        "declare": [(lambda c: c.declare(mesh.decl), "")],
        "push": [(lambda c: c.push(), ALL)],
        "plan_rotation": [(lambda c: c.plan_rotation([GITEA]), "app1, db1")],
        "rotate": [(lambda c: c.rotate([GITEA, GRAFANA]), ALL)],
        "probe": [(lambda c: c.probe(), "app1, app2"), (lambda c: c.probe([GITEA]), "app1")],
        "drill": [(lambda c: c.drill([GRAFANA]), "app2, db1")],
        "watch": [(lambda c: c.watch(stop=threading.Event(), notify_timeout=1, tick=1), "")],
        "parse_listen": [(lambda c: c.parse_listen("127.0.0.1:9713"), None)],
        "secrets": [(lambda c: c.secrets(), None)],
        "draining": [(lambda c: c.draining(), None)],
        "rotations": [(lambda c: c.rotations(c.status()), None)],
        "change_feed": [(lambda c: c.change_feed(mesh.state), None)],
        "leases": [(lambda c: c.leases(conninfo_file(mesh.root)).server, None)],
        "share_digest_key": [(lambda c: c.share_digest_key(), "")],
        "secret_put": [(lambda c: c.secret_put("app1/gitea", "smtp", b"x", "test"), "")],
        "secret_rotate": [(lambda c: c.secret_rotate("app1/gitea", "session_key"), "")],
        "secret_drill": [(lambda c: c.secret_drill("app1/gitea", "session_key"), "")],
        "rotate_secrets": [(lambda c: c.rotate_secrets([GITEA]), "")],
        "write_export": [
            (lambda c: c.write_export(mesh.root / f"export-{uuid.uuid4().hex}.json", "[]"), None)
        ],
    }


def run_every_method(mesh: CountedMesh) -> list[str]:
    """Call every public method read-only; returns what each did, in words."""
    table = calls(mesh)
    public = {name for name, _ in inspect.getmembers(Controller) if not name.startswith("_")}
    assert public <= set(table), f"add these to the table: {sorted(public - set(table))}"
    seen = []
    for name in sorted(public):
        for call, refusal in table[name]:
            with Controller.open(mesh.state, read_only=True) as ctl:
                try:
                    result = call(ctl)
                except ReadOnlyError as exc:
                    text = str(exc)
                    assert refusal is not None, f"{name} refused: {text}"
                    if refusal:
                        assert text.startswith("read-only: "), text
                        assert f"would contact {refusal};" in text, text
                    seen.append(f"{name}: {text}")
                    continue
                assert refusal is None, f"{name} answered {result!r} instead of refusing"
                seen.append(f"{name}: {result!r}")
    return seen


def test_every_public_method_answers_or_refuses_without_the_key(mesh: CountedMesh) -> None:
    before = mesh.requests()
    state = folder_digest(mesh.state)
    opened = watch_key_opens()

    with_key = run_every_method(mesh)
    assert opened == [], "a read-only controller opened controller.key"

    key = mesh.state / "controller.key"
    aside = mesh.root / "controller.key.aside"
    key.rename(aside)
    try:
        without_key = run_every_method(mesh)
    finally:
        aside.rename(key)
    assert without_key == with_key  # the key's absence changes nothing

    assert opened == []
    after = mesh.requests()
    assert signed(after) == signed(before), "an agent received a signed request"
    # the one unsigned read: verify_anchors asked each node for its audit head, twice
    assert {n: reads(after[n]) - reads(before[n]) for n in after} == {
        "app1": 2,
        "app2": 2,
        "db1": 2,
    }
    assert written(state, folder_digest(mesh.state)) == {}


def signed(requests: dict[str, list[str]]) -> dict[str, list[str]]:
    """Every request but the unsigned read of the audit head (``GET /v1/anchor``)."""
    return {n: [r for r in rs if r != "GET /v1/anchor"] for n, rs in requests.items()}


def reads(requests: list[str]) -> int:
    """How many unsigned reads of the audit head a node received."""
    return requests.count("GET /v1/anchor")


def test_the_gate_is_below_the_public_methods(mesh: CountedMesh) -> None:
    """Code that skips the public methods and calls an action's module still meets the gate."""
    before = mesh.requests()
    opened = watch_key_opens()
    direct: list[Callable[[Controller], Any]] = [
        lambda c: resolve_nodes(c, ["app1", "db1"]),
        lambda c: rotate_mod.plan(c, [GITEA]),
        lambda c: rotate_mod.rotate(c, [GITEA], no_progress),
        lambda c: push_mod.push(c, no_progress),
        lambda c: probe_mod.probe(c, [GITEA], no_progress),
        lambda c: drill_mod.drill_one(c, GITEA, no_progress),
    ]
    for call in direct:
        with Controller.open(mesh.state, read_only=True) as ctl, pytest.raises(ReadOnlyError):
            call(ctl)
    assert opened == []
    assert mesh.requests() == before


def test_the_counters_count(mesh: CountedMesh) -> None:
    """The control: a writable controller's check reaches every agent and reads the key."""
    before = mesh.requests()
    opened = watch_key_opens()
    with Controller.open(mesh.state) as ctl:
        hosts = ctl.hosts(check=True)
    assert {h.name: h.reachable for h in hosts} == {"app1": True, "app2": True, "db1": True}
    after = mesh.requests()
    assert all(len(after[n]) == len(before[n]) + 1 for n in after), after
    assert after["db1"][-1] == "POST /v1"
    assert opened and all(p.endswith("controller.key") for p in opened)
