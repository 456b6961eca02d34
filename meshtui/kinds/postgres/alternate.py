"""The PostgreSQL adapter's alternating logins: an overlap rotation on a server whose role holds
one password (:class:`~meshtui.contracts.adapter.Alternating`).

A pair declared ``rotation = "overlap"`` has three roles: its owner (the pair's login, NOLOGIN
once it alternates, owning the pair's database and objects) and two login roles
``<owner>_a``/``<owner>_b``, each a member of the owner with ``ALTER ROLE ... SET role =
<owner>``. That setting makes every session of either login act as the owner from its first
statement, so a table either creates is the owner's and the other login uses it after the next
rotation. Membership alone would not: a login creates objects as itself, and the other login
gets "permission denied" on them (default privileges would only cover the object types and
schemas they name, and only for objects created after them). An alternate's record names its
owner, so the inspection answers for the pair by its owner alone and never takes an alternate
for a login to remove.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from psycopg import sql

from meshtui.contracts.adapter import Done, Held, Refused, alternate_login, check_name
from meshtui.crypto import secret_digest
from meshtui.kinds.postgres.catalog import Record, _refusal, _Role
from meshtui.kinds.postgres.create import _Creating
from meshtui.model import OutcomeName
from meshtui.protocol.manifest import ALTERNATES

_CONFIG = "SELECT rolconfig, pg_has_role(%s, %s, 'MEMBER') FROM pg_roles WHERE rolname = %s"


class _Alternates(_Creating):
    """Making an alternating pair's owner and its two logins true, and finding them again."""

    def create_alternate(
        self, owner: str, alt: str, password: str, values: Mapping[str, str], keep: bool
    ) -> Done:
        """Make ``alternate_login(owner, alt)`` hold ``password``, acting as ``owner`` (made a
        NOLOGIN role of ours if missing; a login of ours from before the pair alternated is
        taken as it is, with what it owns); without ``keep``, every other login of the pair
        is left NOLOGIN with no password, but one that holds this very credential (a login
        from before the pair alternated, given ``alt`` with no new credential: the consumer
        may still log in with it until the next overlap). A retried call writes nothing."""
        check_name(owner)
        login = alternate_login(owner, alt)
        other = alternate_login(owner, ALTERNATES[1 - ALTERNATES.index(alt)])
        database = self._wanted_database(values)
        digest = secret_digest(password.encode("utf-8"))
        held = self._role(owner)
        if held is None:
            self._prepare()
            self._ensure_role(owner, Record("login", self.scope.provider, self.scope.provision))
        elif not self._ours_or_repairable(held) or (held.record and held.record.login):
            raise _refusal(held)
        if keep:
            current = self._role(login)
            if current is not None and current.can_login and not _holds(current, digest):
                raise Refused(
                    f"{login} still logs in with another credential: an overlap of {owner} is "
                    "open (its last step has not run); nothing was changed"
                )
        self._alternate_owner = owner
        try:
            done = self.create(login, password, {})
        finally:
            self._alternate_owner = None
        notes = [done.reason] if done.reason else []
        changed = done.outcome != OutcomeName.UNCHANGED
        if self._act_as_owner(login, owner):
            changed = True
        if database is not None:
            said = self._ensure_database(database, owner)
            notes += said
            changed = changed or bool(said)
        if not keep:
            for name in (other, owner):
                role = self._role(name)
                if role is None or _holds(role, digest):
                    continue  # the same credential is not another one: nothing to retire
                if self._lock(name, role, owner):
                    notes.append(f"{name} can no longer log in")
                    changed = True
        if not changed:
            return Done(OutcomeName.UNCHANGED)
        outcome = done.outcome if done.outcome != OutcomeName.UNCHANGED else OutcomeName.UPDATED
        return Done(outcome, "; ".join(notes))

    def inspect_alternates(
        self, wanted: Mapping[str, tuple[str, Mapping[str, str]]]
    ) -> dict[str, Held]:
        """See :meth:`~meshtui.contracts.adapter.Alternating.inspect_alternates`: the owners
        read as :meth:`inspect_only` reads them (ours, their database in place), each with the
        digest its current alternate holds intact (it logs in, and its password and record
        were written by one transaction); two reads."""
        owners = {owner: values for owner, (_alt, values) in wanted.items()}
        held = self.inspect_only(owners, frozenset(owners))
        current = {alternate_login(owner, alt): owner for owner, (alt, _v) in wanted.items()}
        roles = self._roles(sorted(current))
        out: dict[str, Held] = {}
        for owner, have in held.items():
            if not have.ours:
                out[owner] = have
                continue
            login = alternate_login(owner, wanted[owner][0])
            role = roles.get(login)
            record = role.record if role is not None else None
            intact = (
                role is not None
                and role.can_login
                and role.same_txn
                and record is not None
                and record.login == owner
                and self._in_scope(record)
            )
            digest = record.digest if intact and record is not None else None
            out[owner] = replace(have, digest=digest if isinstance(digest, str) else None)
        return out

    def _act_as_owner(self, login: str, owner: str) -> bool:
        """Make ``login`` a member of ``owner`` whose sessions start as ``owner``; whether
        anything was written (nothing when both were already true)."""
        row = self.conn.execute(_CONFIG, [login, owner, login]).fetchone()
        config = list(row[0] or []) if row else []
        member = bool(row and row[1])
        setting = f"role={owner}"
        if member and setting in config:
            return False
        with self.conn.transaction():
            if not member:
                self._act_as(owner)  # an admin that is not a superuser grants what it holds
                self._exec(
                    sql.SQL("GRANT {} TO {}").format(sql.Identifier(owner), sql.Identifier(login))
                )
            if setting not in config:
                self._exec(
                    sql.SQL("ALTER ROLE {} SET role = {}").format(
                        sql.Identifier(login), sql.Literal(owner)
                    )
                )
        return True

    def _lock(self, name: str, role: _Role, owner: str) -> bool:
        """Leave ``name`` (a login of ``owner``'s pair) unable to log in, with no password;
        whether it could before. A role of another's is refused, never touched."""
        record = role.record
        ours = role.marked and record is not None and self._in_scope(record)
        if not ours or (record is not None and record.login not in (None, owner)):
            raise Refused(f"role {name} is not a login of {owner}'s pair; left alone")
        if not role.can_login and role.no_password:
            return False
        with self.conn.transaction():
            self._exec(sql.SQL("ALTER ROLE {} NOLOGIN PASSWORD NULL").format(sql.Identifier(name)))
        return True

    def _pair_logins(self, login: str, digest: str) -> list[str]:
        """The logins whose sessions are on another credential than ``digest``'s: ``login``
        itself, and its alternates but the one that logs in with ``digest``."""
        names = [alternate_login(login, alt) for alt in ALTERNATES]
        out = [login]
        for name, role in sorted(self._roles(names).items()):
            record = role.record
            if record is None or record.login != login or not self._in_scope(record):
                continue
            if not (role.can_login and record.digest == digest):
                out.append(name)
        return out

    def _alternates_of(self, owner: str) -> list[str]:
        """The alternate logins of ``owner`` that exist and are ours."""
        names = [alternate_login(owner, alt) for alt in ALTERNATES]
        return sorted(
            name
            for name, role in self._roles(names).items()
            if role.marked
            and role.record is not None
            and role.record.login == owner
            and self._in_scope(role.record)
        )


def _holds(role: _Role, digest: str) -> bool:
    """``role`` logs in with the credential of ``digest``, as its record says (an admin that
    is not a superuser cannot read the row's transaction to prove it further)."""
    record = role.record
    return role.can_login and record is not None and record.digest == digest
