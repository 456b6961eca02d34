"""An overlap rotation end to end in the lab (root, namespaces, real Redis and agents): a client
in the consumer's namespace reconnects every ~1 ms with whatever its credential file holds at
that instant, through a whole rotation, and counts refusals: none for an overlap; a swap of
the same pair, beside it, shows its window. The old credential is refused at the end, and a
controller killed between two steps leaves the pair all-new with the old removed once push
recovers the journal."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from meshtui.controller.core import Controller
from meshtui.controller.plan.planner import Planner, target_of
from meshtui.lab import mesh as lab_mesh
from meshtui.model import OVERLAP, OVERLAP_OPEN, RotationState, node_of
from tests.fix_lab import cli, running_lab
from tests.lab.overlap_app import ready

pytestmark = [pytest.mark.root, pytest.mark.slow]

PROVISIONS = {"redis": "cache", "openbao": "secret"}
"""Each kind that can overlap, with the provision the lab's server of it provides."""

RECONNECT = r"""
import os, sys, time
from meshtui.contracts.probe_types import ProbeOptions, ProbeTarget
from meshtui.host.probe_runner import probe_one
file, host, port, ca, login, kind, dbname, lag, stop = sys.argv[1:10]
options = ProbeOptions(timeout=2.0, control=False)
tries = refused = 0
seen = {}
while not os.path.exists(stop):
    password = open(file).read().strip()
    time.sleep(float(lag))  # between reading the file and logging in
    target = ProbeTarget(host=host, port=int(port), user=login, password=password,
                         dbname=dbname, kind=kind, ca=ca or None, tls=bool(ca))
    verdict = str(probe_one(target, options).login.verdict)
    refused += verdict == "refused"
    seen[verdict] = seen.get(verdict, 0) + 1
    tries += 1
    if tries == 1:
        open(stop + ".ready", "w").close()  # loaded and connecting: the test may act
    time.sleep(0.001)
print(tries, refused)
print(seen, file=sys.stderr)
"""


@dataclass(frozen=True)
class Lab:
    """The lab with one overlapping kind's pairs declared ``rotation = "overlap"``."""

    state: Path
    built: Any
    gitea: str
    wiki: str


@pytest.fixture(scope="module", params=sorted(PROVISIONS))
def lab(request: pytest.FixtureRequest) -> Iterator[Lab]:
    kind = request.param
    kinds = {k: k == kind for k in ("redis", "openbao", "seaweedfs")}
    with running_lab(f"meshtui-overlap-{kind}-", kinds=kinds) as (state, built):
        text = built.declaration.read_text()
        overlapped = state / "overlap.toml"
        needle = f'kind = "{kind}"'
        assert needle in text
        overlapped.write_text(
            text.replace(needle, f'{needle}, rotation = "overlap", grace = "5s"', 1)
        )
        with Controller.open(state) as ctl:
            ctl.declare(overlapped)
        provision = PROVISIONS[kind]
        yield Lab(
            state,
            built,
            f"{provision}:app1/gitea->db1/{kind}",
            f"{provision}:app2/wiki->db1/{kind}",
        )


def _reconnecting(
    state: Path, built: Any, pair: str, stop: Path, lag: float = 0.0
) -> subprocess.Popen[str]:
    """A client in the consumer's namespace: the kind's own probe (its real client library), a
    new connection every ~1 ms with what the credential file holds at that instant."""
    with Controller.open(state, read_only=True) as ctl:
        plan = Planner(ctl.inventory, focus=[pair])
        row = plan.pairs[pair]
        target = target_of(row, plan.nodes, plan.modules)
    return subprocess.Popen(
        ["ip", "netns", "exec", built.namespace(node_of(row["consumer"])), sys.executable,
         "-c", RECONNECT, row["file"], target["host"], str(target["port"]),
         target.get("ca") or "", target["login"], target.get("kind") or "postgres",
         target["dbname"], str(lag), str(stop)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _count(
    state: Path, built: Any, pair: str, tmp: Path, act: Any, lag: float = 0.0
) -> tuple[int, int, Any]:
    stop = tmp / "stop"
    proc = _reconnecting(state, built, pair, stop, lag)
    try:
        ready(stop, proc)
        result = act()
        time.sleep(0.5)
    finally:
        stop.touch()
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    print(err)
    tries, refused = map(int, out.split())
    return tries, refused, result


STALL_S = 0.3
"""A slow consumer: the time between the provider holding the new credential and the consumer
holding it, stretched alike for both rotations (the fault seam between the two ends)."""


def _rotate(state: Path, pair: str, stall_at: str) -> Any:
    with Controller.open(state) as ctl:
        ctl.faults = {stall_at: lambda: time.sleep(STALL_S)}  # type: ignore[attr-defined]
        return ctl.rotate([pair])


def test_an_overlap_refuses_no_connection_and_the_old_is_refused_after(
    lab: Lab, tmp_path: Path
) -> None:
    state, built, gitea = lab.state, lab.built, lab.gitea
    act = lambda: _rotate(state, gitea, "overlap:both-accepted")  # noqa: E731
    tries, refused, report = _count(state, built, gitea, tmp_path, act)
    assert report.ok, report
    (pair,) = report.pairs
    assert pair.both_accepted_ms is not None and pair.both_accepted_ms > STALL_S * 1000
    assert pair.old_after == "refused", pair
    print(f"overlap: {tries} connections, {refused} refused")
    assert tries >= 5 and refused == 0, (tries, refused)  # connecting throughout (see ready)


def test_an_app_slow_to_log_in_after_reading_its_file_is_never_refused(
    lab: Lab, tmp_path: Path
) -> None:
    """An app that logs in 0.4 s after reading its credential file (a loaded machine, a client
    that builds a session first), through three overlap rotations: what it read a moment before
    the file changed is still accepted when it logs in (the settle)."""
    state, built, gitea = lab.state, lab.built, lab.gitea

    def rotations() -> list[Any]:
        return [_rotate(state, gitea, "overlap:both-accepted") for _ in range(3)]

    tries, refused, reports = _count(state, built, gitea, tmp_path, rotations, lag=0.4)
    assert all(r.ok for r in reports), reports
    assert tries >= 5 and refused == 0, (tries, refused)


def test_the_drill_of_an_overlap_pair_passes(lab: Lab) -> None:
    with Controller.open(lab.state) as ctl:
        (report,) = ctl.drill([lab.gitea])
        (stored,) = ctl.pair_detail(lab.gitea).drills[:1]
    assert report.ok, (report.reason, report.steps)
    assert [s.verdict for s in report.steps] == ["accepted", "accepted", "refused"]
    assert report.rotation_kind == OVERLAP and report.refused == 0
    assert report.both_accepted_ms is not None and report.both_accepted_ms > 0
    assert stored.report.both_accepted_ms == report.both_accepted_ms  # as the screen reads it


@pytest.mark.parametrize(
    ("point", "moves"),
    [
        ("overlap:both-accepted", 0),  # the consumer not given the new: rolled back
        ("overlap:consumer-holds-new", 0),  # given it, not proved: rolled back, consumer first
        ("overlap:removing-old", 1),  # proved: finished, the old removed
    ],
)
def test_a_controller_killed_mid_overlap_ends_all_old_or_all_new_never_both(
    lab: Lab, tmp_path: Path, point: str, moves: int
) -> None:
    state, wiki = lab.state, lab.wiki

    def die() -> None:
        raise KeyboardInterrupt(point)

    with Controller.open(state) as ctl:
        before = ctl.inventory.pairs([wiki])[0]["generation"]

    def killed_then_pushed() -> None:
        with Controller.open(state) as ctl:
            ctl.faults = {point: die}  # type: ignore[attr-defined]
            with pytest.raises(KeyboardInterrupt):
                ctl.rotate([wiki])
            (open_one,) = ctl.inventory.open_rotations()
            assert open_one["state"] in (RotationState.BOTH_ACCEPTED, RotationState.REMOVING_OLD)
            (row,) = ctl.status([wiki])
            assert row.reason.startswith(f"{OVERLAP_OPEN}: both credentials accepted since ")
            named = [p for p in ctl.doctor().problems if p.check == "overlap"]
            assert [(p.node, p.subject) for p in named] == [("db1", wiki)], named
        with Controller.open(state) as ctl:
            assert ctl.push().ok
            assert not ctl.inventory.open_rotations()

    tries, refused, _ = _count(state, lab.built, wiki, tmp_path, killed_then_pushed)
    assert tries >= 5 and refused == 0, (tries, refused)  # connecting throughout (see ready)
    with Controller.open(state) as ctl:
        assert ctl.inventory.pairs([wiki])[0]["generation"] == before + moves
        (drilled,) = ctl.drill([wiki])  # two passwords held would refuse its first step
    assert drilled.ok, (drilled.reason, drilled.steps)


def test_a_consumer_that_cannot_take_the_new_leaves_the_old_alone_accepted(
    lab: Lab, tmp_path: Path
) -> None:
    state, built, gitea = lab.state, lab.built, lab.gitea
    with Controller.open(state, read_only=True) as ctl:
        row = ctl.inventory.pairs([gitea])[0]
    file = Path(row["file"])
    aside = file.with_name(file.name + ".aside")

    def unwritable() -> None:  # the consumer's file becomes a link: its agent will not write it
        os.link(file, aside)  # the same file under another name, then a link replaces the name
        link = file.with_name(file.name + ".link")  # at once: the app never finds it missing
        link.symlink_to(aside)
        os.replace(link, file)

    def rotate() -> Any:
        with Controller.open(state) as ctl:
            ctl.faults = {"overlap:both-accepted": unwritable}  # type: ignore[attr-defined]
            return ctl.rotate([gitea])

    try:
        tries, refused, report = _count(state, built, gitea, tmp_path, rotate)
    finally:
        if file.is_symlink():
            file.unlink()
            aside.rename(file)
    assert not report.ok and report.outcome in (
        RotationState.ROLLED_BACK,
        RotationState.CONVERGING,
    ), report
    assert report.pairs[0].generation == row["generation"]
    assert tries >= 5 and refused == 0, (tries, refused)  # the old was accepted throughout
    with Controller.open(state) as ctl:
        assert ctl.push().ok
        events = [e for e in ctl.inventory.events(limit=20) if e["kind"] == "rotate"]
        assert events and events[-1]["outcome"] in ("rolled back", "converging"), events[-1]
        # the new one was removed: the next overlap adds one beside the old (two, never three)
        again = ctl.rotate([gitea])
    assert again.ok and again.pairs[0].old_after == "refused", again


def test_a_rotation_mixing_swap_and_overlap_pairs_rotates_each_as_declared(lab: Lab) -> None:
    database = "database:app1/gitea->db1/postgres"  # PostgreSQL: a swap
    with Controller.open(lab.state) as ctl:
        report = ctl.rotate([database, lab.gitea])
    assert report.ok, report
    by_pair = {p.pair: p for p in report.pairs}
    assert by_pair[database].window_ms is not None and by_pair[database].both_accepted_ms is None
    assert by_pair[lab.gitea].both_accepted_ms is not None
    assert by_pair[lab.gitea].old_after == "refused"


def test_the_command_line_says_the_overlap_in_place_of_the_window(lab: Lab) -> None:
    rotated = cli(lab.state, "rotate", "--yes", lab.gitea)
    assert rotated.returncode == 0, rotated.stdout + rotated.stderr
    assert "overlap: both accepted" in rotated.stdout and "old refused" in rotated.stdout
    assert "window" not in rotated.stdout.split(lab.gitea, 1)[1].splitlines()[0]
    drilled = cli(lab.state, "drill", lab.gitea)
    assert drilled.returncode == 0, drilled.stdout + drilled.stderr
    assert "logins refused" in drilled.stdout and "  overlap: both accepted" in drilled.stdout


def test_an_old_that_cannot_be_removed_is_said_until_push_removes_it(
    lab: Lab, tmp_path: Path
) -> None:
    state, gitea = lab.state, lab.gitea
    kind = gitea.rsplit("/", 1)[1]

    def provider_gone() -> None:  # db1's agent stops between the proof and "remove old"
        running = lab_mesh.load(state)
        assert running is not None
        os.kill(running.pids["db1"], signal.SIGTERM)
        while lab_mesh.agent_answers(running.socket("db1")):
            time.sleep(0.05)

    def rotate_then_recover() -> Any:
        with Controller.open(state) as ctl:
            ctl.faults = {"overlap:removing-old": provider_gone}  # type: ignore[attr-defined]
            report = ctl.rotate([gitea])
            (row,) = ctl.status([gitea])
            named = [p for p in ctl.doctor().problems if p.check == "overlap"]
        lab_mesh.up(state, kinds={k: k == kind for k in ("redis", "openbao", "seaweedfs")})
        with Controller.open(state) as ctl:
            assert ctl.push().ok
            assert not ctl.inventory.open_rotations()
        return report, row, named

    tries, refused, (report, row, named) = _count(
        state, lab.built, gitea, tmp_path, rotate_then_recover
    )
    assert report.outcome == RotationState.CONVERGING and report.reason.startswith(OVERLAP_OPEN)
    assert row.reason.startswith(f"{OVERLAP_OPEN}: both credentials accepted since "), row
    assert [(p.node, p.subject) for p in named] == [("db1", gitea)], named
    assert tries >= 5 and refused == 0, (tries, refused)  # connecting throughout (see ready)
    with Controller.open(state) as ctl:
        (drilled,) = ctl.drill([gitea])  # the old was removed by the push: one password held
    assert drilled.ok, (drilled.reason, drilled.steps)


def test_a_swap_of_the_same_pair_refuses_connections_in_its_window(
    lab: Lab, tmp_path: Path
) -> None:
    # last: OpenBao locks a role out after a few refused logins (the swap's window makes them)
    state, built, gitea = lab.state, lab.built, lab.gitea
    with Controller.open(state) as ctl:
        ctl.declare(built.declaration)  # the lab's own: every pair a swap
    try:
        act = lambda: _rotate(state, gitea, "after-providers:to")  # noqa: E731
        tries, refused, report = _count(state, built, gitea, tmp_path, act)
    finally:
        with Controller.open(state) as ctl:
            ctl.declare(state / "overlap.toml")
    assert report.ok, report
    print(f"swap: {tries} connections, {refused} refused, window {report.pairs[0].window_ms} ms")
    assert refused > 0, (tries, refused)
