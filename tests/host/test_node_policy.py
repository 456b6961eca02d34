"""The node policy: a declaration asks, the node decides, deny by default.

The attack (shared/notes/security-2026-12-01.md, H2) was a declaration pushed through the real
controller: a credential file in ``/etc/cron.d``, a ``reload`` and a provisioner run as root, a
``receives`` that replaced a 270 KB system file and a ``grants`` that chmod-ed a root folder
0700. Here each of those is declared and pushed to real agents (``meshtui host serve`` on Unix
sockets) whose policy allows only the test mesh's ``srv/`` folder: each is refused for its end,
naming node, module, key and the entry that would allow it; nothing is written, chmod-ed or
run; and the other ends of the same push are delivered.
"""

from __future__ import annotations

import json
import os
import pwd
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from meshtui.errors import PolicyFileError
from meshtui.host.policy import node_policy
from meshtui.runas import RUN_ENV
from tests.fix_agents import Mesh, agent_user

GITEA = "database:app1/gitea->db1/postgres"
EVIL = "database:app1/evil->db1/postgres"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="runs commands as another user")


@pytest.fixture
def mesh(mesh_with_agents) -> Mesh:
    # a command provisioner keeps these tests about the node, not PostgreSQL
    return mesh_with_agents(
        consumers={"app1": ["gitea"]}, port=5432, admin=None, provisioner=["true"]
    )


def toml(value: object) -> str:
    """A TOML value for a test's declaration (JSON's strings and lists are TOML's)."""
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml(v)}" for k, v in value.items()) + " }"
    return json.dumps(value)


ADDED = "\n# ---- added by the test\n"


def declare_more(mesh: Mesh, extra: str) -> None:
    """Declare the mesh's declaration with ``extra`` modules (instead of those added before)."""
    base = mesh.decl.read_text().split(ADDED)[0]
    mesh.decl.write_text(base + ADDED + extra + "\n")
    with mesh.controller() as ctl:
        ctl.declare(mesh.decl)


def evil_consumer(mesh: Mesh, **requirement: object) -> None:
    """Declare ``app1/evil`` requiring database with ``requirement`` (file, owner, reload...)."""
    entry = {"name": "database", "values": {"database": "evil"}, **requirement}
    declare_more(mesh, f'[modules."app1/evil"]\nrequires = [{toml(entry)}]')


def push(mesh: Mesh) -> dict[str, str]:
    """Push; each pair that is behind, and why."""
    with mesh.controller() as ctl:
        return ctl.push().behind


def marker_script(folder: Path, name: str = "cmd") -> tuple[Path, Path]:
    """An executable that records who ran it, in which session and with which terminal, into a
    file another user may write; (script, record)."""
    folder.mkdir(mode=0o755, parents=True, exist_ok=True)
    out = folder / "out"
    out.mkdir(mode=0o777, exist_ok=True)
    out.chmod(0o777)
    record = out / f"{name}.json"
    script = folder / name
    script.write_text(
        "#!/usr/bin/python3\n"
        "import json, os, sys\n"
        "try:\n"
        "    os.close(os.open('/dev/tty', os.O_RDWR)); tty = True\n"
        "except OSError:\n"
        "    tty = False\n"
        f"json.dump({{'uid': os.getuid(), 'gid': os.getgid(), 'argv': sys.argv[1:],"
        f" 'leader': os.getsid(0) == os.getpid(), 'tty': tty, 'cwd': os.getcwd(),"
        f" 'env': sorted(os.environ)}}, open({str(record)!r}, 'w'))\n"
    )
    script.chmod(0o755)
    return script, record


# ---- starting ---------------------------------------------------------------------------------


def serve(folder: Path, sock: Path) -> subprocess.CompletedProcess[str]:
    """``meshtui host serve`` on ``folder``, expected to refuse to start."""
    argv = [sys.executable, "-m", "meshtui.cli", "host", "serve", "--state", str(folder)]
    return subprocess.run(
        [*argv, "--listen", f"unix:{sock}"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def test_an_agent_without_a_policy_refuses_to_start_and_says_how_to_write_one(mesh: Mesh) -> None:
    mesh.stop("app1")
    policy = mesh.nodes["app1"] / "policy.toml"
    policy.unlink()
    done = serve(mesh.nodes["app1"], mesh.root / "x.sock")
    assert done.returncode == 2, done
    assert f"{policy}: no node policy: the agent refuses to start without one" in done.stderr
    assert "meshtui host init" in done.stderr
    assert not (mesh.root / "x.sock").exists()


@pytest.mark.parametrize("unsafe", ["link", "group-writable", "world-writable", "other-owner"])
def test_an_unsafe_policy_file_stops_the_agent_naming_the_fix(mesh: Mesh, unsafe: str) -> None:
    mesh.stop("app1")
    policy = mesh.nodes["app1"] / "policy.toml"
    if unsafe == "link":
        real = mesh.root / "elsewhere.toml"
        policy.rename(real)
        policy.symlink_to(real)
        want = "is a symbolic link"
    elif unsafe == "other-owner":
        os.chown(policy, pwd.getpwnam("nobody").pw_uid, -1)
        want = "is owned by nobody, not by the agent's user root (chown root"
    else:
        policy.chmod(0o620 if unsafe == "group-writable" else 0o602)
        want = "can be written by others"
    done = serve(mesh.nodes["app1"], mesh.root / "x.sock")
    assert done.returncode == 2 and want in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("text", "key", "fix"),
    [
        ('[[reload]]\nargv = ["true"]\n', "reload[0].user", "user ="),
        ('[[reload]]\nargv = "true"\nuser = "root"\n', "reload[0].argv", "argv = ["),
        ('[[credentials]]\nunder = "/"\n', "credentials[0].under", "name the folder"),
        ('[[credentials]]\nunder = "/etc/../root"\n', "credentials[0].under", "without '..'"),
        ('[[providers]]\nunder = "/srv"\nkind = ["postgres"]\n', "providers[0].kind", "kinds"),
        ('[[reload]]\nargv = ["true"]\nuser = "no-such-user-mt"\n', "reload[0].user", "create"),
        ("[files]\n", "files", "credentials"),
    ],
)
def test_a_malformed_policy_names_the_file_the_key_and_the_fix(
    tmp_path: Path, text: str, key: str, fix: str
) -> None:
    node_policy.write(tmp_path, text)
    with pytest.raises(PolicyFileError) as info:
        node_policy.load(tmp_path, "app1")
    err = info.value
    assert err.file == str(tmp_path / "policy.toml") and err.key == key and fix in err.fix, err


def test_host_init_writes_a_commented_deny_by_default_policy_and_keeps_an_edited_one(
    tmp_path: Path,
) -> None:
    from meshtui.controller.core import init_keys

    pub, _ = init_keys(tmp_path / "state")
    folder = tmp_path / "node"
    argv = [sys.executable, "-m", "meshtui.cli", "host", "init", "--name", "app1"]
    argv += ["--state", str(folder), "--controller", str(pub)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
    policy = folder / "policy.toml"
    assert f"wrote the node policy {policy}: it allows nothing yet" in done.stdout
    st = policy.stat()
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.geteuid()
    text = policy.read_text()
    assert "Deny by default" in text and "# [[reload]]" in text and "# [[credentials]]" in text
    allowed = node_policy.load(folder, "app1")
    assert (allowed.credentials, allowed.providers, allowed.reload, allowed.provisioner) == (
        (),
        (),
        (),
        (),
    )
    policy.write_text(text + '\n[[credentials]]\nunder = "/etc/gitea"\n')
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
    assert f"kept the node policy {policy}" in done.stdout
    assert node_policy.load(folder, "app1").credentials[0].under == "/etc/gitea"


# ---- consumer ends ----------------------------------------------------------------------------


def test_a_credential_file_outside_the_policy_is_refused_and_the_other_ends_carry_on(
    mesh: Mesh, tmp_path: Path
) -> None:
    cron = tmp_path / "cron.d"
    cron.mkdir()
    evil_consumer(mesh, file=str(cron / "meshtui-poc"))
    behind = push(mesh)
    assert list(behind) == [EVIL]
    why = behind[EVIL]
    assert "node app1: app1/evil requires database: file:" in why
    assert f"{cron}/meshtui-poc is not below a folder this node allows" in why
    policy = mesh.nodes["app1"] / "policy.toml"
    assert f'to allow it, add to {policy}: [[credentials]] under = "{cron}"' in why
    assert list(cron.iterdir()) == []
    # the other consumer end and the provider end of the same push were delivered
    assert (mesh.root / "srv/app1/gitea/db.password").exists()
    with mesh.controller() as ctl:
        rows = {r.pair: r for r in ctl.status()}
    assert rows[GITEA].consumer_generation == rows[GITEA].generation
    assert rows[EVIL].provider_generation == rows[EVIL].generation


@pytest.mark.parametrize(("key", "name"), [("owner", "nobody"), ("group", "nogroup")])
def test_an_owner_or_group_the_policy_does_not_list_is_refused(
    mesh: Mesh, key: str, name: str
) -> None:
    evil_consumer(mesh, file="srv/app1/evil/db.password", **{key: name})
    why = push(mesh)[EVIL]
    assert f"node app1: app1/evil requires database: {key}: {key} '{name}' of" in why
    assert f'add "{name}" to {key}s of the [[credentials]] entry' in why
    assert not (mesh.root / "srv/app1/evil").exists()
    mesh.allow("app1", **{f"{key}s": (name,)})
    assert push(mesh) == {}
    st = (mesh.root / "srv/app1/evil/db.password").stat()
    assert (st.st_uid if key == "owner" else st.st_gid) == 65534


def test_a_reload_the_policy_does_not_list_is_refused_and_never_runs(mesh: Mesh) -> None:
    script, record = marker_script(mesh.root / "bin")
    evil_consumer(mesh, file="srv/app1/evil/db.password", reload=[str(script), "now"])
    why = push(mesh)[EVIL]
    assert "node app1: app1/evil requires database: reload: command" in why
    assert f'[[reload]] argv = ["{script}", "now"]' in why
    assert not record.exists()
    assert not (mesh.root / "srv/app1/evil").exists()  # nothing of that end is written


def test_an_allowed_reload_runs_as_the_policys_user_in_a_new_session_without_a_terminal(
    mesh: Mesh,
) -> None:
    script, record = marker_script(mesh.root / "bin")
    mesh.allow("app1", reload=((str(script), "now"),), user="nobody")
    evil_consumer(mesh, file="srv/app1/evil/db.password", reload=[str(script), "now"])
    assert push(mesh) == {}
    ran = json.loads(record.read_text())
    nobody = pwd.getpwnam("nobody")
    assert (ran["uid"], ran["gid"], ran["argv"]) == (nobody.pw_uid, nobody.pw_gid, ["now"])
    assert ran["leader"] and not ran["tty"] and ran["cwd"] == "/"
    # and the test run's mark (meshtui.runas.RUN_ENV), so an interrupted run finds it
    assert set(ran["env"]) <= {"PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_CTYPE", RUN_ENV}


def test_a_reload_of_systemd_run_or_systemctl_runs_only_as_the_exact_argv_listed(
    mesh: Mesh,
) -> None:
    """The suspected unit escape: a ``reload`` of ``systemd-run`` (or a ``systemctl`` that
    starts something else) ran as root inside the agent's unit. With the policy, neither runs
    unless its exact argv is listed, and the listed one runs as the policy's user. (There is
    no systemd here: ``systemctl`` is a recording stand-in at an absolute path.)"""
    bin_ = mesh.root / "bin"
    systemctl, record = marker_script(bin_, "systemctl")
    escapes = [
        ["systemd-run", "--unit", "evil", "--", "/bin/sh", "-c", "id > /root/proof"],
        ["systemd-run", "-p", "User=root", "/bin/sh"],
        [str(systemctl), "start", "evil.service"],
        [str(systemctl), "reload", "gitea", "evil"],
    ]
    mesh.allow("app1", reload=((str(systemctl), "reload", "gitea"),), user="nobody")
    for argv in escapes:
        evil_consumer(mesh, file="srv/app1/evil/db.password", reload=argv)
        why = push(mesh)[EVIL]
        assert "reload: command" in why and "is not one this node runs" in why, why
        assert not record.exists() and not Path("/root/proof").exists()
    evil_consumer(
        mesh, file="srv/app1/evil/db.password", reload=[str(systemctl), "reload", "gitea"]
    )
    assert push(mesh) == {}
    ran = json.loads(record.read_text())
    assert ran["uid"] == pwd.getpwnam("nobody").pw_uid and ran["argv"] == ["reload", "gitea"]


def test_a_connection_file_outside_the_policy_or_over_a_file_it_did_not_write_is_refused(
    mesh: Mesh, tmp_path: Path
) -> None:
    """A connection file holds no secret, but an app reads it: it goes only where a credential
    file may, and never over a file the agent did not write there."""
    outside = tmp_path / "etc"
    outside.mkdir()
    env = outside / "app.env"
    evil_consumer(mesh, file="srv/app1/evil/db.password", connection={"file": str(env)})
    why = push(mesh)[EVIL]
    assert "node app1: app1/evil requires database: connection:" in why
    assert f'[[credentials]] under = "{outside}"' in why
    assert not env.exists() and not (mesh.root / "srv/app1/evil").exists()
    inside = mesh.root / "srv/app1/evil"
    inside.mkdir(parents=True)
    mine = inside / "app.env"
    mine.write_text("APP_SECRET_KEY=keep-me\n")
    evil_consumer(mesh, file="srv/app1/evil/db.password", connection={"file": str(mine)})
    why = push(mesh)[EVIL]
    assert f"{mine} exists and is not a credential this agent wrote" in why
    assert mine.read_text() == "APP_SECRET_KEY=keep-me\n"
    fresh = inside / "db.env"
    evil_consumer(mesh, file="srv/app1/evil/db.password", connection={"file": str(fresh)})
    assert push(mesh) == {}
    assert fresh.exists()


def test_an_existing_file_the_agent_did_not_write_is_not_replaced(mesh: Mesh) -> None:
    folder = mesh.root / "srv/app1/evil"
    folder.mkdir(parents=True)
    config = folder / "app.ini"
    config.write_text("[database]\nHOST = db1\n")  # small, inside the allowed folder
    evil_consumer(mesh, file=str(config))
    why = push(mesh)[EVIL]
    assert f"{config} exists and is not a credential this agent wrote" in why
    assert config.read_text() == "[database]\nHOST = db1\n"


# ---- provider ends ----------------------------------------------------------------------------


def provider_set(mesh: Mesh, **module: object) -> None:
    """Declare ``db1/evilprov`` providing ``evil`` with ``module``'s keys, and app1/gitea
    requiring it."""
    body = "\n".join(f"{k} = {toml(v)}" for k, v in module.items())
    declare_more(
        mesh,
        f'[modules."db1/evilprov"]\nprovides = [{{ name = "evil", port = 5999 }}]\n{body}\n'
        f'[modules."app1/evilapp"]\nrequires = [{{ name = "evil", file = '
        f'"srv/app1/evilapp/evil.password" }}]',
    )


EVIL_PROVIDER = "evil:app1/evilapp->db1/evilprov"


def test_a_manifest_and_grants_outside_the_policy_are_refused(mesh: Mesh, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir(mode=0o755)
    victim.chmod(0o755)
    big = victim / "big-system-file.conf"
    big.write_bytes(b"x" * 270_177)
    provider_set(
        mesh,
        receives={"evil": str(big)},
        grants={"evil": str(victim)},
        provisioner=["true"],
    )
    why = push(mesh)[EVIL_PROVIDER]
    assert "node db1: db1/evilprov provides evil: receives:" in why
    assert "[[providers]]" in why
    assert big.stat().st_size == 270_177 and stat.S_IMODE(victim.stat().st_mode) == 0o755
    assert sorted(p.name for p in victim.iterdir()) == ["big-system-file.conf"]
    assert not (mesh.root / "srv/app1/evilapp").exists()  # its consumer waits for it
    assert (mesh.root / "srv/app1/gitea/db.password").exists()  # the rest carried on


def test_a_manifest_over_an_existing_file_and_grants_over_an_existing_folder_are_refused(
    mesh: Mesh,
) -> None:
    """Inside the allowed folder too: a ``receives`` never replaces a file that is not a
    manifest of that provision, a ``grants`` never chmods a folder the agent did not make."""
    inside = mesh.root / "srv/db1/other"
    inside.mkdir(parents=True, mode=0o755)
    inside.chmod(0o755)
    config = inside / "postgresql.conf"
    config.write_bytes(b"shared_buffers = 1GB\n" * 10_000)
    provider_set(
        mesh, receives={"evil": str(config)}, grants={"evil": str(inside)}, provisioner=["true"]
    )
    why = push(mesh)[EVIL_PROVIDER]
    assert f"{config} exists and is not a manifest meshtui wrote, so it is not replaced" in why
    assert config.read_bytes() == b"shared_buffers = 1GB\n" * 10_000
    provider_set(
        mesh,
        receives={"evil": str(inside / "mesh.json")},
        grants={"evil": str(inside)},
        provisioner=["true"],
    )
    why = push(mesh)[EVIL_PROVIDER]
    assert f"grants folder {inside} exists with mode 0755" in why
    assert stat.S_IMODE(inside.stat().st_mode) == 0o755
    assert sorted(p.name for p in inside.iterdir()) == ["postgresql.conf"]


def test_a_kind_the_policy_does_not_list_is_refused(mesh: Mesh) -> None:
    mesh.allow("db1", kinds=("redis",), provisioner=(("true",),))
    with mesh.controller() as ctl:
        behind = ctl.push().behind
    assert GITEA in behind
    assert (
        "node db1: db1/postgres provides database: kind: kind 'postgres' is not allowed"
        in (behind[GITEA])
    )
    assert 'add "postgres" to kinds of the [[providers]] entry' in behind[GITEA]
    assert not (mesh.root / "srv/db1/postgres/mesh.json").exists()


def test_an_admin_file_the_policy_does_not_list_is_refused(mesh: Mesh) -> None:
    admin = mesh.root / "srv/db1/evil.conninfo"
    provider_set(
        mesh,
        receives={"evil": "srv/db1/evilprov/mesh.json"},
        grants={"evil": "srv/db1/evilprov/grants"},
        admin=str(admin),
    )
    why = push(mesh)[EVIL_PROVIDER]
    assert "node db1: db1/evilprov provides evil: admin: admin file" in why
    assert f'add "{admin}" to admin of the [[providers]] entry' in why
    assert not (mesh.root / "srv/db1/evilprov").exists()


def test_a_provisioner_the_policy_does_not_list_never_runs_and_a_listed_one_runs_as_its_user(
    mesh: Mesh,
) -> None:
    script, record = marker_script(mesh.root / "bin", "provision")
    provider_set(
        mesh,
        receives={"evil": "srv/db1/evilprov/mesh.json"},
        grants={"evil": "srv/db1/evilprov/grants"},
        provisioner=[str(script), "--admin", "{admin}"],
    )
    why = push(mesh)[EVIL_PROVIDER]
    assert "node db1: db1/evilprov provides evil: provisioner: command" in why
    assert f'[[provisioner]] argv = ["{script}", "--admin", "{{admin}}"]' in why
    assert not record.exists() and not (mesh.root / "srv/db1/evilprov").exists()
    mesh.allow("db1", provisioner=(("true",), (str(script), "--admin", "{admin}")), user="nobody")
    push(mesh)
    ran = json.loads(record.read_text())
    assert ran["uid"] == pwd.getpwnam("nobody").pw_uid and ran["leader"] and not ran["tty"]
    assert ran["argv"] == ["--admin", "", str(mesh.root / "srv/db1/evilprov/mesh.json")]


# ---- doctor and declare --check-nodes ---------------------------------------------------------


def test_doctor_and_declare_check_nodes_name_what_each_policy_refuses(
    mesh: Mesh, tmp_path: Path
) -> None:
    text = mesh.decl.read_text()
    done = mesh.cli("declare", str(mesh.decl), "--check-nodes")
    assert done.returncode == 0, done.stdout + done.stderr  # the test mesh's policy allows it
    cron = tmp_path / "cron.d"
    mesh.decl.write_text(
        text
        + f'\n[modules."app1/evil"]\nrequires = [{{ name = "database", file = "{cron}/x", '
        + 'reload = ["systemd-run", "/bin/sh"] }]\n'
    )
    done = mesh.cli("declare", str(mesh.decl), "--check-nodes", "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    found = json.loads(done.stdout)["check_nodes"]["problems"]
    policy = [(p["node"], p["check"], p["subject"]) for p in found if p["check"] == "policy"]
    assert policy == [("app1", "policy", EVIL)] * 2
    assert f"app1/evil requires database: file: {cron}/x is not below" in found[0]["problem"]
    assert found[1]["fix"].endswith('[[reload]] argv = ["systemd-run", "/bin/sh"]; user = "USER"')
    doctor = mesh.cli("doctor", "--json")
    assert [p for p in json.loads(doctor.stdout)["problems"] if p["check"] == "policy"] == [
        p for p in found if p["check"] == "policy"
    ]
    assert not cron.exists()  # nothing was pushed
    assert agent_user()  # the mesh's agents run as this user


def test_a_kind_and_an_admin_file_allowed_by_two_different_entries_are_not_allowed() -> None:
    """Each entry is one grant: Redis's admin file does not become PostgreSQL's because both
    entries name the same folder."""
    redis = node_policy.ProviderRoot("/srv", frozenset({"redis"}), frozenset({"/srv/redis.url"}))
    pg = node_policy.ProviderRoot("/srv", frozenset({"postgres"}))
    policy = node_policy.Policy(Path("/n/policy.toml"), "db1", providers=(redis, pg))
    ask = node_policy.ProviderAsk(
        "db1/postgres", "database", "postgres", "/srv/m.json", "/srv/g", "/srv/redis.url", None
    )
    (refused,) = policy.provider_refusals(ask)
    assert (refused.key, refused.module) == ("admin", "db1/postgres provides database")
    both = node_policy.ProviderRoot("/srv", frozenset({"postgres"}), frozenset({"/srv/redis.url"}))
    one = node_policy.Policy(Path("/n/policy.toml"), "db1", providers=(both,))
    assert one.provider_refusals(ask) == [] and one.provider(ask) is None  # the built-in one
