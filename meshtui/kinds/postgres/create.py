"""The PostgreSQL adapter's create: make one login (or a batch) true, with its database,
deciding first as the inspection would."""

from __future__ import annotations

import contextlib
import hmac
import os
from collections.abc import Callable, Iterator, Mapping

import psycopg
from psycopg import sql
from psycopg.pq import TransactionStatus

from meshtui.contracts.adapter import Change, Done, Refused, Wanted, check_name
from meshtui.crypto import secret_digest
from meshtui.errors import ProvisionError, UnsafeLoginError
from meshtui.kinds.postgres.catalog import (
    _DATABASES,
    _EXISTING,
    _EXISTS,
    _PASSWORD_FUNCTION,
    _READ_BACK,
    _READ_BACK_MANY,
    KNOWN_VALUES,
    LOGINS_PER_TRIP,
    MARKER,
    Batch,
    Record,
    _Database,
    _error_text,
    _MarkerNotReady,
    _refusal,
    _Role,
    held_name,
)
from meshtui.kinds.postgres.quiet import plan_of, quiet_query
from meshtui.kinds.postgres.roles import _Roles
from meshtui.kinds.postgres.scram import (
    VerifiersAhead,
    is_plain_ascii,
)
from meshtui.model import OutcomeName


class _Creating(_Roles):
    """Making logins true (one, or a batch in one transaction)."""

    # -- create ------------------------------------------------------------------------------

    def _database_of(self, login: str, values: Mapping[str, str]) -> str | None:
        database = self._wanted_database(values)
        if database is None:
            return None
        row = self.conn.execute(
            "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = %s", [database]
        ).fetchone()
        self._check_owner(database, login, None if row is None else str(row[0]))
        return database

    @staticmethod
    def _wanted_database(values: Mapping[str, str]) -> str | None:
        """The database the values ask for (checked as a name); Refused for an unknown value."""
        unknown = sorted(set(values) - KNOWN_VALUES)
        if unknown:
            raise Refused(f"unknown values {', '.join(unknown)} (this provider knows: database)")
        database = values.get("database")
        if database is not None:
            check_name(database, "database name")
        return database

    @staticmethod
    def _check_owner(database: str, login: str, owner: str | None) -> None:
        """Refused when ``database`` exists and belongs to neither ``login`` nor its keeper."""
        if owner not in (None, login, held_name(login)):
            raise Refused(
                f"database {database} exists and belongs to {owner}; hand it over "
                f"(ALTER DATABASE ... OWNER TO {login}) or ask for another name"
            )

    def create(self, login: str, password: str, values: Mapping[str, str]) -> Done:
        """Make ``login`` a LOGIN role of ours holding exactly ``password``, with its database.

        One transaction, pipelined: look at the role (with its holding role, its database, once
        per loan the marker and, after :meth:`refresh_later`, the settings to lower, in the same
        round trip); then lower logging, write the verifier, the marker and the record, and (a
        superuser) read back that the server stores exactly our verifier, comparing here.
        Decides as :meth:`inspect` would: Refused with its note for a role that is not ours,
        "unchanged" with nothing written for one that holds that password intact and in place.
        """
        check_name(login)
        database = self._wanted_database(values)
        if not self.superuser and self._quiet.unlowered:
            raise Refused(self.limits[-1])
        if "\x00" in password:
            raise Refused("the secret holds a NUL character, which PostgreSQL cannot take")
        digest = secret_digest(password.encode("utf-8"))
        self._prepare_function()
        # printable ASCII: the verifier's PBKDF2 runs on a worker while the role is looked up
        plain = is_plain_ascii(password)
        special = None if plain else self._verifier(login, password)
        with VerifiersAhead(
            [password] if plain else [], iterations=self.iterations, workers=1
        ) as ahead:
            del password

            def verifier() -> str:
                return special or ahead.take()

            try:
                change, written, returning, found = self._write_one(
                    login, verifier, digest, database
                )
            except _MarkerNotReady:  # missing or not ours to grant: made or refused on its own
                self._prepare()
                change, written, returning, found = self._write_one(
                    login, verifier, digest, database
                )
        in_place = database is None or (found is not None and found.in_place(login))
        if not (written or returning) and in_place:
            return Done(OutcomeName.UNCHANGED)  # what the inspection calls unchanged
        notes = self._hand_back(login) if returning else []
        if database is not None:
            # a returning login was just handed back what it owned: read its database again
            notes += self._ensure_database(database, login, read=returning, found=found)
        return Done(change, "; ".join(notes))

    def _write_one(
        self, login: str, verifier_of: Callable[[], str], digest: str, database: str | None
    ) -> tuple[Change, bool, bool, _Database | None]:
        """:meth:`create`'s transaction: the change, whether the password was written (not when
        the role already held it intact), whether a holding role keeps what the login owned (a
        returning login), and its database as read before the write. ``verifier_of`` is called
        once, when the password is written.

        The first round trip only reads (nothing secret: logging is lowered in the second, with
        the settings it read when they were stale, right before the verifier is sent)."""
        with self._pipelined_transaction():
            settings = None
            if self._stale:  # a kept session's settings, read again in the same round trip
                settings = self.conn.execute(
                    *quiet_query(superuser=self.superuser, version=self.server_version)
                )
            keeper = self.conn.execute(_EXISTS, [held_name(login)])
            dbs = self.conn.execute(_DATABASES, [[database]]) if database is not None else None
            marker = None if self._marker_ready else self.conn.execute(self._marker_sql, [MARKER])
            role = self._role(login)
            returning = keeper.fetchone() == (True,)
            if settings is not None:
                self._plan = plan_of(settings.fetchall(), superuser=self.superuser)
                self._stale = False
            self._check_notices()
            if role is not None and not self._ours_or_repairable(role):
                raise _refusal(role)  # before the database, as the inspection refuses it
            found = self._database_rows(dbs.fetchall()).get(str(database)) if dbs else None
            if database is not None:
                self._check_owner(database, login, found.owner if found else None)
            if marker is not None:
                if marker.fetchone() != (True,):
                    raise _MarkerNotReady
                self._marker_ready = True
            intact = (
                role is not None
                and role.can_login
                and role.same_txn
                and role.record is not None
                and role.record.digest == digest
            )
            if not intact:
                self.conn.execute(self._plan.statement)  # lowered before the verifier is sent
                verifier = verifier_of()
                self._set_password(login, verifier, create=role is None)
                if role is None:
                    self._grant_marker(login)
                self.conn.execute(
                    sql.SQL("COMMENT ON ROLE {} IS {}").format(
                        sql.Identifier(login), sql.Literal(self._record_text(digest))
                    )
                )
                if self.superuser:
                    self._read_back(login, verifier)
                del verifier
        change: Change = OutcomeName.CREATED if role is None else OutcomeName.UPDATED
        return change, not intact, returning, found

    @contextlib.contextmanager
    def _pipelined_transaction(self) -> Iterator[None]:
        """One transaction in one pipeline: BEGIN goes with the first batch and COMMIT with the
        closing sync (psycopg's ``transaction()`` in a pipeline waits for each on its own, two
        round trips more). Any error, ours or the server's, rolls it back before it is raised."""
        conn = self.conn
        try:
            with conn.pipeline():
                conn.execute("BEGIN")
                yield
                conn.execute("COMMIT")
        except BaseException:
            if not conn.closed and conn.info.transaction_status != TransactionStatus.IDLE:
                try:
                    conn.execute("ROLLBACK")
                except psycopg.Error:
                    conn.close()  # a session stuck in a transaction is never used again
            raise

    def _prepare(self) -> None:
        """The marker role (and, for an admin that is not a superuser, the password function)."""
        if not self._marker_ready:
            if self._role(MARKER) is None:
                self._ensure_role(MARKER, Record("marker"))
            self._check_marker_grantable()
            self._marker_ready = True
        self._prepare_function()

    def _prepare_function(self) -> None:
        """For an admin that is not a superuser: the session's password function, made once."""
        if not self.superuser and not self._function_ready:
            try:
                self.conn.execute(_PASSWORD_FUNCTION)
            except psycopg.errors.InsufficientPrivilege:
                raise ProvisionError(
                    f"the admin {self.admin_role} may not create temporary objects in database "
                    f"{self._home_db} (GRANT TEMP ON DATABASE {self._home_db} TO "
                    f"{self.admin_role}); it needs that to set passwords unlogged"
                ) from None
            self._function_ready = True

    def create_many(self, batch: Batch) -> dict[str, Done | Exception]:
        """:meth:`create` for many logins in one transaction, each one proven by the read-back.

        A superuser writes every verifier and record in one transaction (a few dozen logins a
        round trip, in the quiet transaction, so no log keeps them; the next verifiers computed
        on the other cores meanwhile), then reads all the stored verifiers back in one SELECT
        (names sent, verifiers compared here) before it commits. Should anything in it fail, nothing
        of it stays and each login is made true alone, so one bad login costs only itself. An
        admin that is not a superuser, or a batch of one, takes the one-by-one path. Returns,
        per login, what :meth:`create` returned or raised.
        """
        out: dict[str, Done | Exception] = {}
        if not self.superuser or len(batch) < 2:
            for wanted in batch:
                out[wanted.login] = self._create_one(wanted)
            return out
        ready: list[tuple[Wanted, str | None]] = []
        for wanted in batch:
            try:
                check_name(wanted.login)
                ready.append((wanted, self._database_of(wanted.login, wanted.values)))
                if "\x00" in wanted.password:
                    raise Refused("the secret holds a NUL character, which PostgreSQL cannot take")
            except (Refused, UnsafeLoginError) as exc:
                out[wanted.login] = exc
                ready = [r for r in ready if r[0].login != wanted.login]
        if not ready:
            return out
        try:
            self._prepare()
            changes, returning, untouched = self._write_many(ready, out)
        except (psycopg.Error, ProvisionError):
            if self.conn.closed:
                raise
            for wanted, _ in ready:  # nothing of the batch stayed: one by one
                out[wanted.login] = self._create_one(wanted)
            return out
        for wanted, database in ready:
            if wanted.login in out:
                continue
            login = wanted.login
            try:
                back = held_name(login) in returning
                notes = self._hand_back(login) if back else []
                if database is not None:
                    notes += self._ensure_database(database, login)  # no note: in place
                if login in untouched and not (back or notes):
                    out[login] = Done(OutcomeName.UNCHANGED)
                else:
                    out[login] = Done(changes[login], "; ".join(notes))
            except (psycopg.Error, ProvisionError) as exc:
                if self.conn.closed:
                    raise
                out[login] = exc
        return out

    def _create_one(self, wanted: Wanted) -> Done | Exception:
        try:
            return self.create(wanted.login, wanted.password, wanted.values)
        except Exception as exc:  # one login's failure is its outcome
            if isinstance(exc, psycopg.OperationalError) and self.conn.closed:
                raise
            return exc

    def _write_many(
        self, ready: list[tuple[Wanted, str | None]], out: dict[str, Done | Exception]
    ) -> tuple[dict[str, Change], set[str], set[str]]:
        """The batch's one transaction: per login "created" or "updated" (refusals go to
        ``out``), the names of the holding roles that exist (returning logins), and the logins
        whose role already held that password intact (not written).

        Only the logins that need a write get a verifier; they are sent ``LOGINS_PER_TRIP`` a
        round trip while worker threads compute the next ones (:class:`VerifiersAhead`).
        """
        names = [w.login for w, _ in ready]
        changes: dict[str, Change] = {}
        written: dict[str, str] = {}
        untouched: set[str] = set()
        with self.conn.transaction():
            self.conn.execute(self._quiet.statement)
            keepers = self.conn.execute(_EXISTING, [[held_name(n) for n in names]])
            returning = {str(r[0]) for r in keepers.fetchall()}
            roles = self._roles(names)
            self._check_notices()
            todo: list[tuple[Wanted, str, bool]] = []  # (wanted, digest, create)
            for wanted, _ in ready:
                login = wanted.login
                role = roles.get(login)
                if role is not None and not self._ours_or_repairable(role):
                    out[login] = _refusal(role)
                    continue
                digest = secret_digest(wanted.password.encode("utf-8"))
                changes[login] = OutcomeName.CREATED if role is None else OutcomeName.UPDATED
                intact = (
                    role is not None
                    and role.can_login
                    and role.same_txn
                    and role.record is not None
                    and role.record.digest == digest
                )
                if intact:
                    untouched.add(login)
                else:
                    todo.append((wanted, digest, role is None))
            # not printable ASCII: libpq applies SASLprep (on this thread, it holds the session)
            special = {
                w.login: self._verifier(w.login, w.password)
                for w, _, _ in todo
                if not is_plain_ascii(w.password)
            }
            plain = [w.password for w, _, _ in todo if w.login not in special]
            workers = max(1, min(4, os.cpu_count() or 1))
            with VerifiersAhead(plain, iterations=self.iterations, workers=workers) as made:
                del plain
                for start in range(0, len(todo), LOGINS_PER_TRIP):
                    statements: list[sql.Composable] = []
                    for wanted, digest, create in todo[start : start + LOGINS_PER_TRIP]:
                        login = wanted.login
                        verifier = special.pop(login, None) or made.take()
                        statements += self._write_statements(login, verifier, digest, create)
                        written[login] = verifier
                    # no parameters: one simple-protocol message, one round trip, for many
                    self._exec(sql.SQL("; ").join(statements))
                    statements.clear()
            self._read_back_many(written)
            written.clear()
        return changes, returning, untouched

    def _write_statements(
        self, login: str, verifier: str, digest: str, create: bool
    ) -> list[sql.Composable]:
        """One login's writes: its verifier, the marker (a new login), our record."""
        ident = sql.Identifier(login)
        verb = "CREATE" if create else "ALTER"
        out: list[sql.Composable] = [
            sql.SQL(verb + " ROLE {} LOGIN PASSWORD {} VALID UNTIL 'infinity'").format(
                ident, sql.Literal(verifier)
            )
        ]
        if create:
            out.append(self._marker_grant(login))
        out.append(
            sql.SQL("COMMENT ON ROLE {} IS {}").format(
                ident, sql.Literal(self._record_text(digest))
            )
        )
        return out

    def _read_back_many(self, written: Mapping[str, str]) -> None:
        """The proof for a batch: each login's stored verifier is the one written (compared
        here, in constant time), written by the same transaction as its record."""
        if not written:
            return
        rows = self.conn.execute(_READ_BACK_MANY, {"names": list(written)}).fetchall()
        self._check_notices()
        stored = {str(r[0]): (r[1], r[2]) for r in rows}
        for login, verifier in written.items():
            value, same_txn = stored.get(login, (None, False))
            text = "" if value is None else str(value)
            same = hmac.compare_digest(text.encode("ascii", "replace"), verifier.encode("ascii"))
            if not (same and same_txn):
                raise ProvisionError(f"PostgreSQL did not store the password of {login}")

    def _set_password(self, login: str, verifier: str, *, create: bool) -> None:
        """The one statement that carries the verifier (inside the quiet transaction)."""
        if self.superuser:
            verb = "CREATE" if create else "ALTER"
            self.conn.execute(
                sql.SQL(verb + " ROLE {} LOGIN PASSWORD {} VALID UNTIL 'infinity'").format(
                    sql.Identifier(login), sql.Literal(verifier)
                )
            )
        else:
            self.conn.execute(
                "SELECT pg_temp.meshtui_password(%s, %s, %s)",
                ["CREATE" if create else "ALTER", login, verifier],
            )

    def _read_back(self, login: str, verifier: str) -> None:
        """The proof: the server holds our verifier, written with the record (compared here)."""
        proof = self.conn.execute(_READ_BACK, {"name": login}).fetchone()
        self._check_notices()
        stored = "" if proof is None or proof[0] is None else str(proof[0])
        same = hmac.compare_digest(stored.encode("ascii", "replace"), verifier.encode("ascii"))
        if not (same and proof is not None and proof[1]):
            raise ProvisionError(f"PostgreSQL did not store the password of {login}")

    def _ours_or_repairable(self, role: _Role) -> bool:
        """A marked role whose record is ours for this scope, or was lost (then we repair it)."""
        if not role.marked:
            return False
        return role.record is None or (role.record.what == "login" and self._in_scope(role.record))

    def _hand_back(self, login: str) -> list[str]:
        """Give a returning login what its holding role kept, then drop the holding role."""
        keeper = held_name(login)
        held = self._role(keeper)
        if held is None:
            return []
        record = held.record
        if not held.marked or record is None or record.what != "held" or record.login != login:
            return [f"role {keeper} is not meshtui's holding role for {login}; left alone"]
        self._act_as(keeper)
        self._act_as(login)
        self._reassign_everywhere(keeper, login, held.oid)
        self.conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(keeper)))
        self._acting_as.discard(keeper)
        return ["what it owned before its removal was handed back"]

    def _act_as(self, role: str) -> None:
        """An admin that is not a superuser becomes a member of a role of ours (INHERIT, SET),
        so it may act as that role's owner: create its database, reassign, end its sessions."""
        if self.superuser or role in self._acting_as:
            return
        options = " WITH INHERIT TRUE, SET TRUE" if self.server_version >= 160000 else ""
        try:
            self._exec(
                sql.SQL("GRANT {} TO {}" + options).format(
                    sql.Identifier(role), sql.Identifier(self.admin_role)
                )
            )
        except psycopg.errors.InsufficientPrivilege as exc:
            raise ProvisionError(
                f"the admin {self.admin_role} cannot act as {role} ({_error_text(exc)}); "
                "it needs ADMIN OPTION on the roles it made (CREATEROLE)"
            ) from None
        self._acting_as.add(role)

    def _ensure_database(
        self, database: str, login: str, *, read: bool = True, found: _Database | None = None
    ) -> list[str]:
        """Create the database (owned by ``login``, closed to PUBLIC) or repair its rights.

        ``read=False``: ``found`` is the database as this run just read it (None: missing)."""
        if read:
            found = self._databases([database]).get(database)
        if found is not None and found.owner != login:
            raise Refused(f"database {database} exists and belongs to {found.owner}")
        if found is not None and found.in_place(login):
            return []
        if found is None:
            if not self.can_create_db:
                raise Refused(
                    f"database {database} does not exist and the admin {self.admin_role} has no "
                    "CREATEDB; create it (owned by the login) or grant CREATEDB"
                )
            self._act_as(login)
            try:
                self._exec(
                    sql.SQL("CREATE DATABASE {} OWNER {}").format(
                        sql.Identifier(database), sql.Identifier(login)
                    )
                )
            except psycopg.errors.DuplicateDatabase:
                return self._ensure_database(database, login)
            note = f"database {database} created"
        elif not found.ours:
            return []  # a database meshtui did not create keeps its rights
        else:
            note = f"database {database}: PUBLIC's rights revoked again"
        self._act_as(login)
        db, owner = sql.Identifier(database), sql.Identifier(login)
        record = Record("database", self.scope.provider, self.scope.provision, login=login)
        with self.conn.transaction():
            self._exec(sql.SQL("REVOKE ALL ON DATABASE {} FROM PUBLIC").format(db))
            self._exec(sql.SQL("GRANT CONNECT, TEMPORARY ON DATABASE {} TO {}").format(db, owner))
            self._exec(
                sql.SQL("COMMENT ON DATABASE {} IS {}").format(db, sql.Literal(record.text()))
            )
        return [note]
