"""``pin = true`` on a delta's run (a rotation, a pair added or withdrawn), against the real
embedded PostgreSQL: only the delta's lines change, the file is not even read while its stat is
the one this process verified, and every safety of the whole run still holds — an edit outside
meshtui is seen (even one that puts the modification time back), a DBA's save between read and
write is kept, the server checks every write before the reload, and a block this process has
not verified sends the run back whole."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from meshtui.kinds.postgres import hba as pg_hba
from meshtui.kinds.postgres import verified
from meshtui.provisioner.harness import Report, reconcile
from tests.provisioner.conftest import Mesh, outcomes


@pytest.fixture
def hba(mesh: Mesh) -> Iterator[Path]:
    """The cluster's pg_hba.conf, given back exactly as it was; no memory kept across tests."""
    path = mesh.cluster.datadir / "pg_hba.conf"
    before = path.read_text().splitlines()
    verified.forget_all()
    yield path
    verified.forget_all()
    mesh.cluster.set_hba(before)


def write_pinned(mesh: Mesh) -> None:
    mesh.write()
    doc = json.loads(mesh.manifest.read_text())
    doc["pin"] = True
    mesh.manifest.write_text(json.dumps(doc))


def whole(mesh: Mesh) -> Report:
    write_pinned(mesh)
    return reconcile(mesh.manifest, mesh.admin)


def delta(mesh: Mesh, *logins: str) -> Report:
    """What the host agent runs for a delivery of ``logins`` only (a rotation's)."""
    write_pinned(mesh)
    return reconcile(mesh.manifest, mesh.admin, only=frozenset(logins))


class Counts:
    """How often the pin step read the file, asked the server, or reloaded it (seams)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: dict[str, int] = {}
        for name in ("_read", "_rules", "_reload", "_session"):
            monkeypatch.setattr(pg_hba, name, self._counted(name, getattr(pg_hba, name)))

    def _counted(self, name: str, inner: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] = self.calls.get(name, 0) + 1
            return inner(*args, **kwargs)

        return counted


def pin_outcome(report: Report) -> tuple[str, str] | None:
    found = [(o.outcome, o.reason) for o in report.outcomes if o.login == "pg_hba.conf"]
    return found[0] if found else None


def rules_of(mesh: Mesh, login: str) -> list[tuple[Any, ...]]:
    with mesh.admin_conn() as conn:
        return conn.execute(
            "SELECT type, address, auth_method FROM pg_hba_file_rules"
            " WHERE %s = ANY(user_name) ORDER BY line_number",
            [login],
        ).fetchall()


def test_a_rotation_among_many_neither_reads_pg_hba_conf_nor_asks_the_server(
    mesh: Mesh, hba: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(30):
        mesh.add(f"app{i}", "svc")
    assert whole(mesh).ok
    before = hba.stat()
    mesh.rotate("app7", "svc")
    counts = Counts(monkeypatch)
    report = delta(mesh, mesh.login_of("app7", "svc"))
    assert outcomes(report) == {mesh.login_of("app7", "svc"): "updated"}  # the delta's only
    assert counts.calls == {}, "the pin step read the file or asked the server"
    after = hba.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert mesh.can_login(mesh.login_of("app7", "svc"), mesh.password("app7", "svc"))


def test_a_pair_added_by_delta_gets_its_lines_as_a_whole_run_would_write_them(
    mesh: Mesh, hba: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(5):
        away = mesh.add(f"app{i}", "svc")
        away["at"] = f"10.9.0.{i + 1}"
    assert whole(mesh).ok
    new = mesh.add("app2b", "svc")  # sorts between app2's and app3's lines
    new["at"] = "127.0.0.1"
    counts = Counts(monkeypatch)
    report = delta(mesh, mesh.login_of("app2b", "svc"))
    assert report.ok, report.lines()
    assert pin_outcome(report) == (
        "updated",
        f"{hba}: 6 logins pinned, 1 added or moved, 0 removed",
    )
    # not parsed (its stat was the one verified): read only to be sure it still is, just before
    # the write, and read back after it; checked by the server before and after; reloaded
    assert counts.calls == {"_session": 1, "_rules": 2, "_read": 2, "_reload": 1}
    assert rules_of(mesh, new["as"]) == [
        ("host", "127.0.0.1", "scram-sha-256"),
        ("host", "all", "reject"),
        ("local", None, "reject"),
    ]
    assert mesh.can_login(new["as"], mesh.password("app2b", "svc"))
    by_delta = hba.read_text()
    verified.forget_all()
    assert pin_outcome(whole(mesh)) is None  # a whole run finds nothing to change
    assert hba.read_text() == by_delta


def test_a_withdrawn_pair_loses_its_lines_and_a_moved_one_moves(mesh: Mesh, hba: Path) -> None:
    for i in range(4):
        mesh.add(f"app{i}", "svc")["at"] = f"10.9.0.{i + 1}"
    assert whole(mesh).ok
    gone = mesh.login_of("app1", "svc")
    mesh.drop("app1", "svc")
    mesh.consumers["app2/svc"]["at"] = "10.9.0.99"
    report = delta(mesh, gone, mesh.login_of("app2", "svc"))
    assert outcomes(report)[gone] == "removed"
    assert pin_outcome(report) == (
        "updated",
        f"{hba}: 3 logins pinned, 1 added or moved, 1 removed",
    )
    assert gone not in hba.read_text()
    assert rules_of(mesh, mesh.login_of("app2", "svc"))[0] == ("host", "10.9.0.99", "scram-sha-256")
    by_delta = hba.read_text()
    verified.forget_all()
    whole(mesh)
    assert hba.read_text() == by_delta


def test_a_block_edited_outside_meshtui_sends_the_delta_back_whole(mesh: Mesh, hba: Path) -> None:
    """A DBA deleted another login's allow line: the whole run puts the block back."""
    for i in range(3):
        mesh.add(f"app{i}", "svc")
    assert whole(mesh).ok
    victim = mesh.login_of("app0", "svc")
    lines = hba.read_text().splitlines()
    mesh.cluster.set_hba([x for x in lines if not x.startswith(f'host all "{victim}" 127')])
    mesh.rotate("app2", "svc")
    report = delta(mesh, mesh.login_of("app2", "svc"))
    assert report.ok, report.lines()
    assert outcomes(report)[mesh.login_of("app2", "svc")] == "updated"  # the delta's own outcome
    assert outcomes(report)[victim] == "unchanged"  # reconciled whole
    assert pin_outcome(report) == (
        "updated",
        f"{hba}: 3 logins pinned, 1 added, 0 removed, 0 moved",
    )
    assert mesh.can_login(victim, mesh.password("app0", "svc"))


def test_an_edit_that_puts_the_modification_time_back_is_still_seen(mesh: Mesh, hba: Path) -> None:
    """Same size, same inode, mtime restored: the change time still gives it away."""
    mesh.add("app0", "svc")["at"] = "10.9.0.5"
    mesh.add("app1", "svc")
    assert whole(mesh).ok
    info = hba.stat()
    text = hba.read_text()
    assert "10.9.0.5/32" in text
    with open(hba, "r+") as fh:  # in place, as an editor may
        fh.write(text.replace("10.9.0.5/32", "10.9.0.6/32"))
    os.utime(hba, ns=(info.st_atime_ns, info.st_mtime_ns))
    assert hba.stat().st_size == info.st_size and hba.stat().st_mtime_ns == info.st_mtime_ns
    mesh.rotate("app1", "svc")
    report = delta(mesh, mesh.login_of("app1", "svc"))
    assert pin_outcome(report) is not None, "the edited block was trusted from memory"
    assert "10.9.0.5/32" in hba.read_text() and "10.9.0.6/32" not in hba.read_text()


def test_a_rule_not_ours_edited_sends_the_delta_back_whole_and_is_kept(
    mesh: Mesh, hba: Path
) -> None:
    """A rule of the file's own decides whether our lines demand TLS: the whole run decides."""
    for i in range(3):
        mesh.add(f"app{i}", "svc")
    assert whole(mesh).ok
    with open(hba, "a") as fh:
        fh.write("host all all 10.213.0.99/32 reject   # DBA\n")
    mesh.add("app9", "svc")
    report = delta(mesh, mesh.login_of("app9", "svc"))
    assert report.ok, report.lines()
    assert outcomes(report)[mesh.login_of("app0", "svc")] == "unchanged"  # reconciled whole
    assert pin_outcome(report) == (
        "updated",
        f"{hba}: 4 logins pinned, 1 added, 0 removed, 0 moved",
    )
    assert "# DBA" in hba.read_text()
    mesh.add("app10", "svc")
    report = delta(mesh, mesh.login_of("app10", "svc"))  # and the next is a delta again
    assert set(outcomes(report)) == {mesh.login_of("app10", "svc"), "pg_hba.conf"}


def test_a_login_added_by_delta_demands_tls_where_the_files_own_rules_do() -> None:
    foreign = ("hostssl all all 10.0.0.0/24 scram-sha-256\n", "host all all 0.0.0.0/0 reject\n")
    pins = {"b": "10.0.0.2", "d": "192.0.2.4"}
    settled = verified.Settled.of(pins)
    body = pg_hba.block(pins, frozenset({"b"}))
    new, order = pg_hba._spliced(body, settled, {"a": "10.0.0.3", "c": "192.0.2.9"}, foreign)
    assert order == ["a", "b", "c", "d"]
    everything = {**pins, "a": "10.0.0.3", "c": "192.0.2.9"}
    assert new == pg_hba.block(everything, frozenset({"a", "b"}))


def test_a_dba_save_between_the_remembered_read_and_the_write_is_kept(
    mesh: Mesh, hba: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a delta: the text it writes over is from memory; the write still checks the file."""
    mesh.add("app0", "svc")
    assert whole(mesh).ok
    real_rules = pg_hba._rules
    line = "host all all 10.213.0.99/32 reject   # DBA: block the compromised host\n"

    def rules_then_edit(conn: psycopg.Connection, path: str, lines: Any = ()) -> Any:
        if not lines:  # the check before the write
            with open(hba, "a") as fh:
                fh.write(line)
        return real_rules(conn, path, lines)

    monkeypatch.setattr(pg_hba, "_rules", rules_then_edit)
    mesh.add("app1", "svc")
    report = delta(mesh, mesh.login_of("app1", "svc"))
    outcome, reason = pin_outcome(report) or ("", "")
    assert outcome == "failed" and "changed while" in reason, report.lines()
    assert line in hba.read_text()
    monkeypatch.undo()
    report = delta(mesh, mesh.login_of("app1", "svc"))  # forgotten: whole, on top of the edit
    assert report.ok, report.lines()
    assert line in hba.read_text() and mesh.login_of("app1", "svc") in hba.read_text()


def test_a_delta_the_server_refuses_puts_the_file_back_and_is_forgotten(
    mesh: Mesh, hba: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mesh.add("app0", "svc")
    assert whole(mesh).ok
    original = hba.read_bytes()

    def refuse(conn: psycopg.Connection, conninfo: str) -> None:  # the fault-injection seam
        conn.execute("SELECT 1 FROM no_such_table")

    monkeypatch.setattr(pg_hba, "_reload", refuse)
    mesh.add("app1", "svc")
    report = delta(mesh, mesh.login_of("app1", "svc"))
    outcome, reason = pin_outcome(report) or ("", "")
    assert outcome == "failed" and "put back" in reason
    assert hba.read_bytes() == original
    assert verified.known(str(hba)) is None


def test_a_process_that_has_not_verified_the_block_runs_the_delta_whole(
    mesh: Mesh, hba: Path
) -> None:
    for i in range(3):
        mesh.add(f"app{i}", "svc")
    assert whole(mesh).ok
    verified.forget_all()  # an agent just started
    mesh.rotate("app1", "svc")
    report = delta(mesh, mesh.login_of("app1", "svc"))
    assert report.ok
    assert outcomes(report) == {
        mesh.login_of("app0", "svc"): "unchanged",
        mesh.login_of("app1", "svc"): "updated",
        mesh.login_of("app2", "svc"): "unchanged",
    }
    assert verified.known(str(hba)) is not None  # and the next delta is a delta
