"""The PostgreSQL adapter's reads: which roles are meshtui's and what they hold, in one
SELECT (the inspection), and the roles and databases a write looks at first."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from meshtui.contracts.adapter import Held
from meshtui.kinds.postgres.catalog import (
    _DATABASES,
    _DIGEST_HEAD,
    DIGEST_LENGTH,
    KNOWN_VALUES,
    MARKER,
    Record,
    _Database,
    _foreign,
    _Role,
    _role_of,
    held_name,
)
from meshtui.kinds.postgres.quiet import plan_of, quiet_query
from meshtui.kinds.postgres.session import _Session


class _Reading(_Session):
    """The reads of the adapter (no write here)."""

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
                if record.login is not None and name not in wanted:
                    continue  # an alternate login: its owner, the pair's login, answers for it
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

    _alternate_owner: str | None = None
    """While an alternate login is written: its owner, named in the alternate's record."""

    def _record_text(self, digest: str) -> str:
        """The COMMENT of a login of ours: JSON, keys sorted, so its layout never varies (an
        alternate's names its owner)."""
        owner = self._alternate_owner
        return Record("login", self.scope.provider, self.scope.provision, digest, owner).text()

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
