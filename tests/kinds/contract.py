"""What the contract suite needs of a kind: :class:`Server`, the fixture object each kind's
``tests/kinds/<kind>/serve.py`` provides, and :class:`Provider`, the provider's folder (manifest and
secret files) written as the provider's agent would, the same for every kind.

A kind joins the suite by adding ``tests/kinds/<kind>/serve.py`` with a ``serve`` context manager
(``serve(tmp: Path) -> Iterator[Server]``) that raises a real server of the kind and takes it
down after; :mod:`tests.kinds.conftest` finds it by the kind's registered name.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from meshtui.contracts.probe_types import ProbeOptions, ProbeResult, ProbeTarget
from meshtui.crypto import secret_digest
from meshtui.host.probe_runner import probe_one
from meshtui.kinds import registry
from meshtui.kinds.kind import Kind
from meshtui.model import Sessions
from meshtui.provisioner.harness import Report, reconcile


class Server(Protocol):
    """A real, running server of one kind, as the contract suite drives and inspects it.

    Every method talks to the server itself (as its admin, or as a consumer over the network),
    never through meshtui. ``can_login`` answers True for an accepted login, False for the
    server's authentication refusal, and raises for anything else.
    """

    kind: Kind
    admin: Path  # the 0600 admin file the built-in provisioner is given
    host: str  # where consumers (and probes) reach the server
    port: int
    ca: str | None  # the CA a probe verifies the server against (a kind with ``tls``)
    tls: bool

    def reset(self) -> None:
        """Remove every login and every piece of data the last test made (the admin's stay)."""

    def values(self, login: str) -> dict[str, str]:
        """The ``values`` of an ordinary consumer with this login (room for its data)."""

    def unholdable(self) -> str:
        """A login the server cannot hold (meshtui must refuse it, before writing anything)."""

    def can_login(self, login: str, password: str) -> bool:
        """One login as a consumer: True accepted, False refused by authentication."""

    def make_foreign(self, login: str, password: str) -> None:
        """A login made by hand, as the admin, not by meshtui."""

    def drift(self, login: str) -> None:
        """Change ``login``'s credential behind meshtui's back, as the admin."""

    def put_data(self, login: str, password: str) -> None:
        """As the consumer, keep a piece of data where its values let it."""

    def data_kept(self, login: str) -> bool:
        """As the admin: is the piece of data :meth:`put_data` kept still there?"""

    def open_session(self, login: str, password: str) -> Any:
        """A live session of the consumer (closed by :meth:`close_session`)."""

    def session_alive(self, session: Any) -> bool:
        """Whether the session still works (False once the server ended it)."""

    def close_session(self, session: Any) -> None:
        """Let the session go."""

    def footprint(self) -> object:
        """Everything a write would change (equal before and after a run that wrote nothing)."""

    def log_mark(self) -> object:
        """Where the server's logs end now (the server logs every statement it is sent)."""

    def log_since(self, mark: object) -> str:
        """What the server logged since ``mark``."""

    def stored(self, login: str) -> list[str]:
        """What the server stores of the login's credential (a verifier, a hash): never logged."""

    def down(self) -> AbstractContextManager[None]:
        """The server cannot answer (stopped, or sealed) inside the block, and is back after."""

    def restart(self) -> None:
        """Stop the server's process and start it again on what it keeps (changing nothing)."""


@dataclass
class Provider:
    """A provider's folder: the manifest and the secret files, as the provider's agent writes
    them, for the kind of ``server``."""

    folder: Path
    server: Server
    provider: str = "db1/provider"
    provision: str = "contract"
    consumers: dict[str, dict[str, Any]] = field(default_factory=dict)
    serial: int = 0

    def add(
        self,
        node: str,
        module: str,
        login: str | None = None,
        *,
        write_secret: bool = True,
    ) -> str:
        """A consumer (its login, derived like ``<module>_<node>_x`` unless given)."""
        login = f"{module}_{node}_x" if login is None else login
        self.consumers[f"{node}/{module}"] = {
            "as": login,
            "node": node,
            "module": module,
            "at": "127.0.0.1",
            "values": self.server.values(login),
            "secret": f"{node}.{module}.secret",
            "digest": "",
        }
        self.rotate(node, module, write_secret=write_secret)
        return login

    def rotate(self, node: str, module: str, *, write_secret: bool = True) -> None:
        """A new secret for the consumer: the manifest's digest, and the file unless told not."""
        entry = self.consumers[f"{node}/{module}"]
        secret = secrets.token_urlsafe(32).encode()
        entry["digest"] = secret_digest(secret)
        if write_secret:
            (self.folder / entry["secret"]).write_bytes(secret)

    def drop(self, node: str, module: str) -> None:
        del self.consumers[f"{node}/{module}"]

    @property
    def manifest(self) -> Path:
        return self.folder / "mesh.json"

    def document(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "version": 1,
            "provision": self.provision,
            "provider": self.provider,
            "serial": self.serial,
            "consumers": list(self.consumers.values()),
        }
        if (name := registry.stored_name(self.server.kind.name)) is not None:
            doc["kind"] = name
        return doc

    def reconcile(
        self,
        sessions: Mapping[str, Sessions] | None = None,
        marks: Mapping[str, str] | None = None,
    ) -> Report:
        """One run of the built-in provisioner; ``sessions``: as a rotation's run names them;
        ``marks``: as a later check of sessions left to drain names them."""
        self.serial += 1
        self.manifest.write_text(json.dumps(self.document()))
        return reconcile(self.manifest, self.server.admin, sessions=sessions, marks=marks)

    def password(self, node: str, module: str) -> str:
        entry = self.consumers[f"{node}/{module}"]
        return (self.folder / entry["secret"]).read_bytes().decode()

    def login_of(self, node: str, module: str) -> str:
        return str(self.consumers[f"{node}/{module}"]["as"])

    def can_login(self, node: str, module: str, password: str | None = None) -> bool:
        login = self.login_of(node, module)
        return self.server.can_login(login, password or self.password(node, module))

    def probe(
        self,
        login: str,
        password: str,
        values: Mapping[str, str] | None = None,
        owner: str | None = None,
    ) -> ProbeResult:
        """The kind's probe (through meshtui.host.probe_runner, as an agent runs it), on
        loopback; ``owner``: the pair's login when ``login`` is one of its alternates."""
        server = self.server
        target = ProbeTarget(
            host=server.host,
            port=server.port,
            user=login,
            password=password,
            dbname=server.kind.dbname(
                owner or login, values if values is not None else server.values(owner or login)
            ),
            kind=server.kind.name,
            ca=server.ca,
            tls=server.tls,
        )
        return probe_one(target, ProbeOptions(timeout=5.0, allow_loopback=True, control=True))


def outcomes(report: Report) -> dict[str, str]:
    """login -> outcome."""
    return {o.login: o.outcome for o in report.outcomes}


def every_password(provider: Provider) -> Iterator[str]:
    """Every consumer's current password."""
    for key in provider.consumers:
        node, module = key.split("/")
        path = provider.folder / provider.consumers[key]["secret"]
        if path.exists():
            yield provider.password(node, module)
