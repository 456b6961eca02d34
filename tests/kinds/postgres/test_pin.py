"""The lab declares ``pin = true``: each login works from its consumer's namespace only.

The right password from another consumer's namespace is refused by pg_hba.conf before any
password is asked; from the right namespace it logs in. Logins cross the private network with
Debian's psql, not our probe code.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from meshtui.kinds.postgres import hba as pg_hba
from meshtui.lab import mesh as lab_mesh
from tests.fix_lab import cli, running_lab
from tests.lab.test_lab import psql_login, statuses

pytestmark = [pytest.mark.root, pytest.mark.slow]

GITEA = "database:app1/gitea->db1/postgres"
WIKI = "database:app2/wiki->db1/postgres"


@pytest.fixture(scope="module")
def lab() -> Iterator[tuple[Path, lab_mesh.Lab]]:
    with running_lab("meshtui-pin-", mesh={"app1": ["gitea"], "app2": ["wiki"]}) as found:
        yield found


def test_the_lab_declares_pin(lab: tuple[Path, lab_mesh.Lab]) -> None:
    _state, built = lab
    assert "pin = true" in built.declaration.read_text().splitlines()
    text = (built.datadir / "pg_hba.conf").read_text()
    block = pg_hba.parse(text).blocks["db1/postgres database"]
    assert pg_hba.pinned(block) == {
        "gitea_app1_" + login_tail(lab, GITEA): built.addresses["app1"],
        "wiki_app2_" + login_tail(lab, WIKI): built.addresses["app2"],
    }


def login_tail(lab: tuple[Path, lab_mesh.Lab], pair: str) -> str:
    return statuses(lab[0])[pair].login.rsplit("_", 1)[1]


def test_the_right_password_from_the_wrong_namespace_is_refused(
    lab: tuple[Path, lab_mesh.Lab],
) -> None:
    state, built = lab
    login = statuses(state)[GITEA].login
    password = (built.folder / "srv/app1/gitea/db.password").read_text()
    wrong = psql_login(built, "app2", login, "gitea", password)
    assert wrong.returncode != 0
    assert "pg_hba.conf rejects connection" in wrong.stderr, wrong.stderr
    assert built.addresses["app2"] in wrong.stderr
    right = psql_login(built, "app1", login, "gitea", password)
    assert right.returncode == 0, right.stderr
    assert right.stdout.split() == [login, built.addresses["app1"]]
    # and the other way round: wiki's login only from app2
    wiki = statuses(state)[WIKI].login
    wiki_password = (built.folder / "srv/app2/wiki/db.password").read_text()
    assert "pg_hba.conf rejects" in psql_login(built, "app1", wiki, "wiki", wiki_password).stderr
    assert psql_login(built, "app2", wiki, "wiki", wiki_password).returncode == 0


def test_a_rotation_keeps_the_pin_and_probes_stay_working(lab: tuple[Path, lab_mesh.Lab]) -> None:
    state, built = lab
    hba = built.datadir / "pg_hba.conf"
    before = hba.read_text()
    result = cli(state, "rotate", "--yes", GITEA)
    assert result.returncode == 0, result.stdout + result.stderr
    assert hba.read_text() == before
    assert cli(state, "probe").returncode == 0
    assert statuses(state)[GITEA].state.value == "working"
    login = statuses(state)[GITEA].login
    password = (built.folder / "srv/app1/gitea/db.password").read_text()
    assert "pg_hba.conf rejects" in psql_login(built, "app2", login, "gitea", password).stderr
