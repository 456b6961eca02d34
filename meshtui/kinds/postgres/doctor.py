"""doctor's check of a PostgreSQL provider's admin file (``Kind.doctor``), run on its node:
the conninfo logs in, and its role has the rights the built-in provisioner needs (CREATEROLE,
CREATEDB when consumers ask for databases, and what ``pin`` needs to rewrite pg_hba.conf)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

from meshtui.contracts.provider_files import read_admin
from meshtui.errors import MeshtuiError
from meshtui.kinds.postgres import ADMIN_EXAMPLE
from meshtui.protocol.messages import CheckProvider


def admin_rights(item: CheckProvider, path: Path, timeout: float) -> list[tuple[str, str]]:
    """What the admin lacks for the built-in provisioner, as (problem, fix) pairs."""
    try:
        conninfo = make_conninfo(
            read_admin(path),
            application_name="meshtui-doctor",
            connect_timeout=str(int(timeout)),
        )
    except MeshtuiError as exc:
        return [(str(exc), f"fix {path}")]
    except psycopg.Error:  # libpq may quote the text, which may hold a password
        return [
            (
                f"admin file {path} is not a valid libpq conninfo (its text is not shown)",
                f"write e.g. {ADMIN_EXAMPLE}",
            )
        ]
    try:
        with psycopg.connect(conninfo, autocommit=True) as conn:
            return _rights(conn, item)
    except psycopg.Error as exc:
        text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return [
            (
                f"the admin cannot log in to PostgreSQL: {text}",
                f"check the server is up and the conninfo in {path}",
            )
        ]


def _rights(conn: Any, item: CheckProvider) -> list[tuple[str, str]]:
    row = conn.execute(
        "SELECT rolsuper, rolcreaterole, rolcreatedb, rolname FROM pg_roles"
        " WHERE rolname = current_user"
    ).fetchone()
    superuser, createrole, createdb, role = bool(row[0]), bool(row[1]), bool(row[2]), str(row[3])
    out: list[tuple[str, str]] = []
    if not (superuser or createrole):
        out.append(
            (
                f"admin role {role} is neither a superuser nor has CREATEROLE",
                f"ALTER ROLE {role} CREATEROLE (or use a superuser admin)",
            )
        )
    if item["databases"] and not (superuser or createdb):
        out.append(
            (
                f"admin role {role} has no CREATEDB, and consumers ask for databases",
                f"ALTER ROLE {role} CREATEDB",
            )
        )
    if item["pin"] and not superuser:
        for what, query, grant in (
            ("see hba_file", "SHOW hba_file", f"GRANT pg_read_all_settings TO {role};"),
            (
                "read pg_hba_file_rules",
                "SELECT count(*) FROM pg_hba_file_rules",
                f"GRANT SELECT ON pg_hba_file_rules TO {role}; "
                f"GRANT EXECUTE ON FUNCTION pg_hba_file_rules() TO {role};",
            ),
        ):
            try:
                conn.execute(query)
            except psycopg.Error:
                out.append(
                    (
                        f"pin = true, but admin role {role} cannot {what}",
                        f"{grant} (or use a superuser admin)",
                    )
                )
                break
        can_reload = conn.execute(
            "SELECT has_function_privilege('pg_reload_conf()', 'EXECUTE')"
        ).fetchone()
        if not (can_reload and can_reload[0]):
            out.append(
                (
                    f"pin = true, but admin role {role} may not run pg_reload_conf()",
                    f"GRANT EXECUTE ON FUNCTION pg_reload_conf() TO {role}",
                )
            )
    if item["pin"]:
        out += _hba_writable(conn)
    return out


def _hba_writable(conn: Any) -> list[tuple[str, str]]:
    """Whether this agent may replace pg_hba.conf: a unit's ProtectSystem=strict makes /etc
    read-only unless ReadWritePaths= names the folder, and then every pin fails."""
    try:
        row = conn.execute("SHOW hba_file").fetchone()
    except psycopg.Error:
        return []  # told above
    folder = os.path.dirname(str(row[0])) if row else ""
    if not folder or not os.path.isdir(folder):
        return [
            (
                f"pin = true, but pg_hba.conf's folder {folder or '?'} is not on this node",
                "run the agent on the database's machine, or pin = false",
            )
        ]
    if os.access(folder, os.W_OK):
        return []
    why = "read-only file system" if _read_only(folder) else "no write permission"
    return [
        (
            f"pin = true, but this agent cannot write {folder} ({why})",
            f"add {folder} to the agent's ReadWritePaths= (systemctl edit meshtui-agent), "
            "or run it as root or as the server's user",
        )
    ]


def _read_only(folder: str) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        return False
