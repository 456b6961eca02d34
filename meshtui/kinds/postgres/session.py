"""The PostgreSQL adapter's session: one admin connection for one manifest scope, its
settings to lower, its kept-session freshness, and the notices it collects."""

from __future__ import annotations

from typing import Any, Self

import psycopg
from psycopg.conninfo import make_conninfo
from psycopg.errors import Diagnostic

from meshtui.contracts.adapter import Scope
from meshtui.errors import ProvisionError
from meshtui.kinds.postgres import ADMIN_EXAMPLE
from meshtui.kinds.postgres.catalog import (
    _INSPECT,
    _MANY_ROLES,
    _ONE_ROLE,
    _TRUSTED_GRANTOR,
    _error_text,
)
from meshtui.kinds.postgres.quiet import QuietPlan, quiet_plan
from meshtui.kinds.postgres.scram import (
    DEFAULT_ITERATIONS,
)


class _Session:
    """One admin session with one PostgreSQL, working for one manifest scope (the
    adapter's first part; :class:`~meshtui.kinds.postgres.adapter.PostgresAdapter`)."""

    create_decides = True
    """:meth:`create` reads the role and its database before it writes and says "unchanged"
    or refuses as the inspection would (:class:`~meshtui.contracts.adapter.Deciding`)."""

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
                f"write e.g. {ADMIN_EXAMPLE}"
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

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _on_notice(self, diag: Diagnostic) -> None:
        # copy now: a Diagnostic's fields are gone once the handler returns
        self._notices.append((diag.sqlstate, diag.message_primary))
