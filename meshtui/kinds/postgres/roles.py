"""The PostgreSQL adapter's role work shared by create and remove: statements with their
notices checked, verifiers, the marker and holding roles, and reassigning what a role owns."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from meshtui.contracts.adapter import Refused
from meshtui.errors import ProvisionError, UnsafeLoginError
from meshtui.kinds.postgres.catalog import (
    _DEPENDENT_DATABASES,
    MARKER,
    TRUNCATED,
    Record,
)
from meshtui.kinds.postgres.reading import _Reading
from meshtui.kinds.postgres.scram import (
    is_plain_ascii,
    scram_verifier,
)


class _Roles(_Reading):
    """Making and moving roles (the marker, holding roles, what a role owns)."""

    # -- helpers -----------------------------------------------------------------------------

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
