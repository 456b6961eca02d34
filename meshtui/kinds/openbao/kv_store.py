"""OpenBao as the store of modules' own secrets (its Kind's ``own_secrets``; the shape is
:mod:`meshtui.contracts.vault_store`): a module's path is ``<kv>/data/<login>/<name>`` of the KV
v2 mount, meshtui's marks are the entry's custom metadata, and a module reads as itself with an
AppRole login (``role_id`` its login, ``secret_id`` its pair credential), the token revoked
after."""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType

from meshtui.contracts.vault_store import VaultRead
from meshtui.errors import ProvisionError
from meshtui.kinds.openbao.client import APPROLE_MOUNT, KV_MOUNT, Bao, BaoError, read_admin, scrub


class _Admin:
    """A session with the admin token, for one request."""

    def __init__(self, admin_text: str) -> None:
        admin = read_admin(admin_text)
        self.bao = Bao(admin.get("address", ""), ca=admin.get("ca"), token=admin.get("token"))

    def __enter__(self) -> _Admin:
        self.bao.__enter__()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.bao.__exit__(kind, exc, tb)

    def marked(self, path: str) -> tuple[Mapping[str, str], int | None]:
        meta = self.bao.data("GET", f"{KV_MOUNT}/metadata/{path}", missing_ok=True) or {}
        custom = meta.get("custom_metadata") or {}
        current = meta.get("current_version")
        return {str(k): str(v) for k, v in custom.items()}, int(current) if current else None

    def put(self, path: str, value: bytes, marks: Mapping[str, str]) -> int:
        text = value.decode("utf-8")
        written = self.bao.data(
            "POST", f"{KV_MOUNT}/data/{path}", {"data": {"value": text}}, secrets=[text]
        )
        del text
        version = int((written or {})["version"])
        self.bao.call("POST", f"{KV_MOUNT}/metadata/{path}", {"custom_metadata": dict(marks)})
        return version


class OpenBaoSecrets:
    """OpenBao's :class:`~meshtui.contracts.vault_store.OwnSecretStore`."""

    def admin(self, admin_text: str) -> _Admin:
        return _Admin(admin_text)

    def read_as(
        self,
        address: str,
        port: int,
        ca: str | None,
        login: str,
        secret_id: str,
        path: str,
        version: int | None,
    ) -> VaultRead:
        host = f"[{address}]" if ":" in address else address
        try:
            bao = Bao(f"https://{host}:{port}", ca=ca)
        except (ProvisionError, OSError, ValueError) as exc:
            return VaultRead(None, None, str(exc))
        with bao:
            try:
                answer = bao.call(
                    "POST",
                    f"auth/{APPROLE_MOUNT}/login",
                    {"role_id": login, "secret_id": secret_id},
                    secrets=[secret_id],
                )
                token = str(((answer or {}).get("auth") or {})["client_token"])
            except (BaoError, KeyError, TypeError) as exc:
                return VaultRead(None, None, f"AppRole login: {scrub(str(exc), [secret_id])}")
            finally:
                del secret_id
            query = "" if version is None else f"?version={int(version)}"
            try:
                found = bao.data("GET", f"{KV_MOUNT}/data/{path}{query}", token=token) or {}
                value = str((found.get("data") or {})["value"]).encode("utf-8")
                meta = found.get("metadata") or {}
                kv_version = int(meta.get("version") or 0) or None
                marks = {str(k): str(v) for k, v in (meta.get("custom_metadata") or {}).items()}
            except (BaoError, KeyError, TypeError, ValueError) as exc:
                return VaultRead(None, None, f"reading it from the vault: {exc}")
            finally:
                try:
                    bao.call("POST", "auth/token/revoke-self", token=token)
                except BaoError:
                    pass  # short-lived: it expires within the role's token TTL
                del token
        return VaultRead(value, kv_version, "", marks)


STORE = OpenBaoSecrets()
"""The one instance the Kind's ``own_secrets`` names."""
