"""A SeaweedFS configured for the mesh (``Kind.server_config``): one ``weed server`` whose S3
gateway alone listens on the private address, over TLS; everything else on loopback, every gRPC
port behind mutual TLS, and a static admin identity.

Why each piece: the filer serves every identity's secret key to anyone who asks and the volume
server every object, so both stay on loopback (the filer's HTTP off); the S3 gateway's gRPC port
must listen on S3's address, and without a client certificate it would let anyone who reaches it
replace every identity (``security.toml``); a store with no identity at all accepts any request,
so a static identity (``-s3.config``) is always there, and meshtui never uses or touches it. The
agent manages identities with ``weed shell`` and ``security.toml``'s client certificate; its
admin file holds no secret. The lab's SeaweedFS (``lab.py``) runs the same ``weed server``
argv, ``security.toml`` and identity.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from meshtui.contracts.server_config import (
    SECRET_KEY,
    ConfigFile,
    ServerConfig,
    ServerPlace,
    ServerRecipe,
)

GRPC = 10000
"""weed's own rule: a service's gRPC port is its HTTP port + 10000."""

ADMIN_ACTIONS = ("Admin", "Read", "Write", "List", "Tagging")
"""The static identity's actions (it is nobody's: it keeps the store from having none)."""

ROLES = ("master", "volume", "filer", "s3", "client")
"""Every gRPC server and the client, each given the one certificate of ``security.toml``."""


@dataclass(frozen=True)
class Ports:
    """The HTTP ports (gRPC: each + 10000); all but ``s3`` on the node's loopback."""

    master: int
    volume: int
    filer: int
    s3: int


LOG_TO_STDERR = "-logtostderr"
"""weed's own flag (before its command): its log to standard error only, never to files in the
system's temp folder (``weed.HOST.USER.log.LEVEL.*``, one set per process)."""


def argv(
    weed: str, place: ServerPlace, ports: Ports, *, volumes: int, extra: tuple[str, ...] = ()
) -> list[str]:
    """``weed server`` with every listener placed: S3 over TLS on ``place.address``, the rest
    on loopback; its certificate, key and identity file in ``place.conf``, its data and local
    sockets in ``place.data``; its log on its standard error only (weed otherwise leaves log
    files in the system's temp folder)."""
    p, data, conf = ports, place.data, place.conf
    return [
        weed,
        LOG_TO_STDERR,
        "server",
        f"-dir={data}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-master.port={p.master}",
        f"-master.port.grpc={p.master + GRPC}",
        "-master.telemetry=false",
        f"-volume.port={p.volume}",
        f"-volume.port.grpc={p.volume + GRPC}",
        f"-volume.max={volumes}",
        "-filer",
        "-filer.disableHttp",
        f"-filer.port={p.filer}",
        f"-filer.port.grpc={p.filer + GRPC}",
        f"-filer.localSocket={data}/filer.sock",
        "-s3",
        f"-s3.ip.bind={place.address}",
        f"-s3.port={p.s3}",
        f"-s3.port.grpc={p.s3 + GRPC}",
        f"-s3.cert.file={place.cert}",
        f"-s3.key.file={place.key}",
        f"-s3.config={conf}/identities.json",
        f"-s3.localSocket={data}/s3.sock",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        *extra,
    ]


def security_toml(conf: str) -> str:
    """weed's gRPC mutual TLS: every server and client with one certificate of its own CA."""
    pair = f'cert = "{conf}/grpc.pem"\nkey = "{conf}/grpc.key"\n'
    parts = [f'[grpc]\nca = "{conf}/grpc-ca.pem"\n']
    parts += [f"[grpc.{role}]\n{pair}" for role in ROLES]
    return "\n".join(parts)


def identities(admin: str, secret_key: str) -> str:
    """The static identity file (``-s3.config``): the admin identity alone."""
    identity = {
        "name": admin,
        "credentials": [{"accessKey": admin, "secretKey": secret_key}],
        "actions": list(ADMIN_ACTIONS),
    }
    return json.dumps({"identities": [identity]}) + "\n"


def admin_text(ports: Ports, conf: str, admin: str) -> str:
    """The agent's admin file: where ``weed shell`` finds the cluster (no secret)."""
    return (
        f'backend = "seaweedfs"\nmaster = "127.0.0.1:{ports.master}.{ports.master + GRPC}"\n'
        f'filer = "127.0.0.1:{ports.filer}.{ports.filer + GRPC}"\nconfig = "{conf}"\n'
        f'admin = "{admin}"\n'
    )


def _unit(place: ServerPlace, ports: Ports, weed: str) -> str:
    words = argv(weed, place, ports, volumes=64)
    lines, line = [], "ExecStart=" + " ".join(words[:2])
    for word in words[2:]:
        if len(line) + len(word) > 95:
            lines.append(line + " \\")
            line = "  "
        line += ("" if line == "  " else " ") + word
    lines.append(line)
    exec_start = "\n".join(lines)
    return f"""\
[Unit]
Description=SeaweedFS (master, volume, filer, S3 over TLS)
After=network-online.target
[Service]
User=seaweedfs
Group=seaweedfs
WorkingDirectory={place.conf}
{exec_start}
# weed writes its logs and gRPC sockets into /tmp: a private one keeps them from other users
PrivateTmp=true
TimeoutStopSec=40
Restart=on-failure
[Install]
WantedBy=multi-user.target
"""


def build(place: ServerPlace) -> ServerConfig:
    """SeaweedFS's files for ``place`` (see the module docstring), its loopback services on
    their usual ports (master 9333, volume 8080, filer 8888)."""
    ports = Ports(9333, 8080, 8888, place.port)
    conf = place.conf
    return ServerConfig(
        title="SeaweedFS",
        files=(
            ConfigFile(
                "security.toml",
                "gRPC behind mutual TLS (weed reads it from its working folder)",
                security_toml(conf),
                f"{conf}/security.toml",
                0o640,
            ),
            ConfigFile(
                "identities.json",
                "the static admin identity: the store never has none (then it would accept "
                "any request); meshtui never uses it",
                identities(place.admin, SECRET_KEY),
                f"{conf}/identities.json",
                0o600,
                "a random secret key nobody needs to know: head -c 32 /dev/urandom | base64 "
                "| tr -d '/+=', written in place of the placeholder (then chown "
                "root:seaweedfs, chmod 0640)",
            ),
            ConfigFile(
                "seaweedfs.service",
                "the unit: one weed server, S3 over TLS on the private address, the rest on "
                "loopback",
                _unit(place, ports, "/opt/meshtui/bin/weed"),
                "/etc/systemd/system/seaweedfs.service",
                0o644,
            ),
            ConfigFile(
                "admin.toml",
                "the agent's admin file (the declaration's admin): where weed shell finds the "
                "cluster, no secret",
                admin_text(ports, conf, place.admin),
                place.admin_file,
                0o600,
            ),
        ),
        steps=(
            f"install -d -o seaweedfs -g seaweedfs -m 0700 {place.data}",
            f"# in {conf}: grpc-ca.pem, and grpc.pem/grpc.key for IP:127.0.0.1 with "
            "serverAuth,clientAuth, signed by it (a CA of its own: the walk's step 7); "
            f"s3.pem/s3.key: the server certificate for {place.address}",
            f"chown root:seaweedfs {conf}/*; chmod 0640 {conf}/*",
            "systemctl daemon-reload && systemctl enable --now seaweedfs",
        ),
        expires=(
            "nothing of SeaweedFS's own expires; the S3 certificate and the gRPC certificate "
            "do (make new ones with the same CAs, then restart seaweedfs)",
        ),
    )


DEFAULT = ServerPlace(
    address="10.0.0.2",
    port=8333,
    cert="/etc/seaweedfs/s3.pem",
    key="/etc/seaweedfs/s3.key",
    ca="/etc/ssl/meshtui/ca.pem",
    conf="/etc/seaweedfs",
    data="/var/lib/seaweedfs/data",
    admin="meshtui-admin",
    admin_file="/var/lib/meshtui/db1/s3/admin.toml",
)
"""The walk's SeaweedFS on db1."""

RECIPE = ServerRecipe(DEFAULT, build)
"""What ``Kind.server_config`` names."""
