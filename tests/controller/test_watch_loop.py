"""The watch loop through its clock seam, on a real inventory whose agents are all absent (the
Unix sockets do not exist): backoff, never rotating around a silent node, overdue alerts, the
exit status, the audit events, and the ``--metrics`` bind rules."""

from __future__ import annotations

import collections
import os
from typing import Any

import pytest

from meshtui.controller.core import Controller
from meshtui.controller.read.heartbeat import Heartbeat
from meshtui.controller.read.schedule import probe_slot
from meshtui.controller.unattended.metrics import parse_listen
from meshtui.controller.unattended.notify import Alert
from meshtui.controller.unattended.watch import BACKOFF_MIN_S, Watch
from meshtui.errors import InputError
from tests.fix_mesh import Mesh, modules

PAIRS = ["app1/gitea", "app2/grafana"]


class FakeTime:
    """The seam: a clock the loop's sleep advances, stopping the watch after ``until``."""

    def __init__(self, watch_stop: Any = None, until: float = 60.0) -> None:
        self.t = 1_000_000_000.0
        self.start = self.t
        self.until = until
        self.stop = watch_stop

    def clock(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += max(seconds, 0.5)
        if self.t - self.start >= self.until and self.stop is not None:
            self.stop.set()


@pytest.fixture
def declared(mesh: Mesh) -> Mesh:
    spec = mesh.spec(modules(PAIRS))
    path = mesh.write(spec, extra='\n[policy]\nrotate_every = "30s"\nprobe_every = "10s"\n')
    assert mesh.cli("declare", path).code == 0
    return mesh


def test_silent_nodes_back_off_are_never_rotated_around_and_turn_overdue(declared: Mesh) -> None:
    fake = FakeTime(until=120.0)
    got: list[Alert] = []
    lines: list[str] = []
    with Controller.open(declared.state) as ctl:
        since = min(d.since for d in ctl.schedule())
        fake.t = fake.start = since + 1.0
        watch = Watch(ctl, notify=got.append, clock=fake.clock, sleep=fake.sleep, log=lines.append)
        fake.stop = watch.stop
        assert watch.run() == 0
        events = ctl.events()
        gens = {r.pair: r.generation for r in ctl.status()}
    kinds = collections.Counter(e.kind for e in events)
    assert kinds["watch-start"] == kinds["watch-stop"] == 1
    assert all(e.operator == "watch" for e in events if e.kind != "declare")
    # pushes back off: 2, 4, 8, 16, 32, 64 s between tries within two minutes, not one a second
    assert 4 <= kinds["push"] <= 8, kinds
    assert any("does not answer; retrying with backoff" in line for line in lines)
    # nothing was minted: the silent nodes' pairs keep generation 1 and turn overdue
    assert kinds["rotate-begin"] == 0 and set(gens.values()) == {1}
    overdue = [a for a in got if a.event == "overdue"]
    assert {a.pair for a in overdue} == set(gens)
    assert "still on its old credential" in overdue[0].reason
    beat = Heartbeat.read(declared.state)
    assert beat is not None and beat.stopped_at is not None and not beat.running()
    assert beat.pid == os.getpid() and beat.cycles > 50


def test_probe_slots_spread_the_load_evenly() -> None:
    interval, pairs = 300.0, 3000
    per_second = collections.Counter(
        int(probe_slot(f"database:app{i}/m->db1/postgres", interval, 5000.0) - 5000.0)
        for i in range(pairs)
    )
    assert len(per_second) == interval and max(per_second.values()) < 4 * pairs / interval
    slot = probe_slot("p", interval, 5000.0)
    assert 5000.0 < slot <= 5300.0 and probe_slot("p", interval, slot) == slot + interval


def test_backoff_doubles_from_the_minimum() -> None:
    from meshtui.controller.unattended.watch import Backoff

    b = Backoff()
    waits = []
    for _ in range(4):
        b.failed(100.0)
        waits.append(b.retry_at - 100.0)
    assert waits == [BACKOFF_MIN_S * 2**i for i in range(4)]


@pytest.mark.parametrize(
    ("text", "allow", "want"),
    [
        ("127.0.0.1:9713", False, ("127.0.0.1", 9713)),
        ("localhost:9713", False, ("127.0.0.1", 9713)),
        ("[::1]:9713", False, ("::1", 9713)),
        ("10.0.0.5:9713", True, ("10.0.0.5", 9713)),
    ],
)
def test_metrics_listen_addresses(text: str, allow: bool, want: tuple[str, int]) -> None:
    assert parse_listen(text, allow_remote=allow) == want


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("0.0.0.0:9713", "not a loopback address"),
        ("10.0.0.5:9713", "--metrics-allow-remote"),
        ("9713", "HOST:PORT"),
        ("127.0.0.1:99999", "HOST:PORT"),
        ("example.org:9713", "not an IP address"),
    ],
)
def test_metrics_refuses_remote_or_bad_binds(text: str, words: str) -> None:
    with pytest.raises(InputError, match=words):
        parse_listen(text)


def test_cli_watch_refuses_a_remote_bind_before_doing_anything(declared: Mesh) -> None:
    before = declared.tables()
    result = declared.cli("watch", "--metrics", "0.0.0.0:9713")
    assert result.code == 2 and "--metrics-allow-remote" in result.err
    assert declared.tables() == before


def test_cli_rotate_due_is_one_choice_among_the_others(declared: Mesh) -> None:
    result = declared.cli("rotate", "--due", "--all", "--yes")
    assert result.code == 2 and "exactly one" in result.err


def test_heartbeat_is_not_read_through_a_symlink_or_a_fifo(tmp_path: Any) -> None:
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text('{"pid": 1, "started_at": "x", "cycles": 1}')
    state = tmp_path / "state"
    state.mkdir()
    assert Heartbeat.read(state) is None  # none written yet
    (state / "watch.json").symlink_to(elsewhere)
    assert Heartbeat.read(state) is None
    (state / "watch.json").unlink()
    os.mkfifo(state / "watch.json")
    assert Heartbeat.read(state) is None  # and it did not block
    (state / "watch.json").unlink()
    (state / "watch.json").write_text('{"pid": 0, "started_at": "x", "cycles": 1}')
    assert Heartbeat.read(state) is None  # pid 0 would name our own process group
    (state / "watch.json").write_bytes(elsewhere.read_bytes())
    beat = Heartbeat.read(state)
    assert beat is not None and beat.pid == 1 and beat.running()


def test_a_hung_node_backs_off_from_when_the_attempt_gave_up_and_alerts_once(
    declared: Mesh, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hung node (each try waits for the 10 s timeout) is not tried, and alerted, every ~10 s:
    a 2 s backoff counted from the try's start would be over when it gave up. The
    seam: the controller's rotate, push and probe, so only the watch's own timing is tested."""
    from meshtui.controller.reports import PushReport
    from meshtui.errors import NotResolvedError

    fake = FakeTime(until=120.0)
    got: list[Alert] = []
    tries: list[float] = []
    with Controller.open(declared.state) as ctl:
        due = max(d.due_at or 0.0 for d in ctl.schedule())
        fake.t = fake.start = due + 1.0

        def hung_rotate(ids: list[str], *_: Any, **_k: Any) -> Any:
            tries.append(fake.t)
            fake.t += 10.0  # the agent's timeout
            raise NotResolvedError({"db1": "timed out after 10 s"})

        monkeypatch.setattr(ctl, "rotate", hung_rotate)
        monkeypatch.setattr(ctl, "push", lambda *_: PushReport([], [], {}))
        monkeypatch.setattr(ctl, "probe", lambda *_a, **_k: [])
        watch = Watch(
            ctl, notify=got.append, clock=fake.clock, sleep=fake.sleep, log=lambda _l: None
        )
        # every end holds its generation, as after a push: the hung node is met by rotations only
        monkeypatch.setattr(watch, "_needs_push", lambda _rows, _now: False)
        fake.stop = watch.stop
        watch.run()
    gaps = [b - a for a, b in zip(tries, tries[1:], strict=False)]
    # each retry waits its backoff (2, 4, 8, 16, 32 s) after the 10 s try, not one cycle
    assert all(g >= 10.0 + BACKOFF_MIN_S * 2**i for i, g in enumerate(gaps)), gaps
    assert 3 <= len(tries) <= 6, tries
    failed = [a for a in got if a.event == "rotation-failed"]
    assert len({a.pair for a in failed}) == len(failed)  # once per pair, not once per try
