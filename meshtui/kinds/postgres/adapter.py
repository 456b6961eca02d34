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
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg.errors import Diagnostic
from psycopg.pq import TransactionStatus

from meshtui.crypto import secret_digest
from meshtui.errors import ProvisionError, UnsafeLoginError
from meshtui.kinds.postgres.quiet import QuietPlan, plan_of, quiet_plan, quiet_query
from meshtui.kinds.postgres.scram import (
    DEFAULT_ITERATIONS,
    VerifiersAhead,
    is_plain_ascii,
    scram_verifier,
)
from meshtui.model import OutcomeName
from meshtui.provisioner.adapter import Change, Done, Held, Refused, Scope, Wanted, check_name

MARKER = "meshtui_provisioned"
HELD_PREFIX = "meshtui_held_"
KNOWN_VALUES = frozenset({"database"})
TRUNCATED = "42622"  # name_too_long: PostgreSQL truncates the identifier and only warns

# "Marked" means a member of the marker role by a grant of a superuser or of this very admin
# (the only roles that hold ADMIN OPTION on a marker this admin made). {roles} is pg_authid for
# a superuser; pg_roles (no xmin, no verifier) for an admin that is not one.
_TRUSTED_GRANTOR = "(g.rolsuper OR g.rolname = current_user)"

_INSPECT = """
WITH marker AS (SELECT oid FROM pg_roles WHERE rolname = %(marker)s)
SELECT a.rolname, {same_txn}, a.rolcanlogin, d.description,
       EXISTS (SELECT 1 FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.grantor
               WHERE m.member = a.oid AND m.roleid = (SELECT oid FROM marker)
               AND {trusted})
FROM {roles} a
LEFT JOIN pg_shdescription d ON d.objoid = a.oid AND d.classoid = 'pg_authid'::regclass
"""

# the marker's oid is a value of its own (not a join), so the membership is one index lookup
# by (member, role): joined, the planner hashed every member of the marker, 30 ms at 10,000
_ONE_ROLE = """
SELECT a.oid, coalesce({same_txn}, false), a.rolcanlogin, {no_password},
       d.description,
       EXISTS (SELECT 1 FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.grantor
               WHERE m.member = a.oid
                 AND m.roleid = (SELECT k.oid FROM pg_roles k WHERE k.rolname = %(marker)s)
                 AND {trusted})
FROM {roles} a
LEFT JOIN pg_shdescription d ON d.objoid = a.oid AND d.classoid = 'pg_authid'::regclass
WHERE a.rolname = %(name)s
"""

# ``_ONE_ROLE`` for many names: the membership as a LATERAL lookup per role, since for many
# roles the planner turned the EXISTS into a hash of every marker member (64 names among 10,000
# roles: 41-55 ms, now 10-13 ms, the same rows)
_MANY_ROLES = """
SELECT a.rolname, a.oid, coalesce({same_txn}, false), a.rolcanlogin, {no_password},
       d.description, k.marked IS NOT NULL
FROM {roles} a
LEFT JOIN pg_shdescription d ON d.objoid = a.oid AND d.classoid = 'pg_authid'::regclass
LEFT JOIN LATERAL (
    SELECT true AS marked FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.grantor
    WHERE m.member = a.oid
      AND m.roleid = (SELECT k.oid FROM pg_roles k WHERE k.rolname = %(marker)s)
      AND {trusted}
    LIMIT 1
) k ON true
WHERE a.rolname = ANY(%(names)s)
"""

# many logins' stored verifiers at once, by name; compared on this side like _READ_BACK
_READ_BACK_MANY = """
SELECT a.rolname, a.rolpassword, a.xmin = d.xmin
FROM pg_authid a
JOIN pg_shdescription d ON d.objoid = a.oid AND d.classoid = 'pg_authid'::regclass
WHERE a.rolname = ANY(%(names)s)
"""

_EXISTING = "SELECT rolname FROM pg_roles WHERE rolname = ANY(%s)"

LOGINS_PER_TRIP = 64
"""Logins of a batch written in one message (three statements each, some 25 KiB of text):
few round trips, yet small enough that the server starts on the first ones while the next
verifiers are computed."""

Batch = Sequence[Wanted]
"""Logins to make true together (:meth:`PostgresAdapter.create_many`)."""

_DIGEST_HEAD = '{"digest": "'
DIGEST_LENGTH = len("blake2b:") + 64

_EXISTS = "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = %s)"

# the stored verifier comes back as a result row (never logged); only the name is sent
_READ_BACK = """
SELECT a.rolpassword, a.xmin = d.xmin
FROM pg_authid a
JOIN pg_shdescription d ON d.objoid = a.oid AND d.classoid = 'pg_authid'::regclass
WHERE a.rolname = %(name)s
"""

# An admin that is not a superuser sends the verifier as a parameter of this function, so the
# statement that holds it runs nested (not in the statement log, not in pg_stat_statements'
# top level); an error inside is re-raised without the nested statement in its context.
_PASSWORD_FUNCTION = """
CREATE OR REPLACE FUNCTION pg_temp.meshtui_password(verb text, login text, verifier text)
RETURNS void LANGUAGE plpgsql AS $meshtui$
BEGIN
    IF verb NOT IN ('CREATE', 'ALTER') THEN
        RAISE EXCEPTION 'unknown verb';
    END IF;
    EXECUTE format('%s ROLE %I LOGIN PASSWORD %L VALID UNTIL %L',
                   verb, login, verifier, 'infinity');
EXCEPTION WHEN query_canceled OR others THEN
    RAISE EXCEPTION USING ERRCODE = SQLSTATE, MESSAGE = SQLERRM;
END
$meshtui$
"""

# Databases: owner, whether meshtui made it (its COMMENT), and whether PUBLIC may still enter
_DATABASES = """
SELECT datname, pg_get_userbyid(datdba), shobj_description(oid, 'pg_database'),
       has_database_privilege('public', oid, 'CONNECT')
       OR has_database_privilege('public', oid, 'TEMP')
FROM pg_database WHERE datname = ANY(%s)
"""

_DEPENDENT_DATABASES = """
SELECT DISTINCT db.datname, db.datallowconn
FROM pg_shdepend s JOIN pg_database db ON db.oid = s.dbid
WHERE s.refclassid = 'pg_authid'::regclass AND s.refobjid = %(oid)s
"""

_OWNS_ANYTHING = """
SELECT EXISTS (SELECT 1 FROM pg_shdepend
               WHERE refclassid = 'pg_authid'::regclass AND refobjid = %(oid)s AND deptype = 'o')
"""


class _MarkerNotReady(Exception):
    """The marker role is missing, or (16+) this admin may not grant it: :meth:`_prepare`."""


@dataclass(frozen=True)
class _Database:
    """One database a consumer asked for: its owner, whether meshtui made it, PUBLIC's rights."""

    owner: str
    ours: bool  # its COMMENT says meshtui created it
    public: bool  # PUBLIC may still CONNECT or create TEMP tables

    def in_place(self, login: str) -> bool:
        """Owned by ``login`` and, when meshtui made it, closed to everyone else."""
        return self.owner == login and not (self.ours and self.public)


@dataclass(frozen=True)
class _Role:
    """One row of ``_ONE_ROLE``: what the adapter must know before touching a role."""

    oid: int
    same_txn: bool  # pg_authid row and our record were written by one transaction
    can_login: bool
    no_password: bool
    record: Record | None
    marked: bool


def held_name(login: str) -> str:
    """The NOLOGIN role that keeps a removed login's objects until the login comes back."""
    return HELD_PREFIX + hashlib.blake2b(login.encode("utf-8"), digest_size=8).hexdigest()


@dataclass(frozen=True)
class Record:
    """meshtui's record in the COMMENT of a role or database it made: what it is (``what``, the
    JSON's ``meshtui`` key: ``login``, ``held``, ``database`` or ``marker``), for which provider
    and provision, the digest of a login's password, the login a holding role keeps. Written as
    JSON with sorted keys (and no absent field), so a login's record has one fixed layout."""

    what: str
    provider: str | None = None
    provision: str | None = None
    digest: str | None = None
    login: str | None = None

    def text(self) -> str:
        """The COMMENT's text."""
        fields = {
            "meshtui": self.what,
            "provider": self.provider,
            "provision": self.provision,
            "digest": self.digest,
            "login": self.login,
        }
        return json.dumps({k: v for k, v in fields.items() if v is not None}, sort_keys=True)

    @classmethod
    def read(cls, text: str | None) -> Record | None:
        """The record a COMMENT holds, or None when the comment is not one of ours (a field of
        another type than text reads as absent)."""
        if not text:
            return None
        try:
            value = json.loads(text)
        except ValueError:
            return None
        if not isinstance(value, dict) or "meshtui" not in value:
            return None

        def field(key: str) -> str | None:
            got = value.get(key)
            return got if isinstance(got, str) else None

        return cls(
            str(value["meshtui"]),
            field("provider"),
            field("provision"),
            field("digest"),
            field("login"),
        )


def _role_of(row: Any) -> _Role:
    """A ``_Role`` from the columns of ``_ONE_ROLE``."""
    oid, same_txn, can_login, no_password, comment, marked = row
    return _Role(
        int(oid),
        bool(same_txn),
        bool(can_login),
        bool(no_password),
        Record.read(comment),
        bool(marked),
    )


def _foreign(marked: bool, record: Record | None) -> str:
    """Why a role is not ours, the one wording of the inspection's notes and create's refusals."""
    if not marked:
        return "a role meshtui did not make"
    if record is not None and record.what == "login":
        return f"made by meshtui for {record.provision} at {record.provider}"
    return "made by meshtui for another provision or provider"


def _refusal(role: _Role) -> Refused:
    """Why a role is not ours, in the words of :meth:`PostgresAdapter.inspect`'s notes."""
    return Refused(_foreign(role.marked, role.record))


def _error_text(exc: BaseException) -> str:
    """A one-line reason from an exception; psycopg messages carry no statement text."""
    if isinstance(exc, psycopg.Error):
        diag = exc.diag
        text = diag.message_primary or str(exc).strip().splitlines()[0]
        state = diag.sqlstate or exc.sqlstate
        return f"{text} ({state})" if state else text
    return str(exc) or type(exc).__name__


class PostgresAdapter:
    """One admin session with one PostgreSQL, working for one manifest scope."""

    create_decides = True
    """:meth:`create` reads the role and its database before it writes and says "unchanged"
    or refuses as the inspection would (:class:`~meshtui.provisioner.adapter.Deciding`)."""

    def __init__(self, conninfo: str, scope: Scope) -> None:
        self.scope = scope
        self._conninfo = conninfo
        self._notices: list[tuple[str | None, str | None]] = []
        self._others: dict[str, psycopg.Connection[Any]] = {}
        self.conn = self._open(conninfo)
        self.conn.add_notice_handler(self._on_notice)
        row = self.conn.execute(
            "SELECT r.rolsuper, current_setting('server_version_num')::int,"
            " current_setting('scram_iterations', true), current_database(),"
            " r.rolcreaterole, r.rolcreatedb, r.rolname"
            " FROM pg_roles r WHERE r.rolname = current_user"
        ).fetchone()
        if row is None or not (row[0] or row[4]):
            self.close()
            raise ProvisionError(
                "the admin connection is neither a PostgreSQL superuser nor a role with "
                "CREATEROLE (use the postgres role over the local socket, or on a managed "
                "service a role with CREATEROLE, and CREATEDB when databases are asked for)"
            )
        self.superuser = bool(row[0])
        self.can_create_db = bool(row[0] or row[5])
        self.admin_role = str(row[6])
        self.server_version = int(row[1])
        self.iterations = int(row[2]) if row[2] else DEFAULT_ITERATIONS
        self._home_db = str(row[3])
        self._marker_ready = False
        self._function_ready = False
        self._acting_as: set[str] = set()
        self._stale = False  # the settings must be read again before the plan is used
        self._plan: QuietPlan = quiet_plan(
            self.conn, superuser=self.superuser, version=self.server_version
        )
        roles = "pg_authid" if self.superuser else "pg_roles"
        same_txn = "a.xmin = d.xmin" if self.superuser else "false"
        no_password = "a.rolpassword IS NULL" if self.superuser else "false"
        self._inspect_sql = _INSPECT.format(
            roles=roles, same_txn=same_txn, trusted=_TRUSTED_GRANTOR
        )
        self._one_role_sql = _ONE_ROLE.format(
            roles=roles, same_txn=same_txn, no_password=no_password, trusted=_TRUSTED_GRANTOR
        )
        # the marker is ready when it exists and, on 16+, this admin may grant it
        grantable = (
            "true"
            if self.superuser or self.server_version < 160000
            else "pg_has_role(r.oid, 'MEMBER WITH ADMIN OPTION')"
        )
        self._marker_sql = f"SELECT {grantable} FROM pg_roles r WHERE r.rolname = %s"
        self._many_roles_sql = _MANY_ROLES.format(
            roles=roles, same_txn=same_txn, no_password=no_password, trusted=_TRUSTED_GRANTOR
        )

    def refresh(self) -> None:
        """Before a kept session is used again: read the settings it must lower afresh and
        forget what it assumed (marker made, memberships taken); raises psycopg.Error when the
        session is no longer usable."""
        self.refresh_later()
        _ = self._quiet

    def refresh_later(self) -> None:
        """:meth:`refresh`, with the settings read in the next inspection's or :meth:`create`'s
        first round trip (or before anything else that needs them): a psycopg.Error then when
        the session is gone."""
        self._notices.clear()
        self._stale = True
        self._marker_ready = False
        self._acting_as = set()

    @property
    def stale(self) -> bool:
        """Whether nothing was read on this session since :meth:`refresh_later`."""
        return self._stale

    @property
    def _quiet(self) -> QuietPlan:
        """The settings this session lowers, read again first after :meth:`refresh_later`."""
        if self._stale:
            self._plan = quiet_plan(
                self.conn, superuser=self.superuser, version=self.server_version
            )
            self._stale = False
        return self._plan

    @property
    def limits(self) -> list[str]:
        """What this admin cannot do with the rights it has, for the report and ``doctor``."""
        if self.superuser:
            return []
        out = [
            "not a superuser: it cannot read pg_authid, so every password is set on every run "
            "(drift is repaired by the next run, never reported as unchanged)",
            "it ends a login's sessions only after making itself a member of that login",
        ]
        if not self.can_create_db:
            out.append("no CREATEDB: it cannot create the databases consumers ask for")
        if self._quiet.unlowered:
            out.append(
                "it cannot lower " + ", ".join(self._quiet.unlowered) + ", which would record "
                "the password's verifier; no password is set until a superuser turns that off "
                f"or runs GRANT SET ON PARAMETER <name> TO {self.admin_role}"
            )
        return out

    @staticmethod
    def _open(conninfo: str, **extra: Any) -> psycopg.Connection[Any]:
        try:
            full = make_conninfo(conninfo, application_name="meshtui-provisioner", **extra)
        except psycopg.Error:
            # libpq quotes pieces of the text it cannot parse, and the text may hold a password
            raise ProvisionError(
                "the admin file is not a valid libpq conninfo (its text is not shown); "
                "write e.g. host=/run/postgresql user=postgres dbname=postgres"
            ) from None
        try:
            return psycopg.connect(full, autocommit=True, connect_timeout=10)
        except psycopg.ProgrammingError:
            raise ProvisionError(
                "the admin file is not a valid libpq conninfo (its text is not shown)"
            ) from None
        except psycopg.Error as exc:
            raise ProvisionError(f"cannot reach PostgreSQL: {_error_text(exc)}") from None

    def close_others(self) -> None:
        """Close the sessions to other databases (kept only for one run: they would keep
        those databases from being dropped or renamed)."""
        for other in self._others.values():
            other.close()
        self._others.clear()

    def close(self) -> None:
        """Close every connection this adapter opened."""
        self.close_others()
        self.conn.close()

    def __enter__(self) -> PostgresAdapter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading -----------------------------------------------------------------------------

    def _in_scope(self, record: Record | None) -> bool:
        return (
            record is not None
            and record.provider == self.scope.provider
            and record.provision == self.scope.provision
        )

    def inspect(self, wanted: Mapping[str, Mapping[str, str]]) -> dict[str, Held]:
        """Held for each wanted login that exists and each login of ours: two SELECTs, no write."""
        # every role: cheaper than sending the wanted names (a cluster has few roles)
        return self._inspected(wanted, self._inspect_sql, {"marker": MARKER})

    def inspect_only(
        self, wanted: Mapping[str, Mapping[str, str]], logins: frozenset[str]
    ) -> dict[str, Held]:
        """:meth:`inspect` for ``logins`` alone (a delta's few among many): only their roles
        and their holding roles are read, so the answer does not grow with the cluster."""
        names = sorted(logins | {held_name(login) for login in logins})
        held = self._inspected(
            {k: v for k, v in wanted.items() if k in logins},
            self._inspect_sql + "WHERE a.rolname = ANY(%(names)s)\n",
            {"marker": MARKER, "names": names},
        )
        return {login: h for login, h in held.items() if login in logins}

    def _inspected(
        self, wanted: Mapping[str, Mapping[str, str]], query: str, params: Mapping[str, object]
    ) -> dict[str, Held]:
        """Held from the roles ``query`` reads (the layout of ``_INSPECT``) and the databases
        ``wanted`` asks for, both read in one round trip."""
        databases = sorted({v["database"] for v in wanted.values() if "database" in v})
        with self.conn.pipeline():
            settings = None
            if self._stale:  # a kept session's settings, read again in the same round trip
                settings = self.conn.execute(
                    *quiet_query(superuser=self.superuser, version=self.server_version)
                )
            read = self.conn.execute(query, params)
            dbs = self.conn.execute(_DATABASES, [databases]) if databases else None
            rows = read.fetchall()
            found = self._database_rows(dbs.fetchall()) if dbs is not None else {}
            if settings is not None:
                self._plan = plan_of(settings.fetchall(), superuser=self.superuser)
                self._stale = False
        held_for: set[str] = set()
        logins: list[tuple[str, bool, bool, Record | None, bool]] = []
        # our own records have one fixed layout (sort_keys): read those without a JSON parse
        tail = self._record_tail()
        size = len(_DIGEST_HEAD) + DIGEST_LENGTH + len(tail)
        for name, same_txn, can_login, comment, marked in rows:
            if not marked and name not in wanted:
                continue
            if (
                marked
                and comment is not None
                and len(comment) == size
                and comment.startswith(_DIGEST_HEAD)
                and comment.endswith(tail)
            ):
                digest = comment[len(_DIGEST_HEAD) : len(_DIGEST_HEAD) + DIGEST_LENGTH]
                record: Record | None = Record(
                    "login", self.scope.provider, self.scope.provision, digest
                )
            else:
                record = Record.read(comment)
            if marked and record is not None and record.what == "held":
                held_for.add(str(record.login))
            else:
                logins.append((name, bool(same_txn), can_login, record, marked))
        out: dict[str, Held] = {}
        for name, same_txn, can_login, record, marked in logins:
            if not marked:
                out[name] = Held(name, ours=False, note=_foreign(marked, record))
                continue
            if record is not None and record.what == "login":
                if not self._in_scope(record):
                    out[name] = Held(name, ours=False, note=_foreign(marked, record))
                    continue
                intact = can_login and same_txn
                digest = record.digest if intact else None
                values = wanted.get(name, {})
                in_place = name not in held_for and set(values) <= KNOWN_VALUES
                if "database" in values:
                    db = found.get(values["database"])
                    in_place = in_place and db is not None and db.in_place(name)
                out[name] = Held(
                    name,
                    ours=True,
                    digest=digest if isinstance(digest, str) else None,
                    in_place=in_place,
                    verified=self.superuser,
                )
            elif name in wanted:
                # marked as ours but its record is gone: ours to repair, never to remove
                out[name] = Held(name, ours=True)
        return out

    def _databases(self, names: list[str]) -> dict[str, _Database]:
        if not names:
            return {}
        return self._database_rows(self.conn.execute(_DATABASES, [names]).fetchall())

    def _database_rows(self, rows: Sequence[Any]) -> dict[str, _Database]:
        return {
            str(name): _Database(str(owner), self._database_record(comment), bool(public))
            for name, owner, comment, public in rows
        }

    @staticmethod
    def _database_record(comment: str | None) -> bool:
        record = Record.read(comment)
        return record is not None and record.what == "database"

    def _record_text(self, digest: str) -> str:
        """The COMMENT of a login of ours: JSON, keys sorted, so its layout never varies."""
        return Record("login", self.scope.provider, self.scope.provision, digest).text()

    def _record_tail(self) -> str:
        """What follows the digest in :meth:`_record_text`."""
        text = self._record_text("blake2b:" + "0" * 64)
        return text[len(_DIGEST_HEAD) + DIGEST_LENGTH :]

    def _roles(self, names: list[str]) -> dict[str, _Role]:
        """``_role`` for many names in one SELECT."""
        rows = self.conn.execute(self._many_roles_sql, {"marker": MARKER, "names": names})
        return {str(r[0]): _role_of(r[1:]) for r in rows.fetchall()}

    def _role(self, name: str) -> _Role | None:
        row = self.conn.execute(self._one_role_sql, {"marker": MARKER, "name": name}).fetchone()
        return None if row is None else _role_of(row)

    # -- helpers -----------------------------------------------------------------------------

    def _on_notice(self, diag: Diagnostic) -> None:
        # copy now: a Diagnostic's fields are gone once the handler returns
        self._notices.append((diag.sqlstate, diag.message_primary))

    def _check_notices(self) -> None:
        """Turn a truncation notice (42622) into an error; drop the other notices."""
        found = [message for state, message in self._notices if state == TRUNCATED]
        self._notices.clear()
        if found:
            raise UnsafeLoginError(f"PostgreSQL truncated a name: {found[0]}")

    def _exec(self, query: sql.Composed | sql.SQL | str, params: Any = None) -> None:
        self.conn.execute(query, params)
        self._check_notices()

    def _verifier(self, login: str, password: str) -> str:
        if "\x00" in password:
            raise Refused("the secret holds a NUL character, which PostgreSQL cannot take")
        if is_plain_ascii(password):
            return scram_verifier(password, iterations=self.iterations)
        # not printable ASCII: let libpq apply SASLprep exactly as the server will
        raw = self.conn.pgconn.encrypt_password(
            password.encode("utf-8"), login.encode("utf-8"), b"scram-sha-256"
        )
        return raw.decode("ascii")

    def _ensure_role(self, name: str, record: Record) -> None:
        """Create a NOLOGIN role of ours (the marker or a holding role) unless it exists."""
        existing = self._role(name)
        if existing is not None:
            if existing.can_login:
                raise ProvisionError(f"role {name} can log in; refusing to use it as meshtui's")
            if name != MARKER and not existing.marked:
                raise ProvisionError(f"role {name} exists and was not made by meshtui")
            return
        try:
            with self.conn.transaction():
                self._exec(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(name)))
                if name != MARKER:
                    self._grant_marker(name)
                self._exec(
                    sql.SQL("COMMENT ON ROLE {} IS {}").format(
                        sql.Identifier(name), sql.Literal(record.text())
                    )
                )
        except (psycopg.errors.UniqueViolation, psycopg.errors.DuplicateObject):
            pass  # made concurrently by another session

    def _check_marker_grantable(self) -> None:
        """On 16+, an admin that is not a superuser may mark a login only with ADMIN OPTION on
        the marker, which it has when it made the marker; say so when another admin did."""
        if self.superuser or self.server_version < 160000:
            return  # on 15, CREATEROLE may grant any role that is not a superuser's
        row = self.conn.execute(
            "SELECT pg_has_role(%s, 'MEMBER WITH ADMIN OPTION')", [MARKER]
        ).fetchone()
        if row != (True,):
            raise ProvisionError(
                f"role {MARKER} was made by another admin and {self.admin_role} has no ADMIN "
                f"OPTION on it (nor on the logins that admin made); keep one admin per server, "
                f"or have a superuser GRANT {MARKER} TO {self.admin_role} WITH ADMIN OPTION"
            )

    def _grant_marker(self, name: str) -> None:
        self._exec(self._marker_grant(name))

    def _marker_grant(self, name: str) -> sql.Composed:
        options = " WITH INHERIT FALSE, SET FALSE" if self.server_version >= 160000 else ""
        return sql.SQL("GRANT {} TO {}" + options).format(
            sql.Identifier(MARKER), sql.Identifier(name)
        )

    def _other(self, dbname: str) -> psycopg.Connection[Any]:
        """An admin connection to another database of the cluster, kept for this session."""
        if dbname == self._home_db:
            return self.conn
        if dbname not in self._others:
            self._others[dbname] = self._open(self._conninfo, dbname=dbname)
        return self._others[dbname]

    def _reassign_everywhere(self, source: str, target: str, oid: int) -> None:
        """REASSIGN OWNED + DROP OWNED in every database where ``source`` has something."""
        for dbname, allowed in self.conn.execute(_DEPENDENT_DATABASES, {"oid": oid}).fetchall():
            if not allowed:
                raise ProvisionError(f"database {dbname} accepts no connections")
            conn = self._other(dbname)
            with conn.transaction():
                conn.execute(
                    sql.SQL("REASSIGN OWNED BY {} TO {}").format(
                        sql.Identifier(source), sql.Identifier(target)
                    )
                )
                conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(source)))
        # shared objects (databases, tablespaces) are moved by REASSIGN from any database
        self.conn.execute(
            sql.SQL("REASSIGN OWNED BY {} TO {}").format(
                sql.Identifier(source), sql.Identifier(target)
            )
        )

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

    def _terminate(self, login: str) -> None:
        """End every session of ``login`` and wait until they are gone."""
        rows = self.conn.execute(
            "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE usename = %s",
            [login],
        ).fetchall()
        if not all(r[0] for r in rows):
            raise ProvisionError(f"sessions of {login} did not end within 5 s")
