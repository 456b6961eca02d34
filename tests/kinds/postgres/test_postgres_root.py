"""Root never follows a path the PostgreSQL server's user (or any other user) planted.

The server user ``meshtui_pg`` owns the data directory, and its SQL superuser can run programs
as that user (``COPY ... TO PROGRAM``). Each test plants a real symlink, FIFO or file as that
user in a real cluster, then lets root do what ``lab up`` / ``lab down`` do, and checks that a
root-only 0600 file outside the data directory kept its owner, mode and content, and that root
either refused clearly or went on safely.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from meshtui.errors import LabError
from meshtui.kinds.postgres.lab import (
    CONF_NAME,
    LOG_NAME,
    META_NAME,
    SERVER_USER,
    Cluster,
    create_cluster,
    open_cluster,
)
from meshtui.lab import mesh as lab_mesh
from tests.fix_pg import free_port

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="the server user is a real system user"),
]

SECRET = b"root-only secret: do not hand me to meshtui_pg\n"


@dataclass(frozen=True)
class Victim:
    """A root-owned 0600 file outside the data directory, and what it must stay."""

    path: Path

    def unchanged(self) -> None:
        st = os.lstat(self.path)
        assert stat.S_ISREG(st.st_mode), f"{self.path} is no longer a regular file"
        assert (st.st_uid, st.st_gid) == (0, 0), f"{self.path} changed owner"
        assert stat.S_IMODE(st.st_mode) == 0o600, f"{self.path} changed mode"
        assert self.path.read_bytes() == SECRET, f"{self.path} changed content"


def make_victim(folder: Path, name: str = "victim") -> Victim:
    path = folder / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(SECRET)
    os.chown(path, 0, 0)
    return Victim(path)


@pytest.fixture
def scratch() -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="meshtui-pgr-"))
    base.chmod(0o711)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def running(scratch: Path) -> Iterator[Cluster]:
    cluster = create_cluster(scratch / "data", port=free_port())
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def as_server_user(cluster: Cluster, shell: str) -> None:
    """Run ``shell`` in the data directory as the server's OS user, the way its SQL superuser
    can: ``COPY ... TO PROGRAM`` (the backend's working directory is the data directory).

    The program drains the copied row first: one that exits before reading it would make the
    server fail the COPY with a broken pipe, at random."""
    program = f"cat >/dev/null; {shell}"
    with psycopg.connect(cluster.admin_conninfo(), autocommit=True) as conn:
        conn.execute(sql.SQL("COPY (SELECT 1) TO PROGRAM {}").format(sql.Literal(program)))


def server_user_runs(*argv: str) -> None:
    """Run ``argv`` as the server's OS user directly (for folders outside the data dir)."""
    pw = pwd.getpwnam(SERVER_USER)
    subprocess.run(list(argv), user=pw.pw_uid, group=pw.pw_gid, extra_groups=[], check=True)


def secret_leaked_into(folder: Path) -> list[str]:
    """Regular files (not followed) under ``folder`` that hold the victim's content."""
    found = []
    for root, _dirs, files in os.walk(folder):
        for name in files:
            path = Path(root) / name
            if stat.S_ISREG(os.lstat(path).st_mode) and SECRET.strip() in path.read_bytes():
                found.append(str(path))
    return found


TMP_NAMES = ["pg_hba.conf", "pg_ident.conf", CONF_NAME, "postgresql.conf", META_NAME]


def test_planted_temp_symlinks_do_not_hand_root_files_to_the_server_user(
    running: Cluster, scratch: Path
) -> None:
    """``ln -s <victim> pg_hba.conf.meshtui-tmp`` as the server user, then
    the cluster is created again (what every ``lab up`` does)."""
    victims = {name: make_victim(scratch, f"victim-{i}") for i, name in enumerate(TMP_NAMES)}
    for name, victim in victims.items():
        as_server_user(running, f"ln -s {victim.path} {name}.meshtui-tmp")
    again = create_cluster(running.datadir, port=running.port)
    for victim in victims.values():
        victim.unchanged()
    assert secret_leaked_into(running.datadir) == []
    # the cluster went on safely: our pg_hba is in place and the admin still gets in
    with psycopg.connect(again.admin_conninfo()) as conn:
        rules = conn.execute("SELECT count(*) FROM pg_hba_file_rules WHERE error IS NULL")
        assert rules.fetchone() == (2,)
    owner = pwd.getpwnam(SERVER_USER).pw_uid
    hba = os.lstat(running.datadir / "pg_hba.conf")
    assert stat.S_ISREG(hba.st_mode) and hba.st_uid == owner
    assert stat.S_IMODE(hba.st_mode) == 0o600


def test_lab_up_again_after_the_planted_symlink_keeps_the_victim(scratch: Path) -> None:
    """The finding's own steps, through ``lab up`` (loopback, as root)."""
    state = scratch / "state"
    state.mkdir(mode=0o711)
    victim = make_victim(scratch)
    try:
        built = lab_mesh.up(state, loopback=True, mesh={"app1": ["gitea"]})
        cluster = open_cluster(built.datadir)
        as_server_user(cluster, f"ln -s {victim.path} pg_hba.conf.meshtui-tmp")
        lab_mesh.up(state, loopback=True, mesh={"app1": ["gitea"]})
        victim.unchanged()
        assert secret_leaked_into(built.datadir) == []
    finally:
        lab_mesh.down(state, purge=True)
    victim.unchanged()


def test_postgresql_conf_symlinked_to_a_root_file_is_refused_and_not_read(
    running: Cluster, scratch: Path
) -> None:
    victim = make_victim(scratch)
    as_server_user(running, f"ln -sf {victim.path} postgresql.conf")
    with pytest.raises(LabError) as err:
        create_cluster(running.datadir, port=running.port)
    message = str(err.value)
    assert "postgresql.conf" in message and "symbolic link" in message
    assert SECRET.strip().decode() not in message
    victim.unchanged()
    assert secret_leaked_into(running.datadir) == []
    assert os.path.islink(running.datadir / "postgresql.conf")  # left as the attacker made it


def test_postgresql_conf_as_a_fifo_is_refused_without_hanging(running: Cluster) -> None:
    as_server_user(running, "mv postgresql.conf keep.conf && mkfifo -m 600 postgresql.conf")
    try:
        _refused_without_hanging(running)
    finally:  # pg_ctl itself (as the server user) would block on that FIFO at teardown
        as_server_user(running, "rm -f postgresql.conf && mv keep.conf postgresql.conf")


def _refused_without_hanging(running: Cluster) -> None:
    outcome: list[BaseException | None] = []

    def again() -> None:
        try:
            create_cluster(running.datadir, port=running.port)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            outcome.append(exc)
        else:
            outcome.append(None)

    worker = threading.Thread(target=again, daemon=True)
    worker.start()
    worker.join(20)
    if worker.is_alive():  # release the reader so the thread ends, then fail
        fd = os.open(running.datadir / "postgresql.conf", os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        worker.join(20)
        pytest.fail("create_cluster blocked reading a FIFO planted at postgresql.conf")
    (exc,) = outcome
    assert isinstance(exc, LabError), exc
    assert "postgresql.conf" in str(exc) and "FIFO" in str(exc)


def test_server_log_symlink_is_not_read_into_the_start_error(
    running: Cluster, scratch: Path
) -> None:
    """A start that fails quotes the log's tail; a log symlinked to a root file is not read."""
    victim = make_victim(scratch)
    as_server_user(running, f"ln -sf {victim.path} {LOG_NAME}")
    running.stop()
    with pytest.raises(LabError) as err:
        running.start()  # pg_ctl, as the server user, cannot open the victim: start fails
    assert SECRET.strip().decode() not in str(err.value)
    victim.unchanged()


def test_a_rewritten_cluster_record_cannot_make_root_run_or_read_elsewhere(
    running: Cluster, scratch: Path
) -> None:
    """``meshtui-cluster.json`` lives in the server's folder: what it says about who runs the
    tools, where the log and the socket are, is never trusted."""
    victim = make_victim(scratch)
    forged = {
        "port": running.port,
        "listen": list(running.listen),
        "socket_dir": str(scratch),
        "log_path": str(victim.path),
        "system_user": None,
        "hba_networks": ["127.0.0.1/32"],
    }
    as_server_user(running, f"cat > {META_NAME} <<'EOF'\n{json.dumps(forged)}\nEOF")
    again = open_cluster(running.datadir)
    assert again.system_user == SERVER_USER
    assert again.log_path == running.datadir / LOG_NAME
    assert again.socket_dir == running.datadir
    assert again.running()
    victim.unchanged()


def test_record_symlinked_to_a_root_file_is_refused(running: Cluster, scratch: Path) -> None:
    victim = make_victim(scratch)
    as_server_user(running, f"ln -sf {victim.path} {META_NAME}")
    with pytest.raises(LabError) as err:
        open_cluster(running.datadir)
    assert META_NAME in str(err.value) and "symbolic link" in str(err.value)
    victim.unchanged()


def test_data_dir_symlink_planted_in_a_shared_folder_is_refused(scratch: Path) -> None:
    """Another user plants ``data -> <root's empty folder>`` in a sticky shared folder (like
    /tmp) before the cluster is made there: root must not chmod, chown or initdb into it."""
    shared = scratch / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    target = scratch / "roots-folder"
    target.mkdir()
    target.chmod(0o755)
    server_user_runs("ln", "-s", str(target), str(shared / "data"))
    with pytest.raises(LabError) as err:
        create_cluster(shared / "data", port=free_port())
    assert str(shared / "data") in str(err.value) and "symbolic link" in str(err.value)
    st = os.stat(target)
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o755)
    assert list(target.iterdir()) == []


def test_lab_down_purge_never_follows_what_the_server_user_left(scratch: Path) -> None:
    """The server user fills its folder with symlinks (to a root file and a root folder), a
    FIFO and nested folders; ``lab down --purge`` removes the lab and touches none of them."""
    state = scratch / "state"
    state.mkdir(mode=0o711)
    victim = make_victim(scratch)
    keep = scratch / "keep"
    keep.mkdir(mode=0o700)
    kept = make_victim(keep, "inside")
    try:
        built = lab_mesh.up(state, loopback=True, mesh={"app1": ["gitea"]})
        cluster = open_cluster(built.datadir)
        as_server_user(
            cluster,
            f"mkdir -p deep/er && ln -s {victim.path} deep/er/file-link && "
            f"ln -s {keep} deep/dir-link && ln -s {keep} dir-link && mkfifo deep/fifo",
        )
    finally:
        lab_mesh.down(state, purge=True)
    assert not (state / "lab").exists()
    victim.unchanged()
    kept.unchanged()
    assert stat.S_IMODE(os.stat(keep).st_mode) == 0o700


def test_a_folder_planted_at_a_config_name_is_refused_by_name_and_leaves_no_temp(
    running: Cluster,
) -> None:
    as_server_user(running, "mv pg_ident.conf keep.conf && mkdir pg_ident.conf")
    try:
        with pytest.raises(LabError) as err:
            create_cluster(running.datadir, port=running.port)
        assert str(running.datadir / "pg_ident.conf") in str(err.value)
        assert not [n for n in os.listdir(running.datadir) if ".meshtui-" in n]
    finally:
        as_server_user(running, "rmdir pg_ident.conf && mv keep.conf pg_ident.conf")


def test_lab_files_are_private_under_a_permissive_umask(scratch: Path) -> None:
    """The lab folder is 0711 (the server user must traverse it), so every file root leaves
    there by a guessable name is 0600: the agents' logs and the declaration."""
    state = scratch / "state"
    state.mkdir(mode=0o711)
    old = os.umask(0o022)
    try:
        built = lab_mesh.up(state, loopback=True, mesh={"app1": ["gitea"]})
        private = [built.declaration] + [built.folder / f"{n}.agent.log" for n in built.pids]
        for path in private:
            assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600, path
    finally:
        os.umask(old)
        lab_mesh.down(state, purge=True)
