"""``meshtui watch`` and a credential file changed by hand on a node: its probe cycle finds the
file world-readable, the pair goes stale with that reason (one alert), and its push writes
the file back, with no rotation. Real agents, the session's real PostgreSQL."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from meshtui.controller import lock
from meshtui.controller.unattended.notify import Alert
from meshtui.controller.unattended.watch import Watch
from tests.fix_agents import Mesh

GITEA = "database:app1/gitea->db1/postgres"


@pytest.fixture
def mesh(mesh_with_agents, pg, pg_clean, pg_admin_file) -> Iterator[Mesh]:
    m: Mesh = mesh_with_agents(consumers={"app1": ["gitea"]}, port=pg.port, admin=pg_admin_file)
    text = m.decl.read_text().split("\n[policy]")[0]
    m.decl.write_text(text + '\n[policy]\nprobe_every = "1s"\n')
    with m.controller() as ctl:
        ctl.declare(m.decl)
        assert ctl.push().ok
    yield m
    lock.WHO = None  # an in-process Watch labels the lock; later tests are operators again


def test_a_world_readable_credential_file_is_an_alert_and_watch_writes_it_back(mesh: Mesh) -> None:
    cred = mesh.root / "srv/app1/gitea/db.password"
    got: list[Alert] = []
    with mesh.controller() as ctl:
        assert {p.verdict for p in ctl.probe([GITEA])} == {"accepted"}
        generation = ctl.inventory.pairs([GITEA])[0]["generation"]
        watch = Watch(ctl, notify=got.append, log=lambda _l: None)
        watch.cycle()
        assert got == []
        cred.chmod(0o644)
        for _ in range(30):
            time.sleep(0.4)
            watch.cycle()
            if got and cred.stat().st_mode & 0o777 == 0o600:
                break
        assert cred.stat().st_mode & 0o777 == 0o600  # written back by watch's push
        about = [a for a in got if a.pair == GITEA]
        assert about and f"{cred} mode 0644, not 0600" in about[0].reason, got
        assert ctl.inventory.pairs([GITEA])[0]["generation"] == generation  # not a rotation
