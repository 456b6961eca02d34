"""The Redis adapter: ACL users made true with ``ACL SETUSER``, the password only as its SHA-256.

What "made by meshtui" means lives in the ACL itself: every user of ours carries one *marker
selector*, ``(%R~meshtui:1:<provider>:<provision>:<values>:<rules>:<digest> -@all)``. A selector
with ``-@all`` grants nothing; it is stored with the user (ACL LIST, the aclfile, CONFIG
REWRITE), only an ACL admin can write it, and no hand-made user has one. It names the scope, a
hash of the values asked for, a hash of the user's whole ACL as Redis printed it right after
our write (flags, password hashes, keys, channels, commands, other selectors) and the digest of
the secret. On the next run one ``ACL USERS`` and one pipelined ``ACL GETUSER`` per user tell
"unchanged" without writing: a password set or a rule changed behind our back changes the
rules hash, a new secret changes the digest; either makes us rewrite (drift restored).

Every write is one ``ACL SETUSER <login> reset on #<sha256> ...`` pipelined with the read-back
``ACL GETUSER`` that proves Redis stores exactly our hash. The password itself never leaves
this process, so no server log, ``ACL LOG``, ``SLOWLOG``, ``MONITOR`` or aclfile can hold it.
Redis prints rules in its own normal form; the first write for a set of values learns that
form from the read-back (and rewrites only the marker), later ones predict it.

Removal is ``ACL DELUSER`` (Redis ends that user's connections); keys are never touched. A run
that changed anything ends with ``ACL SAVE`` (server started with an aclfile) or ``CONFIG
REWRITE`` (started with a config file); a server that has neither is named in every outcome.
The ownership check uses the state read by :meth:`RedisAdapter.inspect` in the same session
when it has it (one round trip per login instead of two).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.connection import parse_url
from redis.retry import Retry

from meshtui.crypto import secret_digest
from meshtui.errors import ProvisionError, UnsafeLoginError
from meshtui.provisioner.adapter import Change, Done, Held, Refused, Scope
from meshtui.provisioner.redis_acl import Rules, ValuesError, name_problem, rules_for

MARKER_HEAD = "meshtui:1:"
_MARKER = re.compile(
    r"%R~meshtui:1:(?P<provider>[^:\s]+):(?P<provision>[^:\s]+):(?P<values>[0-9a-f]{12}):"
    r"(?P<rules>[0-9a-f]{12}):(?P<digest>[0-9a-f]{64})"
)
_HASH_ARG = re.compile(r"#[0-9a-fA-F]{64}")
TIMEOUT_S = 10.0
SNAPSHOT_S = 30.0
_SNAPSHOT_LOCK = threading.Lock()
_SNAPSHOTS: dict[tuple[str, Scope], tuple[float, dict[str, User | None]]] = {}
"""What the last inspect of (server run id, scope) saw of each wanted login, for ``create``.

Every session of one reconcile (the harness may open more than one) checks ownership against
it instead of one more round trip per login. Each entry is used once and only for
``SNAPSHOT_S`` seconds; a user an ACL admin makes in between is overwritten by that run.
"""


def _command(target: Any, *args: str) -> Any:
    """``execute_command`` on a client or pipeline (redis-py leaves it untyped)."""
    return target.execute_command(*args)


@dataclass(frozen=True)
class Marker:
    """What our marker selector says about a user."""

    provider: str
    provision: str
    values: str
    rules: str
    digest: str


@dataclass(frozen=True)
class User:
    """One ``ACL GETUSER`` reply, with our marker (if any) taken out of the selectors."""

    name: str
    flags: tuple[str, ...]
    passwords: tuple[str, ...]
    commands: str
    keys: str
    channels: str
    selectors: tuple[tuple[str, ...], ...]
    marker: Marker | None

    def rules_hash(self) -> str:
        """A hash of everything in this user's ACL except our marker."""
        text = json.dumps(
            [
                sorted(self.flags),
                sorted(self.passwords),
                self.commands,
                self.keys,
                self.channels,
                [list(s) for s in self.selectors],
            ]
        )
        return hashlib.blake2b(text.encode(), digest_size=6).hexdigest()


def _pairs(reply: Sequence[Any]) -> dict[str, Any]:
    return {str(reply[i]): reply[i + 1] for i in range(0, len(reply) - 1, 2)}


def _text(value: Any) -> str:
    if isinstance(value, list):
        return " ".join(str(v) for v in value)
    return "" if value is None else str(value)


def parse_user(name: str, reply: Any) -> User | None:
    """A User from a raw RESP2 ``ACL GETUSER`` reply (None when the user does not exist)."""
    if not reply:
        return None
    data = _pairs(reply)
    marker: Marker | None = None
    selectors: list[tuple[str, ...]] = []
    for raw in data.get("selectors") or []:
        fields = _pairs(raw) if isinstance(raw, list) else dict(raw)
        found = _MARKER.fullmatch(_text(fields.get("keys")))
        if found and marker is None and _text(fields.get("commands")) == "-@all":
            marker = Marker(**found.groupdict())
            continue
        selectors.append(tuple(f"{k}={_text(v)}" for k, v in sorted(fields.items())))
    return User(
        name=name,
        flags=tuple(str(f) for f in data.get("flags") or []),
        passwords=tuple(str(p) for p in data.get("passwords") or []),
        commands=_text(data.get("commands")),
        keys=_text(data.get("keys")),
        channels=_text(data.get("channels")),
        selectors=tuple(selectors),
        marker=marker,
    )


def values_hash(rules: Rules) -> str:
    """A hash of the rules a consumer's values ask for (the marker records it)."""
    return hashlib.blake2b(json.dumps(rules.args()).encode(), digest_size=6).hexdigest()


def _why(exc: BaseException) -> str:
    """One line from a redis-py error, with any password hash argument blanked."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return _HASH_ARG.sub("#…", text)[:300]


def _admin_kwargs(url: str) -> dict[str, Any]:
    """redis-py connection arguments from the admin URL; the URL's text is never shown."""
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise ProvisionError(
            "the admin file is not a Redis URL (its text is not shown); write "
            "rediss://ADMIN:PASSWORD@HOST:PORT/0?ssl_ca_certs=/path/ca.pem or "
            "unix://ADMIN:PASSWORD@/run/redis/redis.sock"
        )
    try:
        kwargs: dict[str, Any] = dict(parse_url(url))  # type: ignore[no-untyped-call]
    except ValueError:
        raise ProvisionError(
            "the admin file is not a valid Redis URL (its text is not shown)"
        ) from None
    user = kwargs.get("username")
    if not user or user == "default" or not kwargs.get("password"):
        raise ProvisionError(
            "the admin Redis URL must name an admin ACL user with a password, never "
            "'default' (write rediss://ADMIN:PASSWORD@HOST:PORT)"
        )
    kwargs.setdefault("socket_timeout", TIMEOUT_S)
    kwargs.setdefault("socket_connect_timeout", TIMEOUT_S)
    return kwargs


class RedisAdapter:
    """One admin session with one Redis, working for one manifest scope."""

    def __init__(self, url: str, scope: Scope) -> None:
        self.scope = scope
        self._learned: dict[str, tuple[tuple[str, ...], str]] = {}  # commands -> normal form
        self.dirty = False
        try:
            pool = redis.ConnectionPool(
                **_admin_kwargs(url),
                decode_responses=True,
                protocol=2,
                retry=Retry(NoBackoff(), 0),  # a refused admin is said at once, not in seconds
            )
            self.client = redis.Redis(connection_pool=pool, single_connection_client=True)
        except (TypeError, redis.RedisError) as exc:
            raise ProvisionError(
                f"the admin Redis URL cannot be used ({type(exc).__name__}; its text is not shown)"
            ) from None
        try:
            self.admin = str(_command(self.client, "ACL", "WHOAMI"))
            self.categories = {str(c) for c in _command(self.client, "ACL", "CAT")}
            aclfile = _text(_command(self.client, "CONFIG", "GET", "aclfile")[1:])
            server = self.client.info("server")
            config_file = str(server.get("config_file") or "")
        except redis.RedisError as exc:
            self.client.close()
            raise ProvisionError(f"cannot use Redis as the admin user: {_why(exc)}") from None
        self._snapshot_key = (str(server.get("run_id")), scope)
        self.persist: tuple[str, ...] | None = (
            ("ACL", "SAVE") if aclfile else ("CONFIG", "REWRITE") if config_file else None
        )
        self.note = (
            ""
            if self.persist
            else "held in memory only: this Redis has no aclfile and no config file, so the "
            "login is lost when it restarts (start it with aclfile)"
        )

    # -- session -------------------------------------------------------------------------------

    def close(self) -> None:
        """Persist what this session changed (ACL SAVE or CONFIG REWRITE), then disconnect."""
        try:
            if self.dirty and self.persist is not None:
                self.dirty = False
                try:
                    _command(self.client, *self.persist)
                except redis.RedisError as exc:
                    raise ProvisionError(
                        f"{' '.join(self.persist)} failed: {_why(exc)}; the changes hold until "
                        "Redis restarts"
                    ) from None
        finally:
            self.client.close()

    def __enter__(self) -> RedisAdapter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _users(self, names: Sequence[str]) -> list[User | None]:
        pipe = self.client.pipeline(transaction=False)
        for name in names:
            _command(pipe, "ACL", "GETUSER", name)
        try:
            replies = pipe.execute()
        except redis.RedisError as exc:
            raise ProvisionError(f"cannot read the ACL users from Redis: {_why(exc)}") from None
        return [parse_user(n, r) for n, r in zip(names, replies, strict=True)]

    # -- reading -------------------------------------------------------------------------------

    def _foreign(self, user: User) -> str | None:
        """Why ``user`` is not ours for this scope, or None when it is."""
        if user.name == "default":
            return "Redis's default user; meshtui never touches it"
        if user.name == self.admin:
            return "the admin user of the provisioner; meshtui never touches it"
        if user.marker is None:
            return "a Redis user meshtui did not make"
        if (user.marker.provider, user.marker.provision) != (
            self.scope.provider,
            self.scope.provision,
        ):
            return f"made by meshtui for {user.marker.provision} at {user.marker.provider}"
        return None

    def inspect(self, wanted: Mapping[str, Mapping[str, str]]) -> dict[str, Held]:
        """Held for each wanted user that exists and each user of ours; no write."""
        try:
            names = [str(n) for n in _command(self.client, "ACL", "USERS")]
        except redis.RedisError as exc:
            raise ProvisionError(f"cannot list the ACL users of Redis: {_why(exc)}") from None
        users = {u.name: u for u in self._users(names) if u is not None}
        with _SNAPSHOT_LOCK:
            _SNAPSHOTS[self._snapshot_key] = (
                time.monotonic(),
                {name: users.get(name) for name in wanted},
            )
        out: dict[str, Held] = {}
        for name, user in users.items():
            foreign = self._foreign(user)
            if foreign is not None:
                if name in wanted:
                    out[name] = Held(name, ours=False, note=foreign)
                continue
            assert user.marker is not None
            intact = user.rules_hash() == user.marker.rules
            in_place = False
            if name in wanted:
                try:
                    in_place = intact and values_hash(rules_for(name, wanted[name])) == (
                        user.marker.values
                    )
                except ValuesError:
                    in_place = False
            out[name] = Held(
                name,
                ours=True,
                digest="blake2b:" + user.marker.digest if intact else None,
                in_place=in_place,
            )
        return out

    # -- create --------------------------------------------------------------------------------

    def _check(self, login: str) -> None:
        problem = name_problem(login)
        if problem is not None:
            raise UnsafeLoginError(f"login {login!r} {problem}")
        if login in ("default", self.admin):
            raise Refused(f"{login} is {'the default' if login == 'default' else 'the admin'} user")

    def _rules(self, login: str, values: Mapping[str, str]) -> Rules:
        try:
            rules = rules_for(login, values)
        except ValuesError as exc:
            raise Refused(str(exc)) from None
        unknown = sorted({c[2:] for c in rules.commands} - self.categories - {"all"})
        if unknown:
            raise Refused(f"this Redis has no ACL category {', '.join('@' + c for c in unknown)}")
        return rules

    def _marker(self, vhash: str, rules_hash: str, digest: str) -> str:
        return (
            f"%R~{MARKER_HEAD}{self.scope.provider}:{self.scope.provision}:"
            f"{vhash}:{rules_hash}:{digest.removeprefix('blake2b:')}"
        )

    def _predict(self, login: str, sha: str, rules: Rules) -> str:
        """The rules hash Redis will print for this write (its normal form learned per commands)."""
        wanted = " ".join(rules.commands)
        flags, commands = self._learned.get(wanted, (("on",), wanted))
        guess = User(
            login,
            flags,
            (sha,),
            commands,
            " ".join(f"~{k}" for k in rules.keys),
            " ".join(f"&{c}" for c in rules.channels),
            (),
            None,
        )
        return guess.rules_hash()

    def _write(self, login: str, args: Sequence[str], *, read_back: bool) -> User | None:
        """One ACL SETUSER, and with ``read_back`` its ACL GETUSER in the same round trip."""
        pipe = self.client.pipeline(transaction=False)
        _command(pipe, "ACL", "SETUSER", login, *args)
        if read_back:
            _command(pipe, "ACL", "GETUSER", login)
        try:
            replies = pipe.execute()
        except redis.ResponseError as exc:
            raise Refused(f"Redis refused the ACL rules: {_why(exc)}") from None
        except redis.RedisError as exc:
            raise ProvisionError(f"cannot write the ACL user {login}: {_why(exc)}") from None
        finally:
            self.dirty = True
        return parse_user(login, replies[1]) if read_back else None

    def create(self, login: str, password: str, values: Mapping[str, str]) -> Done:
        """Make ``login`` an ACL user of ours holding exactly ``password`` and its rules.

        Redis applies an ACL SETUSER whole or not at all, so its OK proves the hash is set. The
        first write for a set of commands is read back to learn how Redis prints them (and its
        marker rewritten if the prediction was off); later ones are one round trip each.
        """
        self._check(login)
        rules = self._rules(login, values)
        if "\x00" in password or not password:
            raise Refused("the secret is empty or holds a NUL character")
        secret = password.encode("utf-8")
        sha = hashlib.sha256(secret).hexdigest()
        digest = secret_digest(secret)
        del password, secret
        before = self._before(login)
        if before is not None:
            foreign = self._foreign(before)
            if foreign is not None:
                raise Refused(foreign)
        vhash = values_hash(rules)
        commands = " ".join(rules.commands)
        learned = commands in self._learned
        root = ["reset", "on", f"#{sha}", *rules.args()]
        marker = self._marker(vhash, self._predict(login, sha, rules), digest)
        back = self._write(login, [*root, f"({marker} -@all)"], read_back=not learned)
        if back is not None:
            self._learned[commands] = (back.flags, back.commands)
            if back.marker is not None and back.rules_hash() != back.marker.rules:
                marker = self._marker(vhash, back.rules_hash(), digest)
                back = self._write(login, ["clearselectors", f"({marker} -@all)"], read_back=True)
            if (
                back is None
                or back.passwords != (sha,)
                or back.marker is None
                or back.rules_hash() != back.marker.rules
            ):
                raise ProvisionError(f"Redis did not store the password of {login}")
        change: Change = "created" if before is None else "updated"
        return Done(change, self.note)

    def _before(self, login: str) -> User | None:
        """The user as this run's inspect saw it, else read now."""
        with _SNAPSHOT_LOCK:
            seen = _SNAPSHOTS.get(self._snapshot_key)
            if seen is not None and time.monotonic() - seen[0] < SNAPSHOT_S and login in seen[1]:
                return seen[1].pop(login)
        return self._users([login])[0]

    # -- remove --------------------------------------------------------------------------------

    def remove(self, login: str) -> Done:
        """ACL DELUSER a user of ours (Redis ends its connections); its keys are kept."""
        self._check(login)
        user = self._users([login])[0]
        if user is None:
            return Done("removed", "it was already gone")
        foreign = self._foreign(user)
        if foreign is not None:
            raise Refused(f"{foreign}; left alone")
        try:
            _command(self.client, "ACL", "DELUSER", login)
        except redis.RedisError as exc:
            raise ProvisionError(f"cannot delete the ACL user {login}: {_why(exc)}") from None
        self.dirty = True
        return Done("removed", "its keys are kept" + (f"; {self.note}" if self.note else ""))
