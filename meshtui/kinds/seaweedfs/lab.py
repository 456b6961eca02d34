"""The lab's object store: SeaweedFS (master, volume, filer, S3 gateway: one ``weed server``)
in a node's namespace, as its own system user, S3 over TLS and nothing else within reach.

``create`` writes, in a folder of its own: a CA and the S3 gateway's certificate for the
node's address (``openssl``); a second CA and one certificate for SeaweedFS's gRPC (mutual
TLS, ``security.toml``: without it the S3 gateway's gRPC port, which must listen on the same
address as S3, would let anyone who reaches it replace every identity); the static identity
file (``-s3.config``) holding the provisioner's admin identity ``meshtui-admin`` (a secret
minted here, which nothing in meshtui uses: it is there so the store never has zero identities,
when SeaweedFS would accept any request); and the admin file the provisioner reads (no secret
in it). The master, the volume server and the filer listen on the namespace's loopback only
(the filer serves every identity's secret key to anyone who asks, the volume server every
object), the filer's HTTP is off, their local sockets are in the data folder, and volumes are
small (a bucket takes several). Started as the system user ``meshtui-weed`` through
:mod:`meshtui.runas` (a session of its own, no terminal) and declared up once the S3 port and the master's and
filer's gRPC ports listen; stopped with SIGTERM, which ``weed`` may take over ten seconds to
obey, then SIGKILL (at once when its data is about to be removed).
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import secrets
import shutil
import signal
import stat
from collections.abc import Callable
from dataclasses import asdict, dataclass
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
from meshtui.kinds.seaweedfs import KIND, server_config
from meshtui.kinds.seaweedfs.server_config import Ports
from meshtui.kinds.seaweedfs.shell import find_weed
from meshtui.lab import toml_writer
from meshtui.lab.accounts import check_path_open, ensure_system_user
from meshtui.lab.certificates import authority, certificate
from meshtui.lab.wait import ended, poll

SERVER_USER = "meshtui-weed"
ADMIN_IDENTITY = server_config.DEFAULT.admin
PROVISION = "objects"
START_S = 60.0
STOP_S = 40.0
VOLUME_MB = 32
VOLUMES = 64
_GRPC = server_config.GRPC


_ENV = {"PATH": "/usr/bin:/bin", "LC_ALL": "C"}


def available() -> bool:
    """Whether the lab can run SeaweedFS here (the weed binary and openssl)."""
    try:
        find_weed()
    except Exception:
        return False
    return shutil.which("openssl") is not None


@dataclass(frozen=True)
class WeedServer:
    """One lab SeaweedFS: its folder, the address S3 listens on, its ports and its user."""

    folder: Path
    address: str
    ports: Ports
    user: str | None

    @property
    def conf(self) -> Path:
        """Root's folder of what weed reads (certificates, security.toml, identities)."""
        return self.folder / "conf"

    @property
    def data(self) -> Path:
        """The server user's folder: volumes, the filer's store, local sockets."""
        return self.folder / "data"

    @property
    def ca(self) -> Path:
        """The CA that signed the S3 gateway's certificate (what probes verify against)."""
        return self.folder / "ca.pem"

    @property
    def log(self) -> Path:
        return self.folder / "weed.log"

    @property
    def admin_file(self) -> Path:
        """The provisioner's admin file (see :mod:`meshtui.kinds.seaweedfs.adapter`)."""
        return self.folder / "admin.toml"

    @property
    def pidfile(self) -> Path:
        return self.folder / "weed.pid"

    def pid(self) -> int | None:
        """The running server's pid, or None."""
        try:
            pid = int(self.pidfile.read_text().strip())
        except (OSError, ValueError):
            return None
        return None if ended(pid) else pid

    def running(self) -> bool:
        """Whether weed is alive and its S3 port and master/filer gRPC ports listen."""
        pid = self.pid()
        return pid is not None and self._listening(pid)

    def _listening(self, pid: int) -> bool:
        """Read from ``/proc/<pid>/net/tcp``: the sockets of weed's own network namespace,
        which the machine's network cannot reach."""
        want = {self.ports.s3, self.ports.master + _GRPC, self.ports.filer + _GRPC}
        seen: set[int] = set()
        for table in ("tcp", "tcp6"):
            try:
                lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
            except OSError:
                continue
            for line in lines:
                fields = line.split()
                if len(fields) > 3 and fields[3] == "0A":  # LISTEN
                    seen.add(int(fields[1].rsplit(":", 1)[1], 16))
        return want <= seen

    @property
    def place(self) -> ServerPlace:
        """Where its files are, as :mod:`~meshtui.kinds.seaweedfs.server_config` takes them."""
        return ServerPlace(
            address=self.address,
            port=self.ports.s3,
            cert=str(self.conf / "s3.pem"),
            key=str(self.conf / "s3.key"),
            ca=str(self.ca),
            conf=str(self.conf),
            data=str(self.data),
            admin=ADMIN_IDENTITY,
            admin_file=str(self.admin_file),
        )

    def argv(self) -> list[str]:
        """``weed server`` as ``meshtui kind config seaweedfs`` prints it, with the lab's small
        volumes and no wait before a stop."""
        lab_only = (f"-master.volumeSizeLimitMB={VOLUME_MB}", "-volume.preStopSeconds=0")
        return server_config.argv(
            find_weed(), self.place, self.ports, volumes=VOLUMES, extra=lab_only
        )

    def start(self, netns: str | None = None) -> None:
        """Start weed (inside ``netns`` when given) and wait until it listens."""
        if self.running():
            return
        argv = self.argv()
        user = runas.OsUser.named(self.user) if self.user is not None else None
        if user is not None:
            check_path_open(Path(argv[0]), pwd.getpwnam(user.name), "the weed binary")
        fd = os.open(self.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
        try:  # its own user, in a session of its own, no terminal (meshtui.runas)
            proc = runas.spawn(
                argv,
                user,
                netns=netns,
                stdout=fd,
                stderr=fd,
                cwd=str(self.conf),  # weed reads security.toml from its working folder
                env={"PATH": "/usr/bin:/bin", "HOME": str(self.data), "LC_ALL": "C"},
            )
        finally:
            os.close(fd)
        write_private(self.pidfile, f"{proc.pid}\n".encode())
        if poll(
            lambda: self._listening(proc.pid),
            START_S,
            every=0.05,
            unless=lambda: proc.poll() is not None,
        ):
            return
        self.stop()
        tail = self.log.read_text(errors="replace")[-800:] if self.log.exists() else ""
        raise LabError(f"SeaweedFS in {self.folder} did not start; its log ends:\n{tail}")

    def stop(self, *, kill: bool = False) -> None:
        """SIGTERM, then SIGKILL after STOP_S (weed may take over ten seconds to stop: its
        filer waits 15 s for its own S3 gateway's subscription to end). ``kill``: SIGKILL at once,
        for a store whose data is removed next, or a test that wants it down, not stopped well."""
        pid = self.pid()
        if pid is None:
            return
        os.kill(pid, signal.SIGKILL if kill else signal.SIGTERM)
        if not poll(lambda: ended(pid), STOP_S, every=0.05):
            os.kill(pid, signal.SIGKILL)
            poll(lambda: ended(pid), 5)
        self.pidfile.unlink(missing_ok=True)
        self._remove_sockets()

    def _remove_sockets(self) -> None:
        """The gRPC sockets weed leaves in /tmp, named by port: removed when they are sockets
        of the store's own user (unlink never follows a link; another user's name is left)."""
        owner = pwd.getpwnam(self.user).pw_uid if self.user is not None else os.geteuid()
        for role, port in asdict(self.ports).items():
            path = f"/tmp/seaweedfs-{role}-grpc-{port + _GRPC}.sock"
            try:
                info = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISSOCK(info.st_mode) and info.st_uid == owner:
                with contextlib.suppress(OSError):
                    os.unlink(path)


def create(folder: Path, *, address: str, ports: Ports, user: str | None = None) -> WeedServer:
    """Write the lab SeaweedFS's files into ``folder`` (once); see the module docstring.

    As root the server runs as ``user`` (default SERVER_USER, created once); otherwise as the
    caller.
    """
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o711)
    folder = folder.resolve()
    pw = ensure_system_user(user or SERVER_USER) if os.geteuid() == 0 else None
    server = WeedServer(folder, address, ports, pw.pw_name if pw is not None else None)
    conf, data = server.conf, server.data
    conf.mkdir(mode=0o750, exist_ok=True)
    authority(folder, "ca", "meshtui lab object store CA")
    (folder / "ca.pem").chmod(0o644)  # a certificate is public; consumers' probes read it
    if not (conf / "s3.pem").exists():
        for name in ("s3.pem", "s3.key"):
            (conf / name).unlink(missing_ok=True)
        certificate(folder, "s3", "ca", f"IP:{address}", "serverAuth")
        os.replace(folder / "s3.pem", conf / "s3.pem")
        os.replace(folder / "s3.key", conf / "s3.key")
    authority(conf, "grpc-ca", "meshtui lab weed gRPC CA")
    certificate(conf, "grpc", "grpc-ca", "IP:127.0.0.1", "serverAuth,clientAuth")
    write_private(conf / "security.toml", server_config.security_toml(str(conf)).encode())
    identities = conf / "identities.json"
    if not identities.exists():
        text = server_config.identities(ADMIN_IDENTITY, secrets.token_urlsafe(32))
        write_private(identities, text.encode())
        del text
    if pw is not None:  # weed reads conf/ through its group; root alone writes it
        os.chown(conf, 0, pw.pw_gid)
        for name in (
            "s3.pem",
            "s3.key",
            "grpc-ca.pem",
            "grpc.pem",
            "grpc.key",
            "security.toml",
            "identities.json",
        ):
            os.chown(conf / name, 0, pw.pw_gid)
            os.chmod(conf / name, 0o640)
    if not data.exists():
        data.mkdir(mode=0o700)
        if pw is not None:
            os.chown(data, pw.pw_uid, pw.pw_gid)
    admin_file = server_config.admin_text(ports, str(conf), ADMIN_IDENTITY)
    write_private(server.admin_file, admin_file.encode())
    record = {"address": address, "ports": asdict(ports), "user": server.user}
    write_private(folder / "weed.json", json.dumps(record).encode())
    return server


def existing(folder: Path) -> WeedServer | None:
    """The lab SeaweedFS whose files are in ``folder``, or None."""
    try:
        record = json.loads((folder / "weed.json").read_text())
        return WeedServer(
            folder.resolve(), record["address"], Ports(**record["ports"]), record["user"]
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def pick_ports(seed: int) -> Ports:
    """Four ports for one lab store, apart from other stores' (weed names its gRPC sockets in
    /tmp by port, machine-wide, whatever the namespace)."""
    base = 20000 + (seed % 2400) * 4
    for step in range(2400):
        first = 20000 + ((base - 20000 + step * 4) % 9600)
        ports = Ports(first, first + 1, first + 2, first + 3)
        taken = any(
            Path(f"/tmp/seaweedfs-{role}-grpc-{port + _GRPC}.sock").exists()
            for role, port in asdict(ports).items()
        )
        if not taken:
            return ports
    raise LabError("no free ports for a lab object store")


def declaration_table(server: WeedServer, srv: Path, module: str) -> toml_writer.Table:
    """The provider module of the lab's declaration (a TOML table)."""
    return (
        ("modules", module),
        {
            "provides": [
                {
                    "name": PROVISION,
                    "kind": KIND.name,
                    "port": server.ports.s3,
                    "ca": str(server.ca),
                }
            ],
            "receives": {PROVISION: str(srv / "mesh.json")},
            "grants": {PROVISION: str(srv / "grants")},
            "admin": str(server.admin_file),
        },
    )


def requirement(file: Path) -> dict[str, toml_writer.Value]:
    """A consumer's ``requires`` entry for the lab's object store (its derived bucket)."""
    return {"name": PROVISION, "file": str(file)}


CONSUMERS = frozenset({("app1", "grafana"), ("app2", "wiki")})
"""Who requires the demo's object store (``objects`` at ``db1/s3``), when they are in the mesh."""


class WeedLab(FoundInFolder[WeedServer]):
    """The lab's SeaweedFS as the lab raises it
    (:class:`~meshtui.contracts.lab_server.LabServer`)."""

    folder = "weed"
    module = "s3"
    title = "SeaweedFS"
    consumers = CONSUMERS

    def available(self) -> bool:
        return available()

    def raise_server(self, site: LabSite) -> LabProvider:
        """Run as its own user, its ports kept from an earlier ``lab up``."""
        old = existing(site.folder)
        ports = old.ports if old is not None else pick_ports(os.getpid())
        server = create(site.folder, address=site.address, ports=ports)
        server.start(netns=site.netns)
        _, table = declaration_table(server, site.files, site.module)
        return LabProvider(table, server.address, server.ports.s3, server.ca)

    def find(self, folder: Path) -> WeedServer | None:
        return existing(folder)

    def requires(self, consumer: LabConsumer) -> LabNeed:
        return LabNeed(requirement(consumer.files / "s3.secret"))

    def halt(self, server: WeedServer, *, purge: bool, say: Callable[[str], None]) -> None:
        """Its data goes with the lab folder on ``purge``: no graceful wait then."""
        if not purge:
            say(
                "stopping SeaweedFS: its filer waits about 15 s for its own S3 gateway to let "
                "go before it exits (weed's graceful stop; the data stays whole) ..."
            )
        server.stop(kill=purge)


LAB: LabServer = WeedLab()
"""What ``Kind.lab`` names."""
