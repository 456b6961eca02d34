"""The lab's Redis: Debian's ``redis-server`` with TLS (a lab CA), an aclfile and no open door.

``create`` writes, in a folder of its own (0700): a lab CA and a server certificate for the
listening address (``openssl``, keys 0600, made once), an aclfile with ``default`` switched off,
the provisioner's admin ACL user (``meshtui-admin``, allowed the ACL alone) and a lab user with
every right (the tests' own, ``lab.url``), passwords minted here and kept as their SHA-256, and a
``redis.conf`` with ``protected-mode yes``, TLS only (``port 0``), no RDB or AOF. Its TLS lines,
the aclfile's lines and the admin URL come from :mod:`meshtui.kinds.redis.server_config`, what
``meshtui kind config redis`` prints. The admin URL (``rediss://`` with the CA) goes to a 0600
file: that is the provisioner's admin file. As root the server runs as a system user of its own (:data:`SERVER_USER`, like the lab's
PostgreSQL), started through :mod:`meshtui.runas` (its own session, no terminal): it may read
its configuration, certificate and key (group-readable, owned by root) and write only in
``data/`` (the aclfile, its log and pid file), which root reads as hostile ground
(:mod:`meshtui.lab.foreign`), checking that a pid it is told belongs to that user before it
signals it. Without root it runs as the caller.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import secrets
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from meshtui import runas
from meshtui.atomic import write_private
from meshtui.contracts.lab_server import (
    FoundInFolder,
    LabConsumer,
    LabNeed,
    LabProvider,
    LabServer,
    LabSite,
)
from meshtui.contracts.server_config import ServerPlace
from meshtui.errors import LabError
from meshtui.freeform import LibraryKwargs
from meshtui.kinds.redis import server_config
from meshtui.lab import toml_writer
from meshtui.lab.accounts import check_path_open, ensure_system_user
from meshtui.lab.certificates import make_certificates
from meshtui.lab.foreign import ForeignDir
from meshtui.lab.netns import free_port
from meshtui.lab.wait import ended, poll

ADMIN_USER = server_config.DEFAULT.admin
LAB_USER = "meshtui-lab"
"""An ACL user with every right, for the lab's and the tests' own use (its URL in ``lab.url``);
the provisioner's admin is :data:`ADMIN_USER`, allowed the ACL alone."""
SERVER_USER = "meshtui_redis"
DATA = "data"
_LOG_SCAN = 256 << 10  # the start of a lab Redis's log is a few KiB
SERVER = "/usr/bin/redis-server"
START_S = 20.0


def find_server() -> str:
    """Debian's redis-server, or LabError saying how to get it."""
    found = shutil.which("redis-server") or (SERVER if Path(SERVER).exists() else None)
    if found is None:
        raise LabError("redis-server is not installed (apt-get install redis-server)")
    return found


def available() -> bool:
    """Whether the lab can run a Redis here (Debian's redis-server and openssl for its CA)."""
    try:
        find_server()
    except LabError:
        return False
    return shutil.which("openssl") is not None


@dataclass(frozen=True)
class RedisServer:
    """One lab Redis: where it listens and where its files are."""

    folder: Path
    address: str
    port: int

    @property
    def ca(self) -> Path:
        """The lab CA's certificate (what probes verify the server against)."""
        return self.folder / "ca.pem"

    @property
    def data(self) -> Path:
        """The only folder the server writes in (its own user's)."""
        return self.folder / DATA

    @property
    def aclfile(self) -> Path:
        """The ACL file (``ACL SAVE`` writes it)."""
        return self.data / "users.acl"

    @property
    def log(self) -> Path:
        """The server's log."""
        return self.data / "redis.log"

    @property
    def admin_file(self) -> Path:
        """The provisioner's admin file: a rediss:// URL for the admin ACL user (0600)."""
        return self.folder / "admin.url"

    @property
    def lab_file(self) -> Path:
        """The lab's own URL, as :data:`LAB_USER` (0600): tests flush and configure with it."""
        return self.folder / "lab.url"

    @property
    def pidfile(self) -> Path:
        """Where the running server's pid is kept."""
        return self.data / "redis.pid"

    @property
    def user(self) -> runas.OsUser | None:
        """Who the server runs as: its system user as root, else the caller (None)."""
        return runas.OsUser.named(SERVER_USER) if os.geteuid() == 0 else None

    def _owner(self) -> int:
        user = self.user
        return user.uid if user is not None else os.geteuid()

    def _read_data(self, name: str, limit: int) -> bytes | None:
        """The end of a file in ``data/`` (at most ``limit`` bytes), read as hostile ground."""
        try:
            with ForeignDir(self.data, owner=self._owner()) as folder:
                return folder.tail(name, limit)
        except (OSError, LabError):
            return None

    def pid(self) -> int | None:
        """The running server's pid, or None (also when the pid file names a process of
        another user: the server's user writes that file, root must not signal what it says)."""
        raw = self._read_data("redis.pid", 64)
        try:
            pid = int((raw or b"").strip())
            if os.stat(f"/proc/{pid}").st_uid != self._owner():
                return None
        except (OSError, ValueError):
            return None
        return None if ended(pid) else pid

    def running(self) -> bool:
        """Whether the server is alive and said it accepts connections.

        Read from its pid and its log, not by connecting: in the lab it listens inside the
        provider's namespace, which the machine's own network cannot reach.
        """
        pid = self.pid()
        return pid is not None and self._ready(pid)

    def _ready(self, pid: int) -> bool:
        text = (self._read_data("redis.log", _LOG_SCAN) or b"").decode(errors="replace")
        head = f"{pid}:M "
        return any(
            line.startswith(head) and "Ready to accept connections" in line
            for line in text.splitlines()
        )

    def start(self, netns: str | None = None) -> None:
        """Start redis-server (inside ``netns`` when given) and wait until it answers."""
        if self.running():
            return
        argv = [find_server(), str(self.folder / "redis.conf")]
        kwargs: LibraryKwargs = {
            "stdin": subprocess.DEVNULL,
            "stdout": subprocess.DEVNULL,
            "stderr": subprocess.DEVNULL,
            "cwd": str(self.data),
            "umask": 0o077,  # what ACL SAVE writes (the aclfile with every hash) stays 0600
        }
        try:  # its own user, in a session of its own (meshtui.runas)
            proc = runas.spawn(argv, self.user, netns=netns, **kwargs)
        except OSError as exc:
            raise LabError(f"redis-server in {self.folder} could not be started: {exc}") from exc
        if poll(lambda: self._ready(proc.pid), START_S, unless=lambda: proc.poll() is not None):
            return
        tail = (self._read_data("redis.log", 800) or b"").decode(errors="replace")
        raise LabError(f"redis-server in {self.folder} did not start; its log ends:\n{tail}")

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 10 s); nothing when it is not running."""
        pid = self.pid()
        if pid is None:
            return
        os.kill(pid, signal.SIGTERM)
        if poll(lambda: ended(pid), 10):
            return
        os.kill(pid, signal.SIGKILL)
        ended(pid)


def _sha256(password: str) -> str:
    return hashlib.sha256(password.encode()).hexdigest()


def create(folder: Path, *, address: str, port: int) -> RedisServer:
    """Write the lab Redis's files into ``folder`` (once); see the module docstring."""
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    server = RedisServer(folder.resolve(), address, port)
    pw = ensure_system_user(SERVER_USER) if os.geteuid() == 0 else None
    make_certificates(server.folder, address, server="Redis")
    if pw is not None:  # the server's user reads its configuration, certificate and key
        check_path_open(server.folder, pw, "the lab Redis's folder")
        for name, mode in (("", 0o710), ("server.key", 0o640), ("server.pem", 0o644)):
            os.chown(server.folder / name, 0, pw.pw_gid)
            (server.folder / name).chmod(mode)
    owner = pw.pw_uid if pw is not None else os.geteuid()
    try:
        server.data.mkdir(mode=0o700)
        os.chown(server.data, owner, pw.pw_gid if pw is not None else -1)
    except FileExistsError:
        pass
    place = ServerPlace(
        address=address,
        port=port,
        cert=str(server.folder / "server.pem"),
        key=str(server.folder / "server.key"),
        ca=str(server.ca),
        conf=str(server.folder),
        data=str(server.data),
        admin=ADMIN_USER,
        admin_file=str(server.admin_file),
    )
    with ForeignDir(server.data, owner=owner) as data:
        if (
            data.mode_of("users.acl") is None
            or not server.admin_file.exists()
            or not server.lab_file.exists()
        ):
            password, lab_password = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
            data.write(
                "users.acl",
                (
                    f"{server_config.DEFAULT_USER}\n"
                    f"{server_config.acl_line(ADMIN_USER, _sha256(password))}\n"
                    f"user {LAB_USER} on #{_sha256(lab_password)} ~* &* +@all\n"
                ).encode(),
                uid=pw.pw_uid if pw is not None else None,
                gid=pw.pw_gid if pw is not None else None,
            )
            write_private(server.admin_file, server_config.admin_url(place, password).encode())
            lab_place = dataclasses.replace(place, admin=LAB_USER)
            url = server_config.admin_url(lab_place, lab_password)
            write_private(server.lab_file, url.encode())
            del password, lab_password, url
    conf = [
        *server_config.conf_lines(place, str(server.aclfile)),
        f"dir {server.data}",
        f"logfile {server.log}",
        f"pidfile {server.pidfile}",
        "daemonize no",
        'save ""',
        "appendonly no",
        "loglevel notice",
    ]
    write_private(server.folder / "redis.conf", ("\n".join(conf) + "\n").encode())
    if pw is not None:
        os.chown(server.folder / "redis.conf", 0, pw.pw_gid)
        (server.folder / "redis.conf").chmod(0o640)
    return server


def existing(folder: Path) -> RedisServer | None:
    """The lab Redis whose files are in ``folder`` (from its redis.conf), or None."""
    try:
        lines = (folder / "redis.conf").read_text().splitlines()
    except OSError:
        return None
    conf = dict(line.split(" ", 1) for line in lines if " " in line)
    try:
        return RedisServer(folder.resolve(), conf["bind"], int(conf["tls-port"]))
    except (KeyError, ValueError):
        return None


PORT = 6379
"""Where the lab's Redis listens inside the provider's namespace."""

CONSUMERS = frozenset({("app1", "gitea"), ("app2", "wiki")})
"""Who requires the demo's Redis (``cache`` at ``db1/redis``), when they are in the mesh."""


def declaration_table(server: RedisServer, srv: Path, module: str) -> toml_writer.Table:
    """The provider module (``db1/redis``) of the lab's declaration (a TOML table)."""
    return (
        ("modules", module),
        {
            "provides": [
                {"name": "cache", "kind": "redis", "port": server.port, "ca": str(server.ca)}
            ],
            "receives": {"cache": str(srv / "mesh.json")},
            "grants": {"cache": str(srv / "grants")},
            "admin": str(server.admin_file),
        },
    )


def requirement(file: Path) -> dict[str, toml_writer.Value]:
    """A consumer's ``requires`` entry for the lab's Redis (an inline TOML table)."""
    return {"name": "cache", "file": str(file)}


def _old_port(folder: Path) -> int | None:
    """The port a loopback lab's Redis was given before (None: none yet)."""
    old = existing(folder)
    return old.port if old is not None else None


class RedisLab(FoundInFolder[RedisServer]):
    """The lab's Redis as the lab raises it (:class:`~meshtui.contracts.lab_server.LabServer`)."""

    folder = "redis"
    module = "redis"
    title = "Redis"
    consumers = CONSUMERS

    def available(self) -> bool:
        return available()

    def raise_server(self, site: LabSite) -> LabProvider:
        port = PORT if site.netns else _old_port(site.folder) or free_port()
        server = create(site.folder, address=site.address, port=port)
        server.start(netns=site.netns)
        _, table = declaration_table(server, site.files, site.module)
        return LabProvider(table, server.address, server.port, server.ca)

    def find(self, folder: Path) -> RedisServer | None:
        return existing(folder)

    def requires(self, consumer: LabConsumer) -> LabNeed:
        return LabNeed(requirement(consumer.files / "cache.password"))


LAB: LabServer = RedisLab()
"""What ``Kind.lab`` names."""
