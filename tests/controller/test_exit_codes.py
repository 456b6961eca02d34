"""The exit codes a monitor keys on (docs/exit-codes.md), each command and outcome on real
agents and a real PostgreSQL: ``probe`` and ``status --check`` exit 0 only when every active
pair is working, 1 when one is stale, refused or unknown, 2 on bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fix_agents import Mesh

GITEA = "database:app1/gitea->db1/postgres"


@pytest.fixture
def mesh(mesh_with_agents, pg, pg_clean, pg_admin_file) -> Mesh:
    m: Mesh = mesh_with_agents(consumers={"app1": ["gitea"]}, port=pg.port, admin=pg_admin_file)
    with m.controller() as ctl:
        assert ctl.push().ok
    return m


def codes(mesh: Mesh) -> tuple[int, int, int]:
    """(probe, status --check, status): probe first, so status sees its verdicts."""
    return (
        mesh.cli("probe").returncode,
        mesh.cli("status", "--check").returncode,
        mesh.cli("status").returncode,
    )


def credential(mesh: Mesh) -> Path:
    return mesh.root / "srv/app1/gitea/db.password"


def test_working_is_0(mesh: Mesh) -> None:
    assert codes(mesh) == (0, 0, 0)


def test_unknown_never_probed_is_1_for_status_check(mesh: Mesh) -> None:
    done = mesh.cli("status", "--check")
    assert done.returncode == 1
    assert f"not working: {GITEA}: unknown" in done.stderr
    assert mesh.cli("status").returncode == 0  # plain status lists; it is not the check


def test_unknown_consumer_node_down_is_1(mesh: Mesh) -> None:
    mesh.stop("app1")
    probe = mesh.cli("probe")
    assert probe.returncode == 1 and "unknown" in probe.stdout
    assert mesh.cli("status", "--check").returncode == 1


def test_stale_file_not_as_declared_is_1(mesh: Mesh) -> None:
    credential(mesh).chmod(0o644)
    probe = mesh.cli("probe")
    assert probe.returncode == 1 and "mode 0644, not 0600" in probe.stdout
    check = mesh.cli("status", "--check")
    assert check.returncode == 1 and "stale" in check.stderr


def test_refused_is_1(mesh: Mesh) -> None:
    credential(mesh).write_text("not-the-password")
    probe = mesh.cli("probe")
    assert probe.returncode == 1 and "refused" in probe.stdout
    assert mesh.cli("status", "--check").returncode == 1


def test_bad_input_is_2(mesh: Mesh) -> None:
    assert mesh.cli("probe", "database:app9/none->db1/postgres").returncode == 2
    assert mesh.cli("status", "--check", "--nonsense").returncode == 2


def test_the_manual_and_help_give_one_table_for_every_command() -> None:
    from meshtui.cli.parser import EXIT_TABLE, build_parser

    doc = (Path(__file__).parents[2] / "docs" / "exit-codes.md").read_text()
    rows = [
        tuple(cell.strip().replace("`", "") for cell in line.strip("|").split("|"))
        for line in doc.splitlines()
        if line.startswith("| `")
    ]
    assert rows == list(EXIT_TABLE)
    named = {word for command, _, _ in EXIT_TABLE for word in command.replace(",", " ").split()}
    parser = build_parser()
    (sub,) = [a for a in parser._actions if a.dest == "command"]
    assert set(sub.choices) <= named  # type: ignore[arg-type]
    helped = parser.format_help()
    assert all(f"  {command}\n      0: {ok}\n" in helped for command, ok, _ in EXIT_TABLE)
