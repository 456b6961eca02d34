"""``pin = true`` against the real embedded PostgreSQL: the login works from its consumer's
address only, a rotation leaves pg_hba.conf alone, removal takes the line away, and a broken
pg_hba.conf or a failed reload changes nothing and is reported."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from meshtui.contracts.manifest_reader import load_manifest
from meshtui.kinds.postgres import hba as pg_hba
from meshtui.kinds.postgres.lab import Cluster
from meshtui.provisioner.harness import Report, reconcile
from tests.provisioner.conftest import Mesh, outcomes


@pytest.fixture
def hba(mesh: Mesh) -> Iterator[Path]:
    """The cluster's pg_hba.conf, given back exactly as it was after the test."""
    path = mesh.cluster.datadir / "pg_hba.conf"
    before = path.read_text().splitlines()
    yield path
    mesh.cluster.set_hba(before)


def pinned_run(mesh: Mesh) -> Report:
    """Write the manifest as an agent would for a provider that declared ``pin = true``."""
    mesh.write()
    doc = json.loads(mesh.manifest.read_text())
    doc["pin"] = True
    mesh.manifest.write_text(json.dumps(doc))
    return reconcile(mesh.manifest, mesh.admin)


def refusal(mesh: Mesh, login: str, password: str) -> str:
    """The server's refusal of ``login`` from 127.0.0.1 with the right password ("" if let in)."""
    try:
        mesh.connect_as(login, password).close()
    except psycopg.OperationalError as exc:
        return str(exc)
    return ""


def pin_outcome(report: Report) -> tuple[str, str] | None:
    found = [(o.outcome, o.reason) for o in report.outcomes if o.login == "pg_hba.conf"]
    return found[0] if found else None


def test_pin_allows_the_consumers_address_only(mesh: Mesh, hba: Path) -> None:
    original = hba.read_text()
    mesh.add("app1", "gitea")  # at 127.0.0.1: where this test connects from
    away = mesh.add("app2", "wiki")
    away["at"] = "127.0.0.2"  # its consumer lives elsewhere
    report = pinned_run(mesh)
    assert report.ok, report.lines()
    assert pin_outcome(report) == (
        "updated",
        f"{hba}: 2 logins pinned, 2 added, 0 removed, 0 moved",
    )
    gitea, wiki = mesh.login_of("app1", "gitea"), mesh.login_of("app2", "wiki")
    assert mesh.can_login(gitea, mesh.password("app1", "gitea"))
    # the right password from the wrong address: refused before any password is asked
    said = refusal(mesh, wiki, mesh.password("app2", "wiki"))
    assert "pg_hba.conf rejects connection" in said and wiki in said
    # the lines not ours are still there, in order, after our block
    text = hba.read_text()
    layout = pg_hba.parse(text)
    assert "".join(layout.foreign) == original
    assert text.index(pg_hba.BEGIN) < text.index("host all all 127.0.0.1/32")


def test_a_rotation_leaves_pg_hba_conf_alone(mesh: Mesh, hba: Path) -> None:
    mesh.add("app1", "gitea")
    assert pinned_run(mesh).ok
    before = hba.stat()
    mesh.rotate("app1", "gitea")
    report = pinned_run(mesh)
    assert outcomes(report) == {mesh.login_of("app1", "gitea"): "updated"}  # no pg_hba.conf row
    after = hba.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert mesh.can_login(mesh.login_of("app1", "gitea"), mesh.password("app1", "gitea"))


def test_removal_takes_the_line_away(mesh: Mesh, hba: Path) -> None:
    original = hba.read_text()
    mesh.add("app1", "gitea")
    away = mesh.add("app2", "wiki")
    away["at"] = "127.0.0.2"
    assert pinned_run(mesh).ok
    wiki = mesh.login_of("app2", "wiki")
    mesh.drop("app2", "wiki")
    report = pinned_run(mesh)
    assert outcomes(report)[wiki] == "removed"
    assert pin_outcome(report) == (
        "updated",
        f"{hba}: 1 logins pinned, 0 added, 1 removed, 0 moved",
    )
    assert wiki not in hba.read_text()
    mesh.drop("app1", "gitea")
    pinned_run(mesh)
    assert hba.read_text() == original  # nothing of ours left, every other byte as it was


def test_pin_turned_off_takes_the_block_away(mesh: Mesh, hba: Path) -> None:
    original = hba.read_text()
    mesh.add("app1", "gitea")
    assert pinned_run(mesh).ok
    assert hba.read_text() != original
    report = mesh.reconcile()  # the manifest no longer says pin
    assert report.ok and pin_outcome(report) is not None
    assert hba.read_text() == original
    assert pin_outcome(mesh.reconcile()) is None  # and a provider without pin sees nothing


def test_a_broken_pg_hba_conf_changes_nothing_and_is_reported(mesh: Mesh, hba: Path) -> None:
    lines = hba.read_text().splitlines()
    mesh.cluster.set_hba([*lines, "host all all 127.0.0.1/32 no-such-method"])
    broken = hba.read_bytes()
    mesh.add("app1", "gitea")
    report = pinned_run(mesh)
    assert not report.ok
    outcome, reason = pin_outcome(report) or ("", "")
    assert outcome == "failed"
    assert "has errors already" in reason and "no-such-method" in reason
    assert "nothing was changed" in reason
    assert hba.read_bytes() == broken
    # the login itself was made: the pin is reported apart, never at the credential's cost
    assert outcomes(report)[mesh.login_of("app1", "gitea")] == "created"


def test_broken_markers_change_nothing_and_are_reported(mesh: Mesh, hba: Path) -> None:
    lines = hba.read_text().splitlines()
    mesh.cluster.set_hba([pg_hba.BEGIN + "db1/postgres database", *lines])
    broken = hba.read_bytes()
    mesh.add("app1", "gitea")
    report = pinned_run(mesh)
    assert pin_outcome(report) is not None
    outcome, reason = pin_outcome(report) or ("", "")
    assert outcome == "failed" and "line 1" in reason and "no end marker" in reason
    assert hba.read_bytes() == broken


def test_root_never_writes_through_a_link_the_server_user_planted(
    mesh: Mesh, hba: Path, tmp_path: Path
) -> None:
    """The server's user swaps pg_hba.conf for a link to a root file: that file stays as it was."""
    victim = tmp_path / "root-only.conf"
    victim.write_text("root's own file\n")
    victim.chmod(0o600)
    hba.unlink()
    hba.symlink_to(victim)
    mesh.add("app1", "gitea")
    report = pinned_run(mesh)
    outcome, reason = pin_outcome(report) or ("", "")
    assert outcome == "failed" and "cannot be opened" in reason
    assert victim.read_text() == "root's own file\n"
    assert hba.is_symlink()


def test_a_failed_reload_puts_the_old_file_back(
    mesh: Mesh, hba: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = hba.read_bytes()

    def refuse(conn: psycopg.Connection, conninfo: str) -> None:  # the fault-injection seam
        conn.execute("SELECT 1 FROM no_such_table")

    monkeypatch.setattr(pg_hba, "_reload", refuse)
    mesh.add("app1", "gitea")
    report = pinned_run(mesh)
    outcome, reason = pin_outcome(report) or ("", "")
    assert outcome == "failed" and "not reloaded" in reason and "put back" in reason
    assert hba.read_bytes() == original


def test_an_admin_that_cannot_see_hba_file_is_told_so(mesh: Mesh, hba: Path) -> None:
    mesh.add("app1", "gitea")
    mesh.write()
    with mesh.admin_conn() as conn:
        conn.execute("CREATE ROLE meshtui_small LOGIN PASSWORD 'small-admin-pw' CREATEROLE")
    conninfo = f"host=127.0.0.1 port={mesh.cluster.port} user=meshtui_small dbname=postgres"
    manifest = load_manifest(mesh.manifest)
    result = pg_hba.pin_manifest(
        conninfo + " password=small-admin-pw", manifest, {mesh.login_of("app1", "gitea"): "created"}
    )
    assert not result.changed
    assert "cannot see hba_file" in result.error and "NOT confined" in result.error
    assert "small-admin-pw" not in result.error


def test_pg_hba_file_rules_sees_our_lines_on_this_server(mesh: Mesh, hba: Path) -> None:
    """The version this server runs reads our block as we meant it (user, address, method)."""
    mesh.add("app1", "gitea")
    assert pinned_run(mesh).ok
    login = mesh.login_of("app1", "gitea")
    with mesh.admin_conn() as conn:
        rows = conn.execute(
            "SELECT type, user_name, address, auth_method FROM pg_hba_file_rules"
            " WHERE %s = ANY(user_name) ORDER BY line_number",
            [login],
        ).fetchall()
    assert rows == [
        ("host", [login], "127.0.0.1", "scram-sha-256"),
        ("host", [login], "all", "reject"),
        ("local", [login], None, "reject"),
    ]


def cluster_version(cluster: Cluster) -> int:
    with psycopg.connect(cluster.admin_conninfo()) as conn:
        row = conn.execute("SHOW server_version_num").fetchone()
    assert row is not None
    return int(row[0]) // 10000


DBA_LINE = "host all all 10.213.0.99/32 reject   # DBA: block the compromised host\n"


def dba_saves_in_place(hba: Path) -> None:
    """A DBA's editor saving the file in place (same inode), as the reviewer's script did."""
    with open(hba, "a") as fh:
        fh.write(DBA_LINE)


def test_a_dba_edit_saved_while_pinning_is_kept(
    mesh: Mesh, hba: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The edit lands between the pin run's read and its write; it must not be reverted."""
    real_rules = pg_hba._rules
    calls = []

    def rules_then_edit(conn: psycopg.Connection, path: str):  # the seam: one server round trip
        calls.append(path)
        if len(calls) == 1:
            dba_saves_in_place(hba)
        return real_rules(conn, path)

    monkeypatch.setattr(pg_hba, "_rules", rules_then_edit)
    mesh.add("app1", "gitea")
    report = pinned_run(mesh)
    assert DBA_LINE in hba.read_text(), "the DBA's edit was silently reverted"
    outcome, reason = pin_outcome(report) or ("", "")
    assert outcome == "failed" and "changed while" in reason, report.lines()
    monkeypatch.undo()
    report = pinned_run(mesh)  # the next run pins, on top of the DBA's edit
    assert report.ok, report.lines()
    text = hba.read_text()
    assert DBA_LINE in text and pg_hba.BEGIN in text


def test_a_dba_edit_saved_before_a_rollback_is_kept(
    mesh: Mesh, hba: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rollback path: the reload fails, but the file is no longer what meshtui wrote."""

    def edit_then_refuse(conn: psycopg.Connection, conninfo: str) -> None:
        dba_saves_in_place(hba)
        conn.execute("SELECT 1 FROM no_such_table")

    monkeypatch.setattr(pg_hba, "_reload", edit_then_refuse)
    mesh.add("app1", "gitea")
    report = pinned_run(mesh)
    outcome, reason = pin_outcome(report) or ("", "")
    assert outcome == "failed" and "changed while" in reason, report.lines()
    assert DBA_LINE in hba.read_text(), "the rollback reverted the DBA's edit"
