"""The Redis adapter: ACL users made true with ``ACL SETUSER``, the password only as its SHA-256.

What "made by meshtui" means lives in the ACL itself: every user of ours carries one *marker
selector*, ``(%R~meshtui:1:<provider>:<provision>:<values>:<rules>:<digest> -@all)``. A selector
with ``-@all`` grants nothing; it is stored with the user (ACL LIST, the aclfile, CONFIG
REWRITE), only an ACL admin can write it, and no hand-made user has one. It names the scope, a
hash of the values asked for, a hash of the user's whole ACL as Redis prints it (flags, password
hashes, keys, channels, commands, other selectors: its ``ACL LIST`` line without the marker)
and the digest of the secret. On the next run one ``ACL LIST`` tells "unchanged" without
writing: a password set or a rule changed behind our back changes the rules hash, a new secret
changes the digest; either makes us rewrite (drift restored).

Every write is one ``ACL SETUSER <login> reset on #<sha256> ... (marker)``; Redis applies it
whole or not at all. The password itself never leaves this process, so no server log, ``ACL
LOG``, ``SLOWLOG``, ``MONITOR`` or aclfile can hold it. Redis prints rules in its own normal
form; the first write for a set of rules is read back to learn that form (and only its marker
rewritten if the prediction was off), later ones predict it. A batch (:meth:`RedisAdapter.
create_many`) sends its predicted writes in one pipeline, not a transaction: each ``ACL
SETUSER`` still stands or falls alone, so one refused login costs only itself (as a PostgreSQL
batch promises), and the whole batch is one round trip.

Removal is ``ACL DELUSER`` (Redis ends that user's connections); keys are never touched. A run
that changed anything ends with ``ACL SAVE`` (server started with an aclfile) or ``CONFIG
REWRITE`` (started with a config file); a server that has neither is named in every outcome.
A save that fails is said (ProvisionError) and leaves a mark in Redis itself, the user
``meshtui-unsaved`` (off, no rights, its own marker selector): the next reconcile sees it in
its ``ACL LIST`` and saves even if it changes nothing, so an unsaved change is never forgotten
(the mark lives exactly as long as the unsaved state: a restart loses both).
The ownership check uses the state read by :meth:`RedisAdapter.inspect` in the same reconcile
when it has it (see ``_SNAPSHOTS``), else one ``ACL GETUSER``.
"""

from __future__ import annotations

import hashlib
import json
import re
import ssl
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.connection import parse_url
from redis.retry import Retry

from meshtui.contracts.adapter import Capabilities, Change, Done, Held, Refused, Scope, Wanted
from meshtui.crypto import secret_digest
from meshtui.errors import ProvisionError, UnsafeLoginError
from meshtui.freeform import ForeignJson, LibraryKwargs
from meshtui.kinds.kind import ValuesError
from meshtui.kinds.redis.acl import Rules, name_problem, rules_for
from meshtui.kinds.redis.private import only_ca
from meshtui.model import OutcomeName

MARKER_HEAD = "meshtui:1:"
UNSAVED_USER = "meshtui-unsaved"
_UNSAVED_MARK = "%R~meshtui:unsaved"
_MARKER = re.compile(
    r"%R~meshtui:1:(?P<provider>[^:\s]+):(?P<provision>[^:\s]+):(?P<values>[0-9a-f]{12}):"
    r"(?P<rules>[0-9a-f]{12}):(?P<digest>[0-9a-f]{64})"
)
_HASH_ARG = re.compile(r"#[0-9a-fA-F]{64}")
TIMEOUT_S = 10.0
PIPELINE_SIZE = 1000  # writes per round trip in a batch (~400 bytes each)
SNAPSHOT_S = 30.0
_SNAPSHOT_LOCK = threading.Lock()
_SNAPSHOTS: dict[tuple[str, Scope], tuple[float, dict[str, User | None]]] = {}
"""What the last inspect of (server run id, scope) saw of each wanted login, for ``create``.

Every session of one reconcile (the harness may open more than one) checks ownership against
it instead of one more round trip per login. Each entry is used once and only for
``SNAPSHOT_S`` seconds; a user an ACL admin makes in between is overwritten by that run.
"""


def _form_key(rules: Rules) -> tuple[str, ...]:
    return (*rules.channels, "|", *rules.commands)


def _command(target: Any, *args: str) -> Any:
    """``execute_command`` on a client or pipeline (redis-py leaves it untyped)."""
    return target.execute_command(*args)


@dataclass(frozen=True)
class _Write:
    """One ``ACL SETUSER`` to send: its arguments hold the password only as its SHA-256."""

    login: str
    args: tuple[str, ...]
    change: Change
    predicted: bool  # the marker's rules hash is known; else read back and learn the form
    sha: str
    digest: str
    values_hash: str
    rules: Rules
    kept: tuple[str, ...] = ()  # an overlap's old password hash, held beside the new one


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
        """A hash of everything in this user's ACL except our marker, in its canonical form
        (:func:`canonical_commands`, empty keys or channels spelled out), so that Redis printing
        the same rules in another order (as 7.0 does after loading its aclfile) is no change."""
        text = json.dumps(
            [
                sorted(self.flags),
                sorted(self.passwords),
                canonical_commands(self.commands),
                self.keys or "resetkeys",
                self.channels or "resetchannels",
                [list(s) for s in self.selectors],
            ]
        )
        return hashlib.blake2b(text.encode(), digest_size=6).hexdigest()

    def printed_hash(self) -> str:
        """The rules hash over the rules exactly as Redis printed them: what a marker written
        before the canonical form records (accepted as unchanged, rewritten by the next write)."""
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

    def intact(self) -> bool:
        """Whether this user still holds the rules its marker recorded."""
        return self.marker is not None and self.marker.rules in (
            self.rules_hash(),
            self.printed_hash(),
        )

    def printed_only(self) -> bool:
        """Intact by a marker over the rules as printed, not their canonical form: its marker
        is rewritten by the next reconcile (:meth:`RedisAdapter.catch_up`)."""
        return (
            self.marker is not None
            and not self.selectors
            and self.marker.rules == self.printed_hash() != self.rules_hash()
        )


def canonical_commands(text: str) -> str:
    """A user's command rules with the single-command ones sorted by command.

    Redis 7.0 prints a user's rules as category rules (``-@all +@read``, in a fixed order) then
    the single commands and subcommands that differ from them (``-keys +memory|usage``) in the
    order of its command table, a hash table seeded anew at each start: the same user prints
    in another order after a restart. The category rules keep their order (it has meaning);
    the trailing single-command rules each name one command, so their order does not, and they
    are sorted (a command before its subcommands).
    """
    tokens = text.split()
    tail = len(tokens)
    while tail > 0 and "@" not in tokens[tail - 1]:
        tail -= 1
    singles = sorted(tokens[tail:], key=lambda t: (t[1:], t[0]))
    return " ".join(tokens[:tail] + singles)


def _pairs(reply: Sequence[Any]) -> ForeignJson:
    return {str(reply[i]): reply[i + 1] for i in range(0, len(reply) - 1, 2)}


def _text(value: Any) -> str:
    if isinstance(value, list):
        return " ".join(str(v) for v in value)
    return "" if value is None else str(value)


def parse_user(name: str, reply: Any) -> User | None:
    """A User from a raw RESP2 ``ACL GETUSER`` reply (None when the user does not exist).

    Used to tell who owns a user (its marker); its rules hash is not comparable with the one
    taken from ``ACL LIST`` (see :func:`parse_line`), which is what the marker records.
    """
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


def _selectors(tokens: Sequence[str]) -> tuple[list[str], list[tuple[str, ...]]]:
    """Root rule tokens and the selectors (``(...)`` groups) of an ACL LIST line."""
    root: list[str] = []
    selectors: list[tuple[str, ...]] = []
    current: list[str] | None = None
    for token in tokens:
        if current is None and token.startswith("("):
            current, token = [], token[1:]
        if current is None:
            root.append(token)
            continue
        if token.endswith(")"):
            current.append(token[:-1])
            selectors.append(tuple(current))
            current = None
        else:
            current.append(token)
    if current is not None:
        selectors.append(tuple(current))
    return root, selectors


def parse_line(line: str) -> User | None:
    """A User from one ``ACL LIST`` line: Redis's own text of everything the user may do.

    The rules hash is taken over this text (split into flags, password hashes, keys, channels
    and commands), so it covers whatever anyone changed, in whatever way Redis prints it.
    """
    tokens = line.split(" ")
    if len(tokens) < 2 or tokens[0] != "user":
        return None
    root, selectors = _selectors(tokens[2:])
    flags: list[str] = []
    passwords: list[str] = []
    keys: list[str] = []
    channels: list[str] = []
    commands: list[str] = []
    for token in root:
        if token.startswith("#"):
            passwords.append(token[1:])
        elif token.startswith(("~", "%")) or token in ("allkeys", "resetkeys"):
            keys.append(token)
        elif token.startswith("&") or token in ("allchannels", "resetchannels"):
            channels.append(token)
        elif token.startswith(("+", "-")):
            commands.append(token)
        else:
            flags.append(token)
    marker: Marker | None = None
    others: list[tuple[str, ...]] = []
    for selector in selectors:
        found = [t for t in selector if _MARKER.fullmatch(t)]
        rest = [t for t in selector if t not in found and t != "resetchannels"]
        if marker is None and len(found) == 1 and rest == ["-@all"]:
            hit = _MARKER.fullmatch(found[0])
            assert hit is not None
            marker = Marker(**hit.groupdict())
        else:
            others.append(selector)
    return User(
        name=tokens[1],
        flags=tuple(flags),
        passwords=tuple(passwords),
        commands=" ".join(commands),
        keys=" ".join(keys),
        channels=" ".join(channels),
        selectors=tuple(others),
        marker=marker,
    )


def kept_digest(digest: str) -> str:
    """The marker's digest of a user that holds a new secret and keeps its old one: never the
    new secret's own, so a plain write of that secret is not taken for "unchanged"."""
    return hashlib.blake2b(b"kept:" + digest.encode(), digest_size=32).hexdigest()


def values_hash(rules: Rules) -> str:
    """A hash of the rules a consumer's values ask for (the marker records it)."""
    return hashlib.blake2b(json.dumps(rules.args()).encode(), digest_size=6).hexdigest()


def _why(exc: BaseException) -> str:
    """One line from a redis-py error, with any password hash argument blanked."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return _HASH_ARG.sub("#…", text)[:300]


def _admin_kwargs(url: str) -> LibraryKwargs:
    """redis-py connection arguments from the admin URL; the URL's text is never shown."""
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise ProvisionError(
            "the admin file is not a Redis URL (its text is not shown); write "
            "rediss://ADMIN:PASSWORD@HOST:PORT/0?ssl_ca_certs=/path/ca.pem or "
            "unix://ADMIN:PASSWORD@/run/redis/redis.sock"
        )
    try:
        kwargs: LibraryKwargs = dict(parse_url(url))  # type: ignore[no-untyped-call]
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
    try:  # trust the URL's CA alone, with one context per CA file (not the system's store)
        return only_ca(kwargs)
    except (OSError, ssl.SSLError) as exc:
        raise ProvisionError(
            f"the CA file the admin Redis URL names (ssl_ca_certs) cannot be used: "
            f"{type(exc).__name__}; its text is not shown"
        ) from None


class RedisAdapter:
    """One admin session with one Redis, working for one manifest scope."""

    capabilities = Capabilities(
        batching=True, catching_up=True, live_sessions=True, overlapping=True
    )

    def describe(self, exc: BaseException) -> str | None:
        """None: Redis's errors keep their own text (the harness shows it with its type)."""
        return None

    def __init__(self, url: str, scope: Scope) -> None:
        self.scope = scope
        # how Redis prints rules: (channels, commands asked) -> (flags, channels, commands)
        self._learned: dict[tuple[str, ...], tuple[tuple[str, ...], str, str]] = {}
        self._keys_verbatim = False
        self.dirty = False
        self._unsaved = False  # inspect saw the mark of an earlier run's failed save
        self._printed_only: list[User] = []  # inspect saw markers over the rules as printed
        self._written: set[str] = set()  # the users this session wrote
        try:
            pool = redis.ConnectionPool(
                **_admin_kwargs(url),
                decode_responses=True,
                protocol=2,
                max_connections=1,  # commands and pipelines share the one session
                retry=Retry(NoBackoff(), 0),  # a refused admin is said at once, not in seconds
            )
            # checks the arguments the URL gave (TypeError); sends nothing, takes no pool slot
            pool.connection_class(**pool.connection_kwargs)
        except (TypeError, ValueError, redis.RedisError) as exc:
            raise ProvisionError(
                f"the admin Redis URL cannot be used ({type(exc).__name__}; its text is not "
                "shown): rediss:// takes ssl_ca_certs, redis:// and unix:// do not"
            ) from None
        self.client = redis.Redis(connection_pool=pool)
        try:
            self.admin = str(_command(self.client, "ACL", "WHOAMI"))
            self.categories = {str(c) for c in _command(self.client, "ACL", "CAT")}
            aclfile = _text(_command(self.client, "CONFIG", "GET", "aclfile")[1:])
            server = self.client.info("server")
            config_file = str(server.get("config_file") or "")
        except redis.RedisError as exc:
            pool.disconnect()
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

    def catch_up(self) -> None:
        """Make this run persist even if it changes nothing, when an earlier run's save failed
        (its mark was in the inspect's ACL LIST), and give a marker over the rules as printed
        its canonical hash (the marker alone). Called by reconcile, never by a read-only
        inspect."""
        if self._unsaved and self.persist is not None:
            self.dirty = True
        for user in self._printed_only:
            assert user.marker is not None
            if user.name in self._written:  # this run wrote it whole, with a new marker
                continue
            marker = self._marker(user.marker.values, user.rules_hash(), user.marker.digest)
            self._write(user.name, ["clearselectors", f"({marker} -@all)"])
        self._printed_only = []

    def close(self) -> None:
        """Persist what this session changed (ACL SAVE or CONFIG REWRITE), then disconnect.

        The mark of an earlier failed save is deleted first, so the file saved holds no mark;
        a save that fails leaves the mark (again) for the next run.
        """
        try:
            if self.dirty and self.persist is not None:
                self.dirty = False
                try:
                    if self._unsaved:
                        _command(self.client, "ACL", "DELUSER", UNSAVED_USER)
                    _command(self.client, *self.persist)
                except redis.RedisError as exc:
                    retried = self._mark_unsaved()
                    raise ProvisionError(
                        f"{' '.join(self.persist)} failed: {_why(exc)}; the changes hold until "
                        f"Redis restarts{retried}"
                    ) from None
        finally:
            self.client.close()
            self.client.connection_pool.disconnect()

    def _mark_unsaved(self) -> str:
        """Leave the mark of a failed save (a user that is off and may do nothing); what the
        error then says about the next run.

        A user of that name that does not carry the mark's selector is someone else's: it is
        never reset, and the error says why the next run may not retry the save.
        """
        try:
            held = _command(self.client, "ACL", "GETUSER", UNSAVED_USER)
            user = parse_user(UNSAVED_USER, held)
            if user is not None and not any(f"keys={_UNSAVED_MARK}" in s for s in user.selectors):
                return (
                    f"; a Redis user named {UNSAVED_USER} that meshtui did not make is in the "
                    "way of the mark that makes the next run retry the save, so it was left "
                    "alone: rename it, or run the provisioner again once the save can work"
                )
            _command(
                self.client, "ACL", "SETUSER", UNSAVED_USER, "reset", "off",
                f"({_UNSAVED_MARK} -@all)",
            )  # fmt: skip
        except (redis.RedisError, ProvisionError):
            return ""
        return ", and the next run retries the save"

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
            lines = [str(line) for line in _command(self.client, "ACL", "LIST")]
        except redis.RedisError as exc:
            raise ProvisionError(f"cannot list the ACL users of Redis: {_why(exc)}") from None
        users = {u.name: u for u in map(parse_line, lines) if u is not None}
        mark = users.pop(UNSAVED_USER, None)
        self._unsaved = mark is not None and any(_UNSAVED_MARK in s for s in mark.selectors)
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
            intact = user.intact()
            if name in wanted and user.printed_only():
                self._printed_only.append(user)
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
        if login == UNSAVED_USER:
            raise Refused(f"{login} is the mark meshtui leaves when an ACL SAVE failed")

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

    def _predict(self, login: str, shas: tuple[str, ...], rules: Rules) -> str | None:
        """The rules hash Redis will print for this write, or None when not yet learned.

        Redis prints flags, channels and commands in its own normal form, the same for every
        user with the same rules; keys it prints as given (checked once per session).
        """
        form = self._learned.get(_form_key(rules))
        if form is None or not self._keys_verbatim:
            return None
        flags, channels, commands = form
        keys = " ".join(f"~{k}" for k in rules.keys)
        return User(login, flags, shas, commands, keys, channels, (), None).rules_hash()

    def _read_back(self, login: str) -> User | None:
        try:
            lines = _command(self.client, "ACL", "LIST")
        except redis.RedisError as exc:
            raise ProvisionError(f"cannot read back the ACL user {login}: {_why(exc)}") from None
        head = f"user {login} "
        return next((parse_line(str(x)) for x in lines if str(x).startswith(head)), None)

    def _write(self, login: str, args: Sequence[str]) -> None:
        """One ACL SETUSER; Redis applies it whole or not at all."""
        self._written.add(login)
        try:
            _command(self.client, "ACL", "SETUSER", login, *args)
        except redis.ResponseError as exc:
            raise Refused(f"Redis refused the ACL rules: {_why(exc)}") from None
        except redis.RedisError as exc:
            raise ProvisionError(f"cannot write the ACL user {login}: {_why(exc)}") from None
        finally:
            self.dirty = True

    def _prepare(
        self, login: str, password: str, values: Mapping[str, str], *, keeping: bool = False
    ) -> _Write:
        """Check ``login`` is ours (or free) and its values, and build its one write.
        ``keeping``: the one other password the user holds now stays beside the new one (an
        overlap), and the marker's digest is not the new secret's alone, so the next plain
        ``create`` of the same secret rewrites the user with the new password only."""
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
        kept: tuple[str, ...] = ()
        if keeping and before is not None:
            kept = tuple(p for p in before.passwords if p != sha)
            if len(kept) > 1:
                raise Refused(
                    f"{login} holds {len(kept)} other passwords; an overlap keeps one, so "
                    "meshtui will not choose: a plain rotation (swap) sets it right"
                )
        if keeping:
            digest = kept_digest(digest)
        vhash = values_hash(rules)
        predicted = self._predict(login, (sha, *kept), rules)
        marker = self._marker(vhash, predicted or "0" * 12, digest)
        change: Change = OutcomeName.CREATED if before is None else OutcomeName.UPDATED
        hashes = (f"#{sha}", *(f"#{old}" for old in kept))
        args = ("reset", "on", *hashes, *rules.args(), f"({marker} -@all)")
        return _Write(login, args, change, predicted is not None, sha, digest, vhash, rules, kept)

    def _learn(self, write: _Write) -> None:
        """Read back a write whose marker was a guess, learn Redis's form of its rules, and
        rewrite the marker alone if the guess was off."""
        login, rules = write.login, write.rules
        back = self._read_back(login)
        if back is None or back.marker is None:
            raise ProvisionError(f"Redis did not store the ACL user {login}")
        self._learned[_form_key(rules)] = (back.flags, back.channels, back.commands)
        self._keys_verbatim = back.keys == " ".join(f"~{k}" for k in rules.keys)
        if back.rules_hash() != back.marker.rules:
            marker = self._marker(write.values_hash, back.rules_hash(), write.digest)
            self._write(login, ["clearselectors", f"({marker} -@all)"])
            back = self._read_back(login)
        if (
            back is None
            or sorted(back.passwords) != sorted((write.sha, *write.kept))
            or back.marker is None
            or back.rules_hash() != back.marker.rules
        ):
            raise ProvisionError(f"Redis did not store the password of {login}")

    def create(self, login: str, password: str, values: Mapping[str, str]) -> Done:
        """Make ``login`` an ACL user of ours holding exactly ``password`` and its rules.

        Redis applies an ACL SETUSER whole or not at all, so its OK proves the hash is set.
        Until this session has learned how Redis prints these rules, the write is read back
        (ACL LIST) and, if the marker's rules hash was off, the marker alone rewritten; later
        writes are one round trip each.
        """
        write = self._prepare(login, password, values)
        del password
        self._write(login, write.args)
        if not write.predicted:
            self._learn(write)
        return Done(write.change, self.note)

    def create_keeping(self, login: str, password: str, values: Mapping[str, str]) -> Done:
        """:meth:`create`, keeping the one password ``login`` holds now accepted beside the
        new one (an overlap's first step): ``ACL SETUSER reset on #new #old ...`` in one write,
        so a retry sets the same two and the plain ``create`` that ends the overlap sets the
        new one alone (no ``<old`` that errors when the old is gone already)."""
        write = self._prepare(login, password, values, keeping=True)
        del password
        self._write(login, write.args)
        if not write.predicted:
            self._learn(write)
        return Done(write.change, self.note)

    def create_many(self, batch: Sequence[Wanted]) -> dict[str, Done | Exception]:
        """:meth:`create` for many logins, their writes in one pipeline (not a transaction).

        Each ``ACL SETUSER`` stands or falls alone (Redis applies each whole or not at all), so
        a login Redis refuses costs only itself, as in a PostgreSQL batch. The first write of
        each new set of rules goes alone (it is read back to learn Redis's form); the rest go
        ``PIPELINE_SIZE`` a round trip. Returns, per login, what :meth:`create` returned or
        raised.
        """
        out: dict[str, Done | Exception] = {}
        writes: list[_Write] = []
        for wanted in batch:
            try:
                write = self._prepare(wanted.login, wanted.password, wanted.values)
                if not write.predicted:
                    self._write(write.login, write.args)
                    self._learn(write)
                    out[write.login] = Done(write.change, self.note)
                else:
                    writes.append(write)
            except (ProvisionError, UnsafeLoginError) as exc:
                out[wanted.login] = exc
        for first in range(0, len(writes), PIPELINE_SIZE):
            out.update(self._write_many(writes[first : first + PIPELINE_SIZE]))
        return out

    def _write_many(self, writes: Sequence[_Write]) -> dict[str, Done | Exception]:
        """One pipeline of ACL SETUSERs; each reply is its own login's outcome."""
        pipe = self.client.pipeline(transaction=False)
        for write in writes:
            _command(pipe, "ACL", "SETUSER", write.login, *write.args)
            self._written.add(write.login)
        self.dirty = True
        try:
            replies = pipe.execute(raise_on_error=False)
        except redis.RedisError as exc:  # the session broke: which writes landed is unknown
            return {
                w.login: ProvisionError(f"cannot write the ACL user {w.login}: {_why(exc)}")
                for w in writes
            }
        finally:
            pipe.reset()
        out: dict[str, Done | Exception] = {}
        for write, reply in zip(writes, replies, strict=True):
            if isinstance(reply, redis.ResponseError):
                out[write.login] = Refused(f"Redis refused the ACL rules: {_why(reply)}")
            elif isinstance(reply, Exception):
                out[write.login] = ProvisionError(
                    f"cannot write the ACL user {write.login}: {_why(reply)}"
                )
            else:
                out[write.login] = Done(write.change, self.note)
        return out

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
            return Done(OutcomeName.REMOVED, "it was already gone")
        foreign = self._foreign(user)
        if foreign is not None:
            raise Refused(f"{foreign}; left alone")
        try:
            _command(self.client, "ACL", "DELUSER", login)
        except redis.RedisError as exc:
            raise ProvisionError(f"cannot delete the ACL user {login}: {_why(exc)}") from None
        self.dirty = True
        return Done(
            OutcomeName.REMOVED, "its keys are kept" + (f"; {self.note}" if self.note else "")
        )

    # -- sessions ----------------------------------------------------------------------------

    def mark_sessions(self, login: str) -> str:
        """The newest connection's id now: Redis numbers connections in the order they are
        accepted, so one of the login's with an id up to it was open before this moment."""
        return str(max((cid for cid, _ in self._clients(login)), default=0))

    def end_sessions(self, login: str, digest: str, before: str | None = None) -> int:
        """CLIENT KILL USER: close every connection authenticated as ``login`` (Redis does not
        record which of a user's passwords a connection used: asked when the new one is set,
        every connection of the user authenticated with the old); how many. With ``before``,
        only those numbered up to that mark, each by its id."""
        del digest
        self._check(login)
        try:
            if not before:
                return int(_command(self.client, "CLIENT", "KILL", "USER", login, "SKIPME", "yes"))
            ended = 0
            for cid in self._old_clients(login, before):
                try:
                    ended += int(_command(self.client, "CLIENT", "KILL", "ID", str(cid)))
                except redis.ResponseError:  # it closed since it was listed
                    continue
            return ended
        except redis.RedisError as exc:
            raise ProvisionError(f"cannot end the connections of {login}: {_why(exc)}") from None

    def count_sessions(self, login: str, digest: str, before: str | None = None) -> int:
        """How many connections are authenticated as ``login`` (CLIENT LIST's ``user=``); with
        ``before``, of those numbered up to that mark."""
        del digest
        self._check(login)
        if before:
            return len(self._old_clients(login, before))
        return sum(1 for _, user in self._clients(login) if user == login)

    def _old_clients(self, login: str, before: str) -> list[int]:
        """The ids of ``login``'s connections numbered up to the mark ``before``."""
        if not before.isdigit():
            raise ProvisionError(f"{before!r} is not a mark of Redis connections")
        mark = int(before)
        return [cid for cid, user in self._clients(login) if user == login and cid <= mark]

    def _clients(self, login: str) -> list[tuple[int, str]]:
        """Every connection's (id, user) (CLIENT LIST; this session's own is the admin's)."""
        self._check(login)
        try:
            listing = _text(_command(self.client, "CLIENT", "LIST"))
        except redis.RedisError as exc:
            raise ProvisionError(f"cannot list the connections of {login}: {_why(exc)}") from None
        out: list[tuple[int, str]] = []
        for line in listing.splitlines():
            fields = dict(f.split("=", 1) for f in line.split(" ") if "=" in f)
            if fields.get("id", "").isdigit():
                out.append((int(fields["id"]), fields.get("user", "")))
        return out


def admin_session(url: str, provider: str) -> RedisAdapter:
    """An admin session opened as the provisioner opens one (same URL checks, same TLS), for
    doctor's check of the admin file; nothing is written through it."""
    return RedisAdapter(url, Scope(provider=provider, provision="doctor"))
