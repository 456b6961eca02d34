"""The PostgreSQL adapter: make one login true, remove one login, tell "unchanged" in one SELECT.

What "made by meshtui" means lives in PostgreSQL itself: membership in the NOLOGIN role
``meshtui_provisioned``, granted by a superuser or by this very admin, plus a role COMMENT (JSON) naming the scope
(provider, provision) and the digest of the secret. The password and the COMMENT are written by
one transaction, so the ``pg_authid`` row and the ``pg_shdescription`` row share one ``xmin``.
On the next run one SELECT compares, for every role, those two ``xmin`` and the digest: any
``ALTER ROLE`` by someone else gives the role row a new ``xmin`` (so does a hand-edited
COMMENT to its row), and a new secret changes the digest; either makes us rewrite. After every
write (by a superuser) the stored verifier is read back and compared inside the transaction, so
a run that reports success has changed the password.

The password never reaches the server: it goes as a client-side SCRAM verifier, and the
verifier (a secret too) is never a bind parameter of a statement a superuser sends, nor in any
statement text a log could keep: it travels once, in ``ALTER``/``CREATE ROLE ... PASSWORD``,
in a transaction in which a statement before it lowered every logging setting
(:mod:`meshtui.kinds.postgres.quiet`). The read-back fetches ``rolpassword`` and compares on this side, in constant
time.

Removal never drops data: the login is locked (NOLOGIN, PASSWORD NULL), its sessions ended,
whatever it owns in each database is reassigned to a per-login NOLOGIN holding role
(``meshtui_held_<hash>``, which hands everything back if the same login is asked for again),
its remaining privileges dropped, and the role dropped. When that cannot finish the login stays
locked and the outcome is "drop pending"; the next run tries again. Databases are found through
``pg_shdepend`` (exactly the databases where the login owns or is granted something).

Databases meshtui creates are confined: PUBLIC loses CONNECT and TEMP, the owner keeps them,
and a COMMENT records that meshtui made it (the only databases whose rights it ever changes).

The admin is a superuser, or (managed PostgreSQL) a role with CREATEROLE, and CREATEDB when a
database is asked for. Such an admin cannot read ``pg_authid``: it cannot see a verifier or its
row's ``xmin``, so it sets every password on every run ("set every time", never "unchanged");
it sends the verifier as a bind parameter of a session-local function that runs the
``ALTER ROLE`` nested (so neither the statement log nor pg_stat_statements keeps its text), and
refuses to send it at all while a setting it cannot lower would record it. It makes itself a
member of a login of ours only to act as that login's owner (its database, removal).

The adapter is one class built from one module a job: ``session.py`` (the admin session),
``reading.py`` (the inspection), ``roles.py`` (the marker and holding roles), ``create.py``
(making logins true) and this module (removal); ``catalog.py`` holds what they share (the
typed COMMENT :class:`~meshtui.kinds.postgres.catalog.Record`, the SQL that reads roles).
"""

from __future__ import annotations

import psycopg
from psycopg import sql

from meshtui.contracts.adapter import Capabilities, Done, Refused, check_name
from meshtui.errors import ProvisionError
from meshtui.kinds.postgres.alternate import _Alternates
from meshtui.kinds.postgres.catalog import (
    _DEPENDENT_DATABASES,
    _OWNS_ANYTHING,
    Record,
    _error_text,
    held_name,
)
from meshtui.model import OutcomeName

_BEFORE = " AND (%(before)s::timestamptz IS NULL OR backend_start < %(before)s::timestamptz)"
_END_SESSIONS = (
    "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity"
    " WHERE usename = %(login)s AND pid <> pg_backend_pid()" + _BEFORE
)
_COUNT_SESSIONS = (
    "SELECT count(*) FROM pg_stat_activity WHERE usename = ANY(%(logins)s)"
    " AND pid <> pg_backend_pid()" + _BEFORE
)


class PostgresAdapter(_Alternates):
    """One admin session with one PostgreSQL, working for one manifest scope."""

    capabilities = Capabilities(
        batching=True,
        narrowing=True,
        deciding=True,
        limited=True,
        live_sessions=True,
        alternating=True,
    )

    def describe(self, exc: BaseException) -> str | None:
        """PostgreSQL's own primary message for a psycopg error (None for any other)."""
        if isinstance(exc, psycopg.Error):
            return (exc.diag.message_primary or str(exc).splitlines()[0]).strip()
        return None

    # -- remove ------------------------------------------------------------------------------

    def remove(self, login: str) -> Done:
        """Lock, disconnect, reassign (data kept) and drop a login of ours."""
        check_name(login)
        role = self._role(login)
        if role is None:
            return Done(OutcomeName.REMOVED, "it was already gone")
        record = role.record
        if (
            not role.marked
            or record is None
            or record.what != "login"
            or not self._in_scope(record)
        ):
            raise Refused("not a login meshtui made for this provision; left alone")
        ident = sql.Identifier(login)
        if role.can_login or not role.no_password:
            with self.conn.transaction():
                self._exec(sql.SQL("ALTER ROLE {} NOLOGIN PASSWORD NULL").format(ident))
        try:
            for alternate in self._alternates_of(login):  # what they own goes to the owner
                self._drop_alternate(alternate, login)
            self._act_as(login)
            self._terminate(login)
            if self.conn.execute(_OWNS_ANYTHING, {"oid": role.oid}).fetchone() == (True,):
                keeper = held_name(login)
                self._ensure_role(
                    keeper,
                    Record("held", self.scope.provider, self.scope.provision, login=login),
                )
            else:
                keeper = None
            if keeper is not None:
                self._act_as(keeper)
                self._reassign_everywhere(login, keeper, role.oid)
            else:
                for dbname, allowed in self.conn.execute(
                    _DEPENDENT_DATABASES, {"oid": role.oid}
                ).fetchall():
                    if allowed:
                        self._other(dbname).execute(sql.SQL("DROP OWNED BY {}").format(ident))
            self.conn.execute(sql.SQL("DROP ROLE {}").format(ident))
            self._acting_as.discard(login)
        except (psycopg.Error, ProvisionError) as exc:
            if isinstance(exc, psycopg.OperationalError) and self.conn.closed:
                raise
            return Done(
                OutcomeName.DROP_PENDING,
                f"locked (NOLOGIN, no password), not dropped: {_error_text(exc)}",
            )
        return Done(OutcomeName.REMOVED, "its objects are kept by " + keeper if keeper else "")

    def _drop_alternate(self, name: str, owner: str) -> None:
        """Lock, disconnect and drop an alternate login of ``owner``, what it owns (a session
        that reset its role) handed to ``owner`` first."""
        role = self._role(name)
        if role is None:
            return
        self._lock(name, role, owner)
        self._act_as(name)
        self._terminate(name)
        self._reassign_everywhere(name, owner, role.oid)
        self.conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))
        self._acting_as.discard(name)

    # -- sessions ----------------------------------------------------------------------------

    def mark_sessions(self, login: str) -> str:
        """The server's clock now: a backend started before it was opened with the credential
        the login held until now (``backend_start``)."""
        check_name(login)
        row = self.conn.execute("SELECT clock_timestamp()::text").fetchone()
        return str(row[0]) if row else ""

    def end_sessions(self, login: str, digest: str, before: str | None = None) -> int:
        """End every backend of ``login`` but this session's own (with ``before``, those started
        before that mark), and wait until each is gone (PostgreSQL does not record which
        password opened a backend: asked when the new one is set, every backend of the login
        was opened with the old). For an alternating pair's owner: the backends of its every
        login but the one that logs in with ``digest``."""
        check_name(login)
        ended = 0
        for name in self._pair_logins(login, digest):  # an alternating pair's retired login
            self._act_as(name)  # an admin that is not a superuser may signal its roles' backends
            asked = {"login": name, "before": before or None}
            rows = self.conn.execute(_END_SESSIONS, asked).fetchall()
            if not all(r[0] for r in rows):
                raise ProvisionError(f"sessions of {name} did not end within 5 s")
            ended += len(rows)
        return ended

    def count_sessions(self, login: str, digest: str, before: str | None = None) -> int:
        """How many backends ``login`` has open (this session's own aside; with ``before``,
        those started before it); for an alternating pair's owner, those of its logins as
        :meth:`end_sessions` names them."""
        check_name(login)
        asked = {"logins": self._pair_logins(login, digest), "before": before or None}
        row = self.conn.execute(_COUNT_SESSIONS, asked).fetchone()
        return int(row[0]) if row else 0

    def _terminate(self, login: str) -> None:
        """End every session of ``login`` and wait until they are gone."""
        rows = self.conn.execute(
            "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE usename = %s",
            [login],
        ).fetchall()
        if not all(r[0] for r in rows):
            raise ProvisionError(f"sessions of {login} did not end within 5 s")
