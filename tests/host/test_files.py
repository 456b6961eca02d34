"""How a real agent touches files on its node, attacked as a local user would: links planted at
the grants folder, folders owned or writable by someone else, FIFOs and /dev/zero at a credential
path, and credential files that a real system user (and no other) may read."""

from __future__ import annotations

import json
import os
import pwd
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from meshtui import crypto, folders
from meshtui.controller.plan.planner import Planner
from meshtui.protocol import wire
from tests.passwd import account

GITEA = "database:app1/gitea->db1/postgres"
WIKI = "database:app1/wiki->db1/postgres"
PROVIDER = ("db1/postgres", "database")


@pytest.fixture
def mesh(mesh_with_agents):
    # a command provisioner keeps these tests about the agent's files, not PostgreSQL
    return mesh_with_agents(
        consumers={"app1": ["gitea", "wiki"]}, port=5432, admin=None, provisioner=["true"]
    )


@pytest.fixture
def users() -> Iterator[dict[str, str]]:
    """Real system users and a group: ``app`` (in ``group``) and ``other`` (not in it)."""
    tag = f"{os.getpid() % 100000}"
    made = {"app": f"mtapp{tag}", "other": f"mtoth{tag}", "group": f"mtgrp{tag}"}
    run = ["groupadd", made["group"]], ["useradd", "-M", "-N", "-g", made["group"], made["app"]]
    try:
        for argv in (*run, ["useradd", "-M", "-N", made["other"]]):
            account(*argv)
        yield made
    finally:
        for argv in (["userdel", made["app"]], ["userdel", made["other"]]):
            account(*argv, check=False)
        account("groupdel", made["group"], check=False)


def call(mesh, node: str, kind: str, payload: dict[str, Any], timeout: float = 5.0) -> dict:
    """One signed request to a real agent over its socket; the answer's payload."""
    keys = crypto.load_private(mesh.state / "controller.key")
    env, _ = wire.envelope(kind, payload, sender="controller", to=node, keys=keys)
    transport = httpx.HTTPTransport(uds=str(mesh.sockets[node]))
    with httpx.Client(transport=transport, base_url="http://agent", timeout=timeout) as client:
        resp = client.post("/v1", json=env)
    body = json.loads(crypto.unb64(resp.json()["body"]))
    return dict(body["payload"])


def provider_delivery(mesh) -> dict[str, Any]:
    with mesh.controller() as ctl:
        return {"provider": Planner(ctl.inventory).provider_sets([PROVIDER], {})["db1"]}


def tree(folder: Path) -> dict[str, Any]:
    """Every entry below ``folder`` with its mode and content: proof nothing changed."""
    out: dict[str, Any] = {".": stat.S_IMODE(folder.lstat().st_mode)}
    for p in sorted(folder.rglob("*")):
        st = p.lstat()
        out[str(p.relative_to(folder))] = (
            stat.S_IMODE(st.st_mode),
            st.st_uid,
            p.read_bytes() if stat.S_ISREG(st.st_mode) else None,
        )
    return out


def victim(tmp_path: Path) -> Path:
    folder = tmp_path / "victim"
    folder.mkdir()
    folder.chmod(0o755)
    (folder / "payroll.secret").write_text("not meshtui's")
    (folder / "keep").write_text("keep")
    return folder


# ---------------------------------------------------------------------------- the grants folder


def test_a_link_planted_at_the_grants_folder_is_refused_and_nothing_is_touched(mesh, tmp_path):
    with mesh.controller() as ctl:
        assert ctl.push().ok
    target = victim(tmp_path)
    before = tree(target)
    grants = mesh.root / "srv/db1/postgres/grants"
    manifest = mesh.root / "srv/db1/postgres/mesh.json"
    manifest_before = manifest.read_bytes()
    for p in grants.iterdir():
        p.unlink()
    grants.rmdir()
    grants.symlink_to(target)
    (got,) = call(mesh, "db1", wire.DELIVER, provider_delivery(mesh))["provider"]
    assert not got["ok"]
    assert f"{grants} is a symbolic link" in got["error"] and "node db1" in got["error"]
    assert tree(target) == before  # not chmod'ed, nothing deleted, no secret written
    assert manifest.read_bytes() == manifest_before


def test_a_grants_folder_owned_by_another_user_is_refused(mesh, users):
    with mesh.controller() as ctl:
        assert ctl.push().ok
    grants = mesh.root / "srv/db1/postgres/grants"
    os.chown(grants, pwd.getpwnam(users["other"]).pw_uid, -1)
    before = tree(grants)
    (got,) = call(mesh, "db1", wire.DELIVER, provider_delivery(mesh))["provider"]
    assert not got["ok"]
    assert f"{grants} is owned by {users['other']}" in got["error"]
    assert tree(grants) == before


def test_a_manifest_folder_its_software_user_owns_is_refused(mesh, users, tmp_path):
    """The review's attacker owns the manifest folder: the agent does not work through it."""
    folder = mesh.root / "srv/db1/postgres"
    folder.mkdir(parents=True)
    os.chown(folder, pwd.getpwnam(users["other"]).pw_uid, -1)
    target = victim(tmp_path)
    before = tree(target)
    (folder / "grants").symlink_to(target)
    os.lchown(folder / "grants", pwd.getpwnam(users["other"]).pw_uid, -1)
    (got,) = call(mesh, "db1", wire.DELIVER, provider_delivery(mesh))["provider"]
    assert not got["ok"] and f"{folder} is owned by {users['other']}" in got["error"]
    assert tree(target) == before
    assert sorted(p.name for p in folder.iterdir()) == ["grants"]


def test_a_manifest_folder_others_can_write_is_refused(mesh):
    folder = mesh.root / "srv/db1/postgres"
    folder.mkdir(parents=True)
    folder.chmod(0o777)
    (got,) = call(mesh, "db1", wire.DELIVER, provider_delivery(mesh))["provider"]
    assert not got["ok"] and "can be written by other users" in got["error"]
    assert "chmod go-w" in got["error"] and list(folder.iterdir()) == []


# --------------------------------------------------------------- FIFOs and /dev/zero


@pytest.mark.parametrize("plant", ["fifo", "dev-zero"])
def test_a_fifo_or_dev_zero_at_a_credential_path_is_that_ends_error_only(mesh, plant):
    with mesh.controller() as ctl:
        assert ctl.push().ok
    gitea = mesh.root / "srv/app1/gitea/db.password"
    wiki = mesh.root / "srv/app1/wiki/db.password"
    gitea.unlink()
    if plant == "fifo":
        os.mkfifo(gitea, 0o600)
        said = f"{gitea} is a FIFO, not a regular file"
    else:
        gitea.symlink_to("/dev/zero")
        said = f"{gitea} is a symbolic link, not a regular file"

    started = time.monotonic()
    held = {h["pair"]: h for h in call(mesh, "app1", wire.STATE, {})["holdings"]}
    assert time.monotonic() - started < 2.0
    assert held[GITEA]["present"] is False and said in held[GITEA]["error"]
    assert held[WIKI]["present"] is True and "error" not in held[WIKI]

    wiki.unlink()  # the other pair on the node needs a delivery too
    started = time.monotonic()
    with mesh.controller() as ctl:
        report = ctl.push()
        rows = {r.pair: r for r in ctl.status()}
    assert time.monotonic() - started < 20.0
    assert not report.ok
    assert said in rows[GITEA].reason and "node app1: app1/gitea requires database" in (
        rows[GITEA].reason
    )
    assert rows[WIKI].consumer_generation == rows[WIKI].generation and wiki.exists()
    assert stat.S_ISFIFO(gitea.lstat().st_mode) if plant == "fifo" else gitea.is_symlink()

    status = mesh.cli("status", "--json")
    by_pair = {r["pair"]: r for r in json.loads(status.stdout)}
    assert said in by_pair[GITEA]["reason"]

    started = time.monotonic()
    targets = [
        {"pair": p, "file": str(f), "host": "127.0.0.1", "port": 9, "login": "x", "dbname": "x"}
        for p, f in ((GITEA, gitea), (WIKI, wiki))
    ]
    probed = {r["pair"]: r for r in call(mesh, "app1", wire.PROBE, {"targets": targets})["results"]}
    assert time.monotonic() - started < 5.0
    assert said in probed[GITEA]["error"] and probed[GITEA]["result"] is None
    assert probed[WIKI]["digest"] == crypto.secret_digest(wiki.read_bytes())
    assert probed[WIKI]["result"] is not None


def test_an_oversize_credential_file_is_refused_unread(mesh):
    with mesh.controller() as ctl:
        assert ctl.push().ok
    gitea = mesh.root / "srv/app1/gitea/db.password"
    gitea.write_bytes(b"x" * (64 * 1024))
    held = {h["pair"]: h for h in call(mesh, "app1", wire.STATE, {})["holdings"]}
    assert "larger than 4096 bytes" in held[GITEA]["error"]


# ------------------------------------------------ who may read the file


def declare_access(mesh, **access: str) -> None:
    """Give app1/gitea's requirement owner/group/mode in the declaration, and declare it."""
    text = mesh.decl.read_text()
    old = 'file = "srv/app1/gitea/db.password" }'
    given = ", ".join(f'{k} = "{v}"' for k, v in access.items())
    assert old in text
    mesh.decl.write_text(text.replace(old, f'file = "srv/app1/gitea/db.password", {given} }}'))
    with mesh.controller() as ctl:
        ctl.declare(mesh.decl)


def read_as(user: str, path: Path) -> subprocess.CompletedProcess[str]:
    """``cat`` as ``user`` with exactly that user's groups, as the app's service would run."""
    gid = pwd.getpwnam(user).pw_gid
    return subprocess.run(
        ["cat", str(path)],
        user=user,
        group=gid,
        extra_groups=os.getgrouplist(user, gid),
        capture_output=True,
        text=True,
        check=False,
        timeout=10,
    )


def test_the_apps_user_reads_its_file_another_user_cannot_and_rotation_keeps_it(mesh, users):
    mesh.allow("app1", owners=(users["app"],), groups=(users["group"],))  # the node's policy
    declare_access(mesh, owner=users["app"], group=users["group"], mode="0640")
    with mesh.controller() as ctl:
        assert ctl.push().ok
    gitea = mesh.root / "srv/app1/gitea/db.password"
    wiki = mesh.root / "srv/app1/wiki/db.password"
    app_uid = pwd.getpwnam(users["app"]).pw_uid

    def check() -> str:
        st = gitea.stat()
        assert (stat.S_IMODE(st.st_mode), st.st_uid) == (0o640, app_uid)
        assert st.st_gid == pwd.getpwnam(users["app"]).pw_gid
        mine = read_as(users["app"], gitea)
        assert mine.returncode == 0 and mine.stdout == gitea.read_text()
        theirs = read_as(users["other"], gitea)
        assert theirs.returncode != 0 and "Permission denied" in theirs.stderr
        assert read_as(users["app"], wiki).returncode != 0  # the wiki's stays root's, 0600
        return mine.stdout

    first = check()
    assert stat.S_IMODE(wiki.stat().st_mode) == 0o600 and wiki.stat().st_uid == 0
    with mesh.controller() as ctl:
        assert ctl.rotate([GITEA]).ok
    assert check() != first  # a new credential, same owner, group and mode
    leftovers = [p.name for p in gitea.parent.iterdir()]
    assert leftovers == ["db.password"]


def test_a_changed_owner_or_mode_is_applied_by_the_next_push(mesh, users):
    with mesh.controller() as ctl:
        assert ctl.push().ok
    gitea = mesh.root / "srv/app1/gitea/db.password"
    content = gitea.read_bytes()
    assert read_as(users["app"], gitea).returncode != 0
    mesh.allow("app1", groups=(users["group"],))  # the node's policy
    declare_access(mesh, group=users["group"], mode="0640")
    with mesh.controller() as ctl:
        report = ctl.push()
    assert report.ok, report
    st = gitea.stat()
    assert stat.S_IMODE(st.st_mode) == 0o640 and st.st_uid == 0
    assert st.st_gid == pwd.getpwnam(users["app"]).pw_gid
    assert gitea.read_bytes() == content  # same generation, only who may read it changed
    assert read_as(users["app"], gitea).returncode == 0


def test_an_unknown_owner_on_the_node_is_a_clear_error_and_nothing_is_written(mesh):
    declare_access(mesh, owner="nosuchuser-mt", mode="0600")
    with mesh.controller() as ctl:
        report = ctl.push()
        rows = {r.pair: r for r in ctl.status()}
    assert not report.ok
    why = rows[GITEA].reason
    assert "node app1: app1/gitea requires database" in why and "'nosuchuser-mt'" in why
    assert not (mesh.root / "srv/app1/gitea").exists()
    assert (mesh.root / "srv/app1/wiki/db.password").exists()


def test_a_credential_folder_another_user_can_write_is_refused(mesh, users):
    folder = mesh.root / "srv/app1/gitea"
    folder.mkdir(parents=True)
    os.chown(folder, 0, pwd.getpwnam(users["app"]).pw_gid)
    folder.chmod(0o770)  # the usual root:git 0770 /etc/gitea: git could swap the file
    with mesh.controller() as ctl:
        assert not ctl.push().ok
        rows = {r.pair: r for r in ctl.status()}
    assert f"{folder} can be written by group {users['group']}" in rows[GITEA].reason
    assert list(folder.iterdir()) == []
    assert rows[WIKI].consumer_generation == rows[WIKI].generation


# ------------------------------------------------------- siblings: state folder and socket


def test_a_node_state_folder_reached_through_a_link_or_writable_by_others_is_refused(
    tmp_path: Path,
) -> None:
    from meshtui.controller.core import init_keys
    from meshtui.errors import KeyFileError
    from meshtui.host.state import identity

    pub, _ = init_keys(tmp_path / "controller")
    real = tmp_path / "node"
    identity.init("app1", real, pub)
    assert identity.load(real).name == "app1"
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(KeyFileError, match="is a symbolic link"):
        identity.load(link)
    with pytest.raises(KeyFileError, match="is a symbolic link"):
        identity.init("app1", link, pub)
    real.chmod(0o777)
    with pytest.raises(KeyFileError, match="can be written by other users"):
        identity.load(real)


def test_the_agent_socket_folder_must_be_one_nobody_else_can_write(tmp_path: Path) -> None:
    from meshtui.errors import HostFileError
    from meshtui.host.server.serve import uvicorn_config

    shared = tmp_path / "run"
    shared.mkdir()
    shared.chmod(0o777)  # another user could swap the socket for a link before its chmod
    with pytest.raises(HostFileError, match="can be written by other users"):
        uvicorn_config(None, f"unix:{shared}/app1.sock")  # type: ignore[arg-type]
    shared.chmod(0o755)
    assert uvicorn_config(None, f"unix:{shared}/app1.sock").uds == f"{shared}/app1.sock"  # type: ignore[arg-type]


# ------------------------------------------------------------------ the walk itself


def test_a_link_anywhere_on_the_way_is_refused_and_shared_ancestors_change_nothing(
    tmp_path: Path,
) -> None:
    from meshtui.errors import HostFileError

    root = tmp_path / "srv"
    for i in range(3):
        (root / "app1" / f"m{i}").mkdir(parents=True)
        (root / "app1" / f"m{i}" / "db.password").write_bytes(b"s%d" % i)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "db.password").write_bytes(b"not this")
    (root / "app1" / "m3").symlink_to(elsewhere)
    (root / "app2").symlink_to(root / "app1")
    with folders.Ancestors() as ancestors:
        for i in range(3):
            path = root / "app1" / f"m{i}" / "db.password"
            assert folders.read_file(path, ancestors=ancestors) == b"s%d" % i
        assert len(ancestors.fds) >= 3  # /, tmp..., srv, app1 shared by the three reads
        for bad in (root / "app1/m3/db.password", root / "app2/m0/db.password"):
            with pytest.raises(HostFileError, match="is a symbolic link"):
                folders.read_file(bad, ancestors=ancestors)
            with pytest.raises(HostFileError, match="is a symbolic link"):
                folders.read_file(bad)
        assert folders.read_file(root / "app1/m9/db.password", ancestors=ancestors) is None
