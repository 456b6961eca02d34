"""A child that runs as another user never shares root's session or terminal.

The reviewer's attack: ``pg_ctl`` ran as the PostgreSQL user inside root's session, with root's
terminal as its controlling terminal; another process of that user ptrace-attached it and
pushed a command into root's shell with ``TIOCSTI``. Here root runs the lab's PostgreSQL tools
(a stand-in ``pg_ctl`` that reports its own session and terminal) from inside a real pty, as a
real unprivileged user, plain and inside a real network namespace: each must lead a session of
its own and find no ``/dev/tty`` to open. A walk over the source then fails when any module
but :mod:`meshtui.runas` switches users by itself.
"""

from __future__ import annotations

import ast
import errno
import os
import pty
import subprocess
from pathlib import Path

import pytest

import meshtui
from meshtui import runas
from meshtui.kinds.postgres.lab import Cluster
from meshtui.runas import RunAsError
from tests.security.fix_users import Attacker

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (a second real user)")

REPORTER = """#!/usr/bin/python3
import os, sys
stat = open("/proc/self/stat").read()
fields = stat[stat.rindex(")") + 2 :].split()
try:
    os.close(os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY))
    tty = "opened"
except OSError as exc:
    tty = str(exc.errno)
with open({report!r}, "a") as out:
    out.write(f"{{os.getpid()}} {{fields[3]}} {{fields[4]}} {{tty}} {{os.getuid()}}\\n")
"""


def _fake_binaries(folder: Path, report: Path) -> Path:
    bindir = folder / "bin"
    bindir.mkdir(mode=0o755)
    for tool in ("initdb", "pg_ctl", "postgres"):
        path = bindir / tool
        path.write_text(REPORTER.format(report=str(report)))
        path.chmod(0o755)
    report.touch()
    report.chmod(0o666)
    return bindir


def _in_a_pty(work: object) -> bytes:
    """Run ``work()`` in a child whose controlling terminal is a fresh pty, like root's shell."""
    pid, master = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            assert os.ttyname(0)
            work()  # type: ignore[operator]
            code = 0
        finally:
            os._exit(code)
    seen = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    _, status = os.waitpid(pid, 0)
    os.close(master)
    assert os.waitstatus_to_exitcode(status) == 0, seen
    return seen


def _reports(report: Path) -> list[tuple[int, int, int, str, int]]:
    out = []
    for line in report.read_text().splitlines():
        pid, sid, tty_nr, tty, uid = line.split()
        out.append((int(pid), int(sid), int(tty_nr), tty, int(uid)))
    return out


@pytest.fixture
def namespace() -> object:
    name = f"mtses{os.getpid() % 100000}"
    subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True)
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)


def test_postgres_tools_run_in_a_session_of_their_own(
    attacker: Attacker, open_tmp: Path, namespace: str
) -> None:
    report = open_tmp / "report"
    cluster = Cluster(
        datadir=open_tmp / "data",
        port=5432,
        socket_dir=open_tmp / "data",
        listen=("127.0.0.1",),
        log_path=open_tmp / "data" / "server.log",
        system_user=attacker.name,
        bindir=_fake_binaries(open_tmp, report),
    )

    def work() -> None:
        cluster._pg_ctl("status")
        cluster._pg_ctl("start", netns=namespace)
        cluster._run([str(cluster.binaries / "initdb"), "-D", str(cluster.datadir)])

    _in_a_pty(work)
    seen = _reports(report)
    assert len(seen) == 3
    for pid, sid, tty_nr, tty, uid in seen:
        assert uid == attacker.uid
        assert sid == pid, "the tool shares its parent's session (root's terminal)"
        assert tty_nr == 0, f"the tool has a controlling terminal ({tty_nr:#x})"
        assert tty == str(errno.ENXIO), f"/dev/tty: {tty}"


# -- no module switches users but meshtui.runas -----------------------------------------------

PACKAGE = Path(meshtui.__file__).parent
ONE_PLACE = PACKAGE / "runas.py"
SWITCHERS = {"setpriv", "runuser", "su", "sudo", "doas", "setuidgid", "chpst", "s6-setuidgid"}
"""Commands that run another command as another user."""
REVIEWED = {("meshtui/kinds/openbao/doctor.py", "sudo"): "OpenBao's capability of that name"}
"""A switcher's name that stands in a module as another word, reviewed by hand: (file, name)."""
SESSION_KEYWORDS = {"extra_groups", "preexec_fn", "start_new_session", "process_group"}
"""Popen arguments that choose the child's groups or session: never set outside runas."""
USER_KEYWORDS = {"user", "group"}
"""Popen arguments that choose the child's user (common words elsewhere: only on a spawner)."""
SPAWNERS = {"run", "Popen", "call", "check_call", "check_output", "create_subprocess_exec"}
SPAWNERS |= {"update", "spawn"}  # a dict of Popen arguments being filled, the netns helper
OS_SWITCHES = {"setuid", "setgid", "setresuid", "setresgid", "setreuid", "setregid", "setgroups"}
OS_SWITCHES |= {"initgroups", "seteuid", "setegid", "setsid", "fork", "forkpty", "posix_spawn"}


def _bypasses(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    where = path.relative_to(PACKAGE.parent).as_posix()
    out = []
    for node in ast.walk(tree):
        named = isinstance(node, ast.Constant) and node.value in SWITCHERS
        if named and (where, node.value) not in REVIEWED:
            out.append(f"{where}:{node.lineno} names {node.value!r}")
        if isinstance(node, ast.Constant) and node.value in SESSION_KEYWORDS:
            out.append(f"{where}:{node.lineno} names {node.value!r}")
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        keywords = {k.arg for k in node.keywords}
        chosen = keywords & SESSION_KEYWORDS
        if name in SPAWNERS:
            chosen |= keywords & USER_KEYWORDS
        if chosen:
            out.append(f"{where}:{node.lineno} {name}() sets {sorted(chosen)}")
        if name in OS_SWITCHES and isinstance(func, ast.Attribute):
            out.append(f"{where}:{node.lineno} calls os.{name}()")
    return out


def test_only_runas_starts_a_child_as_another_user() -> None:
    found = [
        hit
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != ONE_PLACE
        for hit in _bypasses(path)
    ]
    assert not found, "switch users only through meshtui.runas:\n" + "\n".join(found)


def test_the_walk_catches_a_bypass(tmp_path: Path) -> None:
    global PACKAGE
    planted = tmp_path / "meshtui" / "rogue.py"
    planted.parent.mkdir()
    planted.write_text(
        "import subprocess\n"
        "subprocess.run(['x'], user=1)\n"
        "subprocess.Popen(['ip', 'netns', 'exec', 'n', 'setpriv', '--', 'x'])\n"
        "kwargs = {'start_new_session': True}\n"
        "kwargs.update(group=2)\n"
    )
    saved, PACKAGE = PACKAGE, tmp_path / "meshtui"
    try:
        assert len(_bypasses(planted)) == 4
    finally:
        PACKAGE = saved


def test_runas_refuses_a_terminal_or_a_session_chosen_by_its_caller() -> None:
    master, slave = pty.openpty()
    try:
        with pytest.raises(RunAsError, match="terminal as stdout"):
            runas.run(["true"], None, stdout=slave)
        with pytest.raises(RunAsError, match="set by meshtui.runas"):
            runas.run(["true"], None, start_new_session=False)
        with pytest.raises(RunAsError, match="inherits no descriptor"):
            runas.run(["true"], None, pass_fds=[slave])
    finally:
        os.close(master)
        os.close(slave)
    done = runas.run(
        ["python3", "-c", "import os; print(os.getsid(0) == os.getpid())"],
        None,
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == "True"
