"""The adapter contract: the PostgreSQL adapter's own guards, and a second (in-memory) adapter."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from meshtui.contracts.adapter import Adapter, Capabilities, Done, Held, Refused, Scope
from meshtui.crypto import secret_digest
from meshtui.errors import UnsafeLoginError
from meshtui.kinds.postgres import adapter as postgres
from meshtui.kinds.postgres import create as postgres_create
from meshtui.provisioner.harness import read_admin_file, reconcile

from .conftest import PROVIDER, Mesh, outcomes

SCOPE = Scope(provider=PROVIDER, provision="database")


def test_truncation_notice_is_an_error(mesh: Mesh, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the byte-length guard switched off, PostgreSQL's NOTICE 42622 still stops it."""
    monkeypatch.setattr(postgres_create, "check_name", lambda name, what="login": name)
    xid = mesh.next_xid()
    with postgres.PostgresAdapter(read_admin_file(mesh.admin), SCOPE) as adapter:
        adapter.create("m" * 40, "Password-For-The-Marker-1", {})  # the marker, a normal login
        xid = mesh.next_xid()
        with pytest.raises(UnsafeLoginError, match="truncated"):
            adapter.create("t" * 70, "Password-Never-Stored-1", {})
    roles = mesh.authid()
    assert "t" * 63 not in roles and "t" * 70 not in roles
    assert mesh.next_xid() == xid + 1  # one transaction began and was rolled back


def test_adapter_refuses_roles_it_did_not_make(mesh: Mesh) -> None:
    with mesh.admin_conn() as conn:
        conn.execute("CREATE ROLE handmade LOGIN PASSWORD 'hand-made-pw'")
    before = mesh.authid()["handmade"]
    with postgres.PostgresAdapter(read_admin_file(mesh.admin), SCOPE) as adapter:
        with pytest.raises(Refused, match="did not make"):
            adapter.create("handmade", "Another-Password-1", {})
        with pytest.raises(Refused, match="left alone"):
            adapter.remove("handmade")
    assert mesh.authid()["handmade"] == before


class MemoryAdapter:
    """A Redis-shaped adapter (ACL users in a dict), to show how little the contract asks."""

    users: dict[str, tuple[str, str]] = {}  # login -> (digest, provider), shared like a server
    capabilities = Capabilities()  # the four calls and nothing more

    def describe(self, exc: BaseException) -> str | None:
        return None

    def __init__(self, conninfo: str, scope: Scope) -> None:
        self.scope = scope

    def inspect(self, wanted: Mapping[str, Mapping[str, str]]) -> Mapping[str, Held]:
        return {
            login: Held(login, ours=owner == self.scope.provider, digest=digest, in_place=True)
            for login, (digest, owner) in self.users.items()
        }

    def create(self, login: str, password: str, values: Mapping[str, str]) -> Done:
        existed = login in self.users
        self.users[login] = (secret_digest(password.encode()), self.scope.provider)
        return Done("updated" if existed else "created")

    def remove(self, login: str) -> Done:
        del self.users[login]
        return Done("removed")

    def close(self) -> None:
        pass


def test_harness_drives_any_adapter(mesh: Mesh, tmp_path: Path) -> None:
    MemoryAdapter.users = {}  # a fresh "server" for each parametrized run
    adapter: Adapter = MemoryAdapter("", SCOPE)  # satisfies the Protocol
    assert adapter.inspect({}) == {}
    MemoryAdapter.users = {"someone_else": ("blake2b:" + "0" * 64, "db9/redis")}
    mesh.add("app1", "cache")
    mesh.add("app2", "cache")
    mesh.add("app3", "cache", write_secret=False)
    mesh.write()
    report = reconcile(mesh.manifest, mesh.admin, factory=MemoryAdapter)
    assert outcomes(report) == {
        "cache_app1_x": "created",
        "cache_app2_x": "created",
        "cache_app3_x": "waiting",
    }
    assert outcomes(reconcile(mesh.manifest, mesh.admin, factory=MemoryAdapter)) == {
        "cache_app1_x": "unchanged",
        "cache_app2_x": "unchanged",
        "cache_app3_x": "waiting",
    }
    mesh.rotate("app1", "cache")
    mesh.drop("app2", "cache")
    mesh.write()
    report = reconcile(mesh.manifest, mesh.admin, factory=MemoryAdapter)
    assert outcomes(report) == {
        "cache_app1_x": "updated",
        "cache_app3_x": "waiting",
        "cache_app2_x": "removed",
    }
    assert "someone_else" in MemoryAdapter.users  # not ours: never removed


def test_a_line_naming_an_alternate_is_refused_by_a_kind_without_alternates(
    mesh: Mesh,
) -> None:
    """A login that holds several credentials (or one) has no alternates: a line naming one
    is that consumer's refusal, not a plain create of the owner's name."""
    MemoryAdapter.users = {}
    mesh.add("app1", "cache")["alt"] = "b"
    mesh.write()
    report = reconcile(mesh.manifest, mesh.admin, factory=MemoryAdapter)
    (only,) = report.outcomes
    assert (only.outcome, only.reason) == (
        "refused",
        "this kind has no alternate logins (alt = 'b')",
    )
    assert MemoryAdapter.users == {}
