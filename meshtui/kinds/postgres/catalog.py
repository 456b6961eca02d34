"""What meshtui reads of PostgreSQL's catalog and writes in it: the marker and holding roles'
names, meshtui's typed :class:`Record` in a COMMENT, what a role or database is to the
adapter, and the SQL that reads them (one module of the adapter, split by job)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from meshtui.contracts.adapter import Refused, Wanted

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
