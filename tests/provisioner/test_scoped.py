"""A delta's run (``only``) writes its logins without inspecting them first: the write's own
first round trip looks at the role, and decides "refused" or "unchanged" as the inspection
would. Only the logins a delta removes are inspected. Real PostgreSQL, real kept sessions."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from psycopg import pq

from meshtui.contracts.adapter import AdapterFactory, Held, Scope, Wanted
from meshtui.kinds.postgres.adapter import PostgresAdapter
from meshtui.kinds.postgres.catalog import held_name
from meshtui.kinds.postgres.warm import Lent, WarmSessions
from meshtui.provisioner.harness import Report, read_admin_file, reconcile

from .conftest import PROVIDER, Mesh, outcomes

SCOPE = Scope(PROVIDER, "database")


def scoped(mesh: Mesh, *logins: str, **kwargs: Any) -> Report:
    """Write the manifest and reconcile the delta of ``logins`` only, as the host agent does."""
    mesh.write()
    return reconcile(mesh.manifest, mesh.admin, only=frozenset(logins), **kwargs)


def watched(asked: list[frozenset[str] | None]) -> AdapterFactory:
    """The real adapter, noting the logins each inspection asks about (None: every one)."""

    class Watched(PostgresAdapter):
        def inspect(self, wanted: Mapping[str, Mapping[str, str]]) -> dict[str, Held]:
            asked.append(None)
            return super().inspect(wanted)

        def inspect_only(
            self, wanted: Mapping[str, Mapping[str, str]], logins: frozenset[str]
        ) -> dict[str, Held]:
            asked.append(logins)
            return super().inspect_only(wanted, logins)

    return Watched


class Trace:
    """libpq's own record of the protocol messages of the sessions it is given (PQtrace).

    Each turn from sending ("F" lines) to reading answers ("B" lines) is one round trip the
    provisioner waited for."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        self.traced: list[pq.abc.PGconn] = []

    def watch(self, lent: Lent) -> Lent:
        pgconn = lent.adapter.conn.pgconn
        pgconn.trace(self.fd)
        pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)
        self.traced.append(pgconn)
        return lent

    def round_trips(self) -> int:
        for pgconn in self.traced:
            pgconn.untrace()  # flushes what libpq buffered
        self.traced.clear()
        turns, last = 0, ""
        for line in self.path.read_text(errors="replace").splitlines():
            side = line[:2]
            if side == "B\t" and last == "F\t":
                turns += 1
            if side in ("F\t", "B\t"):
                last = side
        return turns

    def close(self) -> None:
        os.close(self.fd)


@pytest.fixture
def warm() -> Iterator[WarmSessions]:
    sessions = WarmSessions()
    yield sessions
    sessions.close()


def _kept_pids(mesh: Mesh) -> set[int]:
    with mesh.admin_conn() as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = 'meshtui-provisioner'"
        ).fetchall()
    return {int(r[0]) for r in rows}


def test_a_delta_on_a_kept_session_waits_for_the_server_no_more_than_its_write(
    mesh: Mesh, warm: WarmSessions, tmp_path: Path
) -> None:
    """The scoped inspection was a round trip of its own (its reads are the write's lookups):
    a one-login delta now costs exactly the round trips of that login's write."""
    mesh.add("app1", "gitea", database="gitea")
    mesh.add("app2", "wiki")
    assert outcomes(mesh.reconcile(factory=warm.open)) == {
        "gitea_app1_x": "created",
        "wiki_app2_x": "created",
    }
    conninfo = read_admin_file(mesh.admin)

    mesh.rotate("app1", "gitea")
    delta = Trace(tmp_path / "delta.trace")
    try:
        report = scoped(mesh, "gitea_app1_x", factory=lambda c, s: delta.watch(warm.open(c, s)))
        assert outcomes(report) == {"gitea_app1_x": "updated"}
        delta_trips = delta.round_trips()
    finally:
        delta.close()

    mesh.rotate("app1", "gitea")
    write = Trace(tmp_path / "write.trace")
    try:
        lent = write.watch(warm.open(conninfo, SCOPE))  # a kept session, as the delta had
        try:
            done = lent.create(
                "gitea_app1_x", mesh.password("app1", "gitea"), {"database": "gitea"}
            )
        finally:
            lent.close()
        assert done.outcome == "updated"
        write_trips = write.round_trips()
    finally:
        write.close()
    assert delta_trips == write_trips, (delta_trips, write_trips)
    assert mesh.can_login("gitea_app1_x", mesh.password("app1", "gitea"), "gitea")


def test_a_delta_inspects_only_the_logins_it_removes(mesh: Mesh) -> None:
    mesh.add("app1", "gitea", database="gitea")
    mesh.add("app2", "wiki")
    mesh.add("app3", "api")
    mesh.reconcile()
    asked: list[frozenset[str] | None] = []
    mesh.rotate("app1", "gitea")
    mesh.drop("app2", "wiki")
    report = scoped(mesh, "gitea_app1_x", "wiki_app2_x", factory=watched(asked))
    assert outcomes(report) == {"gitea_app1_x": "updated", "wiki_app2_x": "removed"}
    assert asked == [frozenset({"wiki_app2_x"})]
    assert "wiki_app2_x" not in mesh.authid()
    mesh.rotate("app3", "api")
    assert outcomes(scoped(mesh, "api_app3_x", factory=watched(asked))) == {"api_app3_x": "updated"}
    assert asked == [frozenset({"wiki_app2_x"})]  # nothing removed: no inspection at all
    assert mesh.can_login("gitea_app1_x", mesh.password("app1", "gitea"), "gitea")
    assert mesh.can_login("api_app3_x", mesh.password("app3", "api"))


def test_a_role_not_ours_in_a_delta_is_refused_with_the_inspections_note(mesh: Mesh) -> None:
    mesh.add("app9", "elsewhere", "shared_name")
    mesh.write(provider="db2/postgres")
    assert outcomes(reconcile(mesh.manifest, mesh.admin)) == {"shared_name": "created"}
    mesh.drop("app9", "elsewhere")
    with mesh.admin_conn() as conn:
        conn.execute("CREATE ROLE gitea_app1_x LOGIN PASSWORD 'hand-made-1'")
    before = mesh.authid()
    mesh.add("app1", "gitea", database="gitea")
    mesh.add("app2", "web", "shared_name")
    asked: list[frozenset[str] | None] = []
    for login, note in (
        ("gitea_app1_x", "a role meshtui did not make"),
        ("shared_name", "made by meshtui for database at db2/postgres"),
    ):
        (item,) = scoped(mesh, login, factory=watched(asked)).outcomes
        assert (item.login, item.outcome, item.reason) == (login, "refused", note)
    assert asked == []
    assert mesh.authid() == before  # nothing written, not even a COMMENT
    assert mesh.db_owner("gitea") is None
    assert mesh.can_login("gitea_app1_x", "hand-made-1")


def test_create_says_unchanged_for_a_login_holding_its_password_in_place(mesh: Mesh) -> None:
    mesh.add("app1", "gitea", database="gitea")
    mesh.add("app2", "wiki")
    mesh.add("app3", "api")
    mesh.reconcile()
    gitea, wiki = mesh.password("app1", "gitea"), mesh.password("app2", "wiki")
    xid = mesh.next_xid()
    with PostgresAdapter(read_admin_file(mesh.admin), SCOPE) as adapter:
        assert adapter.create("gitea_app1_x", gitea, {"database": "gitea"}).outcome == "unchanged"
        both = adapter.create_many(
            [Wanted("gitea_app1_x", gitea, {"database": "gitea"}), Wanted("wiki_app2_x", wiki, {})]
        )
        assert {k: getattr(v, "outcome", v) for k, v in both.items()} == {
            "gitea_app1_x": "unchanged",
            "wiki_app2_x": "unchanged",
        }
    assert outcomes(scoped(mesh, "gitea_app1_x", "wiki_app2_x")) == {
        "gitea_app1_x": "unchanged",
        "wiki_app2_x": "unchanged",
    }
    assert outcomes(scoped(mesh, "api_app3_x")) == {"api_app3_x": "unchanged"}
    assert mesh.next_xid() == xid  # nothing was written
    # intact but its database open to everyone again: repaired, so "updated"
    with mesh.admin_conn() as conn:
        conn.execute("GRANT CONNECT ON DATABASE gitea TO PUBLIC")
    (item,) = scoped(mesh, "gitea_app1_x").outcomes
    assert (item.outcome, item.reason) == (
        "updated",
        "database gitea: PUBLIC's rights revoked again",
    )
    assert outcomes(scoped(mesh, "gitea_app1_x")) == {"gitea_app1_x": "unchanged"}
    assert mesh.can_login("gitea_app1_x", gitea, "gitea")


def test_a_returning_login_in_a_delta_gets_its_data_back(mesh: Mesh, warm: WarmSessions) -> None:
    mesh.add("app1", "gitea", database="gitea")
    mesh.add("app2", "wiki")
    mesh.reconcile(factory=warm.open)
    login = mesh.login_of("app1", "gitea")
    with mesh.connect_as(login, mesh.password("app1", "gitea"), "gitea") as conn:
        conn.execute("CREATE TABLE t AS SELECT 42 AS answer")
    mesh.drop("app1", "gitea")
    assert outcomes(scoped(mesh, login, factory=warm.open)) == {login: "removed"}
    assert mesh.db_owner("gitea") == held_name(login)
    mesh.add("app1", "gitea", database="gitea")
    (item,) = scoped(mesh, login, factory=warm.open).outcomes
    assert (item.outcome, item.reason) == (
        "created",
        "what it owned before its removal was handed back",
    )
    assert mesh.db_owner("gitea") == login
    assert held_name(login) not in mesh.authid()
    with mesh.connect_as(login, mesh.password("app1", "gitea"), "gitea") as conn:
        assert conn.execute("SELECT answer FROM t").fetchone() == (42,)


LOUD = {
    "log_statement": "all",
    "log_min_duration_statement": "0",
    "log_parameter_max_length": "-1",
    "log_parameter_max_length_on_error": "-1",
    "log_min_error_statement": "debug5",
}


def _log_since(mesh: Mesh, offset: int) -> str:
    return mesh.cluster.log_path.read_bytes()[offset:].decode("utf-8", "replace")


def test_logging_turned_loud_between_loans_is_lowered_before_the_verifier(
    mesh: Mesh, warm: WarmSessions
) -> None:
    mesh.add("app1", "gitea", database="gitea")
    assert outcomes(mesh.reconcile(factory=warm.open)) == {"gitea_app1_x": "created"}
    (kept,) = _kept_pids(mesh)
    offset = mesh.cluster.log_path.stat().st_size
    passwords = []
    try:
        mesh.cluster.set_config(**LOUD)
        for _ in range(2):
            mesh.rotate("app1", "gitea")
            passwords.append(mesh.password("app1", "gitea"))
            report = scoped(mesh, "gitea_app1_x", factory=warm.open)
            assert outcomes(report) == {"gitea_app1_x": "updated"}
    finally:
        mesh.cluster.set_config(**dict.fromkeys(LOUD))
    assert _kept_pids(mesh) == {kept}  # the same kept session, lent twice
    assert mesh.can_login("gitea_app1_x", passwords[-1], "gitea")
    text = _log_since(mesh, offset)
    assert "pg_settings" in text and "pg_roles" in text  # the lookups were logged ...
    assert "SCRAM-SHA-256$" not in text  # ... and no verifier, no password
    assert "PASSWORD '" not in text.upper()
    for password in passwords:
        assert password not in text


def test_a_managed_admin_on_a_kept_session_refuses_once_logging_turns_loud(
    mesh: Mesh, warm: WarmSessions
) -> None:
    with mesh.admin_conn() as conn:
        conn.execute("CREATE ROLE meshadmin LOGIN CREATEROLE CREATEDB PASSWORD 'managed-pw-9'")
    mesh.admin.write_text(
        f"host=127.0.0.1 port={mesh.cluster.port} user=meshadmin password=managed-pw-9"
        " dbname=postgres\n"
    )
    mesh.add("app1", "gitea", database="gitea")
    assert outcomes(mesh.reconcile(factory=warm.open)) == {"gitea_app1_x": "created"}
    mesh.rotate("app1", "gitea")
    assert outcomes(scoped(mesh, "gitea_app1_x", factory=warm.open)) == {
        "gitea_app1_x": "updated"  # set every time: it cannot read what the server holds
    }
    assert mesh.can_login("gitea_app1_x", mesh.password("app1", "gitea"), "gitea")
    offset = mesh.cluster.log_path.stat().st_size
    try:
        mesh.cluster.set_config(log_statement="all", log_parameter_max_length="-1")
        mesh.rotate("app1", "gitea")
        (item,) = scoped(mesh, "gitea_app1_x", factory=warm.open).outcomes
    finally:
        mesh.cluster.set_config(log_statement=None, log_parameter_max_length=None)
    assert item.outcome == "refused" and "log_statement=all" in item.reason
    text = _log_since(mesh, offset)
    assert "pg_settings" in text  # the settings were read again, and logged
    assert "SCRAM-SHA-256$" not in text and mesh.password("app1", "gitea") not in text


def test_a_kept_session_ended_between_loans_is_replaced_when_the_write_comes_first(
    mesh: Mesh, warm: WarmSessions
) -> None:
    mesh.add("app1", "gitea", database="gitea")
    assert outcomes(mesh.reconcile(factory=warm.open)) == {"gitea_app1_x": "created"}
    for turn in range(2):
        (kept,) = _kept_pids(mesh)
        with mesh.admin_conn() as conn:
            conn.execute("SELECT pg_terminate_backend(%s, 5000)", [kept])
        mesh.rotate("app1", "gitea")
        if turn == 0:  # a delta: its first call on the loan is the write
            report = scoped(mesh, "gitea_app1_x", factory=warm.open)
            assert outcomes(report) == {"gitea_app1_x": "updated"}
        else:  # the write alone, first call of a loan
            lent = warm.open(read_admin_file(mesh.admin), SCOPE)
            try:
                password = mesh.password("app1", "gitea")
                done = lent.create("gitea_app1_x", password, {"database": "gitea"})
            finally:
                lent.close()
            assert done.outcome == "updated"
        assert mesh.can_login("gitea_app1_x", mesh.password("app1", "gitea"), "gitea")
        assert kept not in _kept_pids(mesh)


def test_a_write_that_fails_or_is_refused_leaves_the_kept_session_idle(
    mesh: Mesh, warm: WarmSessions
) -> None:
    """Its transaction is rolled back, ours or the server's error alike: nothing of it stays
    and the same session is lent again."""
    with mesh.admin_conn() as conn:
        conn.execute("CREATE ROLE theirs_app2_x LOGIN PASSWORD 'kept-by-them'")
    mesh.add("app1", "gitea", database="gitea")
    mesh.add("app2", "theirs")
    first = outcomes(mesh.reconcile(factory=warm.open))
    assert first == {"gitea_app1_x": "created", "theirs_app2_x": "refused"}
    (kept,) = _kept_pids(mesh)
    before = mesh.authid()
    assert outcomes(scoped(mesh, "theirs_app2_x", factory=warm.open)) == {
        "theirs_app2_x": "refused"
    }
    try:
        mesh.cluster.set_config(default_transaction_read_only="on")
        mesh.rotate("app1", "gitea")
        (item,) = scoped(mesh, "gitea_app1_x", factory=warm.open).outcomes
        assert item.outcome == "failed" and "read-only transaction" in item.reason
    finally:
        mesh.cluster.set_config(default_transaction_read_only=None)
    assert mesh.authid() == before  # nothing of either transaction stayed
    assert _kept_pids(mesh) == {kept}
    assert outcomes(scoped(mesh, "gitea_app1_x", factory=warm.open)) == {"gitea_app1_x": "updated"}
    assert _kept_pids(mesh) == {kept}
    assert mesh.can_login("gitea_app1_x", mesh.password("app1", "gitea"), "gitea")
    assert mesh.can_login("theirs_app2_x", "kept-by-them")
