"""PostgreSQL's overlap (two alternating logins) end to end in the lab (root, namespaces, the
lab's PostgreSQL, real agents): an app in the consumer's namespace opens a new connection every
~1 ms with the login its connection file names and the password its credential file holds at
that instant, through a whole rotation, and counts refusals; the retired login is refused at
the end; a controller killed between two steps leaves the pair on one login once push
recovers the journal.

The login and the password are two files, written one after the other: an app that read them
between the two writes holds the old login with the new password (or the reverse, on a
rollback). It reads them again when refused (docs/kinds/postgres.md says so); such reads are
counted apart, and a refusal of a pair read whole is a refusal."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from meshtui.controller.core import Controller
from meshtui.model import node_of
from tests.fix_lab import running_lab

pytestmark = [pytest.mark.root, pytest.mark.slow]

GITEA = "database:app1/gitea->db1/postgres"

APP = r"""
import json, os, sys, time
import psycopg
conn_file, stop = sys.argv[1:3]

def read():
    facts = json.load(open(conn_file))
    return facts, open(facts["password_file"]).read().strip()

def refused(facts, password):
    try:
        psycopg.connect(host=facts["host"], port=facts["port"], dbname=facts["dbname"],
                        user=facts["user"], password=password, connect_timeout=2).close()
    except psycopg.OperationalError as exc:
        if "password authentication failed" not in str(exc):
            raise
        return True
    return False

tries = refusals = straddled = 0
while not os.path.exists(stop):
    facts, password = read()
    if refused(facts, password):
        time.sleep(0.02)  # as an app retries: the agent writes the password file, then the
        again = read()  # connection file, and a read between the two is refused
        if again != (facts, password):
            straddled += 1  # read between the two: the pair read again, as an app should
            facts, password = again
        refusals += refused(facts, password)
        print(facts["user"], "refused", file=sys.stderr)
    tries += 1
    time.sleep(0.001)
print(tries, refusals, straddled)
"""


@pytest.fixture(scope="module")
def lab() -> Iterator[tuple[Path, Any, Path]]:
    kinds = {k: False for k in ("redis", "openbao", "seaweedfs")}
    with running_lab("meshtui-overlap-postgres-", kinds=kinds) as (state, built):
        text = built.declaration.read_text()
        text, needs = re.subn(  # the pair alone: the lab's other consumers have no
            r'(file = "([^"]*/srv/app1/gitea/)db\.password") }',  # connection file
            r'\1, rotation = "overlap", connection = { file = "\2db.conn", format = "json" } }',
            text,
        )
        assert needs == 1, text
        overlapped = state / "overlap.toml"
        overlapped.write_text(text)
        with Controller.open(state) as ctl:
            ctl.declare(overlapped)
            assert ctl.push().ok
            row = ctl.inventory.pairs([GITEA])[0]
        yield state, built, Path(row["file"]).with_name("db.conn")


def _count(state: Path, built: Any, conn_file: Path, tmp: Path, act: Any) -> tuple[int, int, Any]:
    stop = tmp / "stop"
    with Controller.open(state, read_only=True) as ctl:
        consumer = ctl.inventory.pairs([GITEA])[0]["consumer"]
    proc = subprocess.Popen(
        ["ip", "netns", "exec", built.namespace(node_of(consumer)), sys.executable, "-c", APP,
         str(conn_file), str(stop)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    time.sleep(1.0)
    try:
        result = act()
        time.sleep(0.5)
    finally:
        stop.touch()
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    print(err[-3000:])
    tries, refused, straddled = map(int, out.split())
    print(f"{tries} connections, {straddled} read between the agent's two files")
    return tries, refused, result


def test_an_overlap_moves_the_app_to_the_other_login_and_refuses_the_old(
    lab: tuple[Path, Any, Path], tmp_path: Path
) -> None:
    state, built, conn_file = lab
    before = conn_file.read_text()

    def rotate() -> Any:
        with Controller.open(state) as ctl:
            return ctl.rotate([GITEA])

    tries, refused, report = _count(state, built, conn_file, tmp_path, rotate)
    assert report.ok, report
    (pair,) = report.pairs
    assert pair.old_after == "refused", pair
    assert conn_file.read_text() != before  # the other login
    print(f"postgres overlap: {tries} connections, {refused} refused")
    assert tries > 20 and refused == 0, (tries, refused)


@pytest.mark.parametrize(
    ("point", "moves"), [("overlap:consumer-holds-new", False), ("overlap:removing-old", True)]
)
def test_a_controller_killed_mid_overlap_ends_on_one_login(
    lab: tuple[Path, Any, Path], tmp_path: Path, point: str, moves: bool
) -> None:
    state, built, conn_file = lab
    before = conn_file.read_text()

    def die() -> None:
        raise KeyboardInterrupt(point)

    def killed_then_pushed() -> None:
        with Controller.open(state) as ctl:
            ctl.faults = {point: die}  # type: ignore[attr-defined]
            with pytest.raises(KeyboardInterrupt):
                ctl.rotate([GITEA])
        with Controller.open(state) as ctl:
            assert ctl.push().ok
            assert not ctl.inventory.open_rotations()

    tries, refused, _ = _count(state, built, conn_file, tmp_path, killed_then_pushed)
    assert (conn_file.read_text() != before) is moves
    assert tries > 20 and refused == 0, (tries, refused)
    with Controller.open(state) as ctl:
        (drilled,) = ctl.drill([GITEA])
    assert drilled.ok, (drilled.reason, drilled.steps)
