"""What a kind that stores a module's own secrets implements: its Kind's ``own_secrets`` names
an object of this shape (OpenBao's: ``kinds/openbao/kv_store.py``), and the agent reaches the
store only through it, never through a kind's client by name.

Three calls: open the store with the vault module's admin file (it can write a module's path,
never read it), put a value there marked with meshtui's version and digest, and read a path's
version as the module itself (its login and the credential the node holds for it), with the
marks meshtui's last put left, so the controller can tell a version it made from one made by
hand. Errors are :class:`~meshtui.errors.ProvisionError` with no value in their text.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Protocol

MARK_DIGEST = "meshtui_digest"
MARK_VERSION = "meshtui_version"
"""The marks meshtui's put leaves on an entry: the digest and meshtui's version of its value."""


@dataclass(frozen=True)
class VaultRead:
    """A path's value read as the module (None: not read, and why), the store's own version
    number of it, and the marks meshtui's last put left on the entry."""

    value: bytes | None
    version: int | None
    error: str = ""
    marks: Mapping[str, str] = field(default_factory=dict)


class AdminStore(Protocol):
    """The store opened with the vault module's admin file, for one request."""

    def __enter__(self) -> AdminStore: ...

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

    def marked(self, path: str) -> tuple[Mapping[str, str], int | None]:
        """The marks on ``path`` and its current version (none: ({}, None))."""

    def put(self, path: str, value: bytes, marks: Mapping[str, str]) -> int:
        """Write ``value`` as ``path``'s next version, marked; returns the store's version."""


class OwnSecretStore(Protocol):
    """A kind's store of modules' own secrets (see the module docstring)."""

    def admin(self, admin_text: str) -> AdminStore:
        """The store opened with the admin file's text (ProvisionError: it cannot be used)."""

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
        """``path``'s ``version`` (None: the current one) read as the module, its session
        ended after; never raises (the error is in the answer)."""
