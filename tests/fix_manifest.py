"""A provider's manifest folder as its agent leaves it: the manifest and each consumer's secret
file beside it. One writer for every kind's provisioner tests (PostgreSQL, Redis, OpenBao,
SeaweedFS), each adding only its kind's word, logins and server."""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from meshtui.crypto import secret_digest


@dataclass
class ManifestFolder:
    """Writes manifests and secrets like the provider's agent would."""

    folder: Path
    consumers: dict[str, dict[str, Any]] = field(default_factory=dict, kw_only=True)
    serial: int = field(default=0, kw_only=True)

    def consumer(
        self,
        node: str,
        module: str,
        login: str,
        *,
        at: str = "127.0.0.1",
        values: dict[str, str] | None = None,
        secret: bytes | None = None,
        write_secret: bool = True,
    ) -> dict[str, Any]:
        """Add (or replace) a consumer with a fresh secret (or ``secret``), written beside the
        manifest unless ``write_secret`` is false."""
        secret = secrets.token_urlsafe(32).encode() if secret is None else secret
        name = f"{node}.{module}.secret"
        entry = {
            "as": login,
            "node": node,
            "module": module,
            "at": at,
            "values": dict(values or {}),
            "secret": name,
            "digest": secret_digest(secret),
        }
        self.consumers[f"{node}/{module}"] = entry
        if write_secret:
            (self.folder / name).write_bytes(secret)
        return entry

    def rotate(self, node: str, module: str) -> None:
        """A new secret for one consumer, in its file and in the manifest."""
        entry = self.consumers[f"{node}/{module}"]
        secret = secrets.token_urlsafe(32).encode()
        (self.folder / entry["secret"]).write_bytes(secret)
        entry["digest"] = secret_digest(secret)

    def drop(self, node: str, module: str) -> None:
        """Withdraw a consumer from the manifest (its secret file stays, as an agent may)."""
        del self.consumers[f"{node}/{module}"]

    @property
    def manifest(self) -> Path:
        return self.folder / "mesh.json"

    def password(self, node: str, module: str) -> str:
        """The secret one consumer's file holds."""
        entry = self.consumers[f"{node}/{module}"]
        return (self.folder / entry["secret"]).read_bytes().decode()

    def login_of(self, node: str, module: str) -> str:
        return str(self.consumers[f"{node}/{module}"]["as"])

    def write_manifest(self, *, kind: str | None, provider: str, provision: str) -> Path:
        """The manifest of every consumer, its serial one higher (no ``kind``: PostgreSQL's
        manifest as it was before kinds)."""
        self.serial += 1
        doc: dict[str, Any] = {"version": 1}
        if kind is not None:
            doc["kind"] = kind
        doc |= {
            "provision": provision,
            "provider": provider,
            "serial": self.serial,
            "consumers": list(self.consumers.values()),
        }
        self.manifest.write_text(json.dumps(doc, ensure_ascii=False))
        return self.manifest
