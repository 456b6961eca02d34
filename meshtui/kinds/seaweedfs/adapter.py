"""The object store's provisioner adapter: one S3 identity per pair, in SeaweedFS's IAM.

An identity's name and access key are the pair's login, its secret key the pair's credential,
its actions the consumer's rights on its own buckets (``Read:bucket`` ...). meshtui knows the
identities it made by their account's display name, ``meshtui:<provider>:<provision>``; any
other identity (the store's own admin, one made by hand, another scope's) is never changed or
removed, and a login whose name or access key another identity holds is refused (SeaweedFS
accepts two identities with one access key; meshtui never makes one).

Every run reads the whole configuration once (``s3.iam.export``) and decides "unchanged"
from it without writing. What must change is written in one batch of commands: a missing
identity with ``s3.configure``, a rotated one by replacing its secret key in place, drift
(rights widened, a second key, disabled) repaired in place; then the configuration is read
again and a write counts only when the identity reads back exactly as wanted. The read, the
write and the read-back are exchanges with one ``weed shell`` kept open for the run (a shell
takes a third of a second to start; a rotation used to start three). An overlap pair
(``Alternating``) keeps one identity, named as its login, whose access keys alternate between
``<login>_a`` and ``<login>_b``: the new key added beside the old, then the old deleted. A
removal deletes the identity and keeps its buckets and their objects, and is held back ("drop
pending") when it would leave the store with no identity at all: SeaweedFS then turns
authentication off.

The admin file (TOML, 0600) says where the store is; no secret is in it::

    backend = "seaweedfs"
    master = "127.0.0.1:9333"          # host:port[.grpcport], as weed shell takes it
    filer = "127.0.0.1:8888"
    config = "/etc/meshtui/weed"       # optional: the folder holding security.toml
    admin = "meshtui-admin"            # the store's static identity, never touched
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from meshtui.contracts.adapter import (
    Capabilities,
    Change,
    Done,
    Held,
    Refused,
    Scope,
    Wanted,
    alternate_login,
    check_name,
)
from meshtui.crypto import secret_digest
from meshtui.errors import ProvisionError
from meshtui.freeform import ForeignJson
from meshtui.kinds.kind import ValuesError
from meshtui.kinds.seaweedfs.shell import Conversation, Session, errors, find_weed
from meshtui.kinds.seaweedfs.values import RIGHTS, Grant, grant_for
from meshtui.model import OutcomeName

_SAFE_SECRET = re.compile(r"[A-Za-z0-9_.~+/=-]{16,128}")
"""A secret key weed shell passes whole (its command line splits on spaces)."""
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,63}")
"""An identity name and access key weed shell passes whole."""
_ADDRESS = re.compile(r"[A-Za-z0-9.:\[\]-]{1,100}")


@dataclass(frozen=True)
class Admin:
    """The admin file: where the store's master and filer are, and its static identity."""

    master: str
    filer: str
    config: Path | None
    admin: str
    weed: str | None = None

    @classmethod
    def parse(cls, text: str) -> Admin:
        """The admin file's TOML; ProvisionError naming the key that is wrong."""
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ProvisionError(f"the object store's admin file is not TOML: {exc}") from None
        backend = data.get("backend", "seaweedfs")
        if backend != "seaweedfs":
            raise ProvisionError(
                f"admin file: backend {backend!r} is not one this provisioner knows "
                '(write backend = "seaweedfs")'
            )
        found: dict[str, str] = {}
        for key in ("master", "filer", "admin"):
            value = data.get(key)
            if not isinstance(value, str) or not value:
                raise ProvisionError(
                    f"admin file: {key} is missing (see the README, Object storage)"
                )
            found[key] = value
        for key in ("master", "filer"):
            if not _ADDRESS.fullmatch(found[key]):
                raise ProvisionError(f"admin file: {key} must be host:port, not {found[key]!r}")
        config = data.get("config")
        weed = data.get("weed")
        if config is not None and not isinstance(config, str):
            raise ProvisionError("admin file: config must be a folder's path")
        if weed is not None and not isinstance(weed, str):
            raise ProvisionError("admin file: weed must be the weed binary's path")
        return cls(
            found["master"], found["filer"], Path(config) if config else None, found["admin"], weed
        )


def _marker(scope: Scope) -> str:
    return f"meshtui:{scope.provider}:{scope.provision}"


def _credentials(identity: Mapping[str, Any]) -> list[tuple[str, str]]:
    creds = identity.get("credentials") or []
    return [(str(c.get("accessKey", "")), str(c.get("secretKey", ""))) for c in creds]


def _display_name(identity: Mapping[str, Any]) -> str:
    account = identity.get("account") or {}
    return str(account.get("displayName", "")) if isinstance(account, Mapping) else ""


class SeaweedAdapter:
    """One provisioner session with a SeaweedFS store (one ``weed shell`` kept open for it,
    started at its first exchange)."""

    create_decides = True  # create reads the configuration first (see adapter.Deciding)
    capabilities = Capabilities(batching=True, deciding=True, alternating=True)

    def describe(self, exc: BaseException) -> str | None:
        """None: the shell's failures reach the harness as meshtui's own errors already."""
        return None

    def __init__(self, conninfo: str, scope: Scope) -> None:
        self.admin = Admin.parse(conninfo)
        self.scope = scope
        self.marker = _marker(scope)
        self.session = Session(
            self.admin.master, self.admin.filer, self.admin.config, self.admin.weed or find_weed()
        )
        self._shell: Conversation | None = None
        self._looked: list[ForeignJson] | None = None  # inspect's read, used once by create
        self._buckets: frozenset[str] = frozenset()  # the buckets there were at the last read
        self._indexed: (
            tuple[Sequence[Mapping[str, Any]], dict[str, Mapping[str, Any]], dict[str, set[str]]]
            | None
        ) = None  # the last read, indexed (see _index)

    # -- reading -------------------------------------------------------------------------------

    def _conversation(self) -> Conversation:
        """The run's shell, started at the first exchange (again after one that failed)."""
        if self._shell is None or self._shell.ended:
            self._shell = Conversation(self.session)
        return self._shell

    def _identities(self) -> list[ForeignJson]:
        """Every identity the store holds (private: each with its secret key)."""
        data, self._buckets = self._conversation().export()
        found = data.get("identities") or []
        return [i for i in found if isinstance(i, dict) and isinstance(i.get("name"), str)]

    def _ours(self, identity: Mapping[str, Any]) -> bool:
        return _display_name(identity) == self.marker and not identity.get("isStatic")

    def _conflict(self, login: str, identities: Sequence[Mapping[str, Any]]) -> str | None:
        """Why ``login`` cannot be ours here (its name or access key is another's), or None."""
        by_name, key_holders = self._index(identities)
        identity = by_name.get(login)
        if identity is not None and not self._ours(identity):
            if identity.get("isStatic"):
                return f"identity {login} is the store's static identity, not meshtui's"
            return f"identity {login} was not made by meshtui for {self.scope.provider}"
        others = sorted(key_holders.get(login, set()) - {login})
        if others:
            return f"access key {login} is already identity {others[0]}'s"
        return None

    def _index(
        self, identities: Sequence[Mapping[str, Any]]
    ) -> tuple[dict[str, Mapping[str, Any]], dict[str, set[str]]]:
        """The identities by name, and who holds each access key: built once per read."""
        if self._indexed is None or self._indexed[0] is not identities:
            by_name = {str(i["name"]): i for i in identities}
            holders: dict[str, set[str]] = {}
            for identity in identities:
                for key, _secret in _credentials(identity):
                    holders.setdefault(key, set()).add(str(identity["name"]))
            self._indexed = (identities, by_name, holders)
        return self._indexed[1], self._indexed[2]

    def _held(self, login: str, identity: Mapping[str, Any], grant: Grant | None) -> Held:
        creds = _credentials(identity)
        exact = len(creds) == 1 and creds[0][0] == login and not identity.get("disabled")
        digest = secret_digest(creds[0][1].encode()) if exact else None
        actions = frozenset(str(a) for a in identity.get("actions") or [])
        in_place = (
            grant is not None
            and actions == grant.actions()
            and not identity.get("policyNames")
            and not identity.get("disabled")
        )
        return Held(login=login, ours=True, digest=digest, in_place=in_place)

    def inspect(self, wanted: Mapping[str, Mapping[str, str]]) -> Mapping[str, Held]:
        """Held for every wanted login that exists (or whose access key is taken) and for
        every identity of ours; read-only, from one export."""
        identities = self._identities()
        self._looked = identities
        held: dict[str, Held] = {}
        by_name = {i["name"]: i for i in identities}
        for login, values in wanted.items():
            why = self._conflict(login, identities)
            if why is not None:
                held[login] = Held(login=login, ours=False, note=why)
            elif login in by_name:
                held[login] = self._held(login, by_name[login], _grant(login, values))
        for identity in identities:
            if self._ours(identity) and identity["name"] not in held:
                held[identity["name"]] = self._held(identity["name"], identity, None)
        return held

    def inspect_alternates(
        self, wanted: Mapping[str, tuple[str, Mapping[str, str]]]
    ) -> Mapping[str, Held]:
        """See :meth:`~meshtui.contracts.adapter.Alternating.inspect_alternates`: identity
        ``owner`` holding exactly one access key, its current alternate's, with its rights in
        place; read-only, from one export."""
        identities = self._identities()
        self._looked = identities
        by_name = {i["name"]: i for i in identities}
        held: dict[str, Held] = {}
        for owner, (alt, values) in wanted.items():
            identity = by_name.get(owner)
            if identity is None:
                continue
            if not self._ours(identity):
                why = self._conflict(owner, identities) or f"identity {owner} is not meshtui's"
                held[owner] = Held(login=owner, ours=False, note=why)
                continue
            have = self._held(owner, identity, _grant(owner, values))
            creds = _credentials(identity)
            key = alternate_login(owner, alt)
            exact = len(creds) == 1 and creds[0][0] == key and not identity.get("disabled")
            digest = secret_digest(creds[0][1].encode()) if exact else None
            held[owner] = Held(login=owner, ours=True, digest=digest, in_place=have.in_place)
        return held

    # -- writing -------------------------------------------------------------------------------

    def create(self, login: str, password: str, values: Mapping[str, str]) -> Done:
        """Make one identity true (see :meth:`create_many`)."""
        got = self.create_many([Wanted(login, password, values)])[login]
        if isinstance(got, Exception):
            raise got
        return got

    def create_many(self, batch: Sequence[Wanted]) -> dict[str, Done | Exception]:
        """Make every identity of ``batch`` true in one shell session, each read back."""
        identities = self._looked if self._looked is not None else self._identities()
        self._looked = None
        by_name = {i["name"]: i for i in identities}
        results: dict[str, Done | Exception] = {}
        commands: list[str] = []
        made = set(self._buckets)
        written: dict[str, tuple[str, Grant, Change]] = {}
        for item in batch:
            try:
                grant = self._check(item, identities)
            except Refused as exc:
                results[item.login] = exc
                continue
            have = by_name.get(item.login)
            if have is not None:
                held = self._held(item.login, have, grant)
                if held.digest == secret_digest(item.password.encode()) and held.in_place:
                    results[item.login] = Done(OutcomeName.UNCHANGED)
                    continue
            commands += [f"s3.bucket.create -name {b}" for b in grant.buckets if b not in made]
            made.update(grant.buckets)
            commands += self._commands(item, grant, have)
            name: Change = OutcomeName.CREATED if have is None else OutcomeName.UPDATED
            written[item.login] = (item.password, grant, name)
        if not written:
            return results
        secrets = [p for p, _g, _n in written.values()]
        try:
            out = self._conversation().ask(commands, secrets)
            after = {i["name"]: i for i in self._identities()}
        except ProvisionError as exc:
            return results | dict.fromkeys(written, exc)
        finally:
            commands.clear()
        said = errors(out, secrets)
        del out
        for login, (password, grant, name) in written.items():
            got = self._read_back(login, password, grant, name, after.get(login))
            if isinstance(got, ProvisionError) and said:
                got = ProvisionError(f"{got} (weed shell said: {said})")
            results[login] = got
        return results

    def _check(self, item: Wanted, identities: Sequence[Mapping[str, Any]]) -> Grant:
        check_name(item.login)
        if not _NAME.fullmatch(item.login):
            raise Refused(
                f"{item.login!r} cannot be an S3 access key here (letters, digits, '_', '.' "
                "and '-' only: weed shell splits its commands on spaces)"
            )
        why = self._conflict(item.login, identities)
        if why is not None:
            raise Refused(why)
        if not _SAFE_SECRET.fullmatch(item.password):
            raise Refused("the secret holds characters weed shell cannot pass whole")
        try:
            return grant_for(item.login, item.values)
        except ValuesError as exc:
            raise Refused(str(exc)) from None

    def _commands(self, item: Wanted, grant: Grant, have: Mapping[str, Any] | None) -> list[str]:
        """The shell commands that make ``item`` true from what the store holds (``have``)."""
        login = item.login
        if have is None:
            return [self._new(login, login, item.password, grant)]
        commands = [
            f"s3.configure -user={login} -access_key={login} -secret_key={item.password} -apply"
        ]
        for key, _secret in _credentials(have):
            if key != login:
                commands.append(f"s3.configure -user={login} -access_key={key} -delete -apply")
        return commands + _repairs(login, grant, have)

    def _new(self, login: str, key: str, password: str, grant: Grant) -> str:
        """The command making identity ``login`` with the access key ``key``, its rights, ours."""
        rights = ",".join(RIGHTS[r] for r in grant.rights)
        return (
            f"s3.configure -user={login} -access_key={key} -secret_key={password} "
            f"-buckets={','.join(grant.buckets)} -actions={rights} "
            f"-account_display_name={self.marker} -apply"
        )

    def create_alternate(
        self, owner: str, alt: str, password: str, values: Mapping[str, str], keep: bool
    ) -> Done:
        """Make identity ``owner`` hold the access key ``alternate_login(owner, alt)`` with
        ``password`` as its secret key (the identity made if missing, its rights repaired);
        with ``keep`` its other keys stay (an overlap's first step), else every other key is
        deleted but one holding this very secret (a key from before the pair alternated,
        which its consumer may still hold). A retried call writes nothing."""
        identities = self._looked if self._looked is not None else self._identities()
        self._looked = None
        grant = self._check(Wanted(owner, password, values), identities)
        key = alternate_login(owner, alt)
        taken = sorted(self._index(identities)[1].get(key, set()) - {owner})
        if taken:
            raise Refused(f"access key {key} is already identity {taken[0]}'s")
        have = next((i for i in identities if i["name"] == owner), None)
        held = dict(_credentials(have)) if have is not None else {}
        if keep and held.get(key, password) != password:
            raise Refused(
                f"access key {key} of {owner} still holds another secret: an overlap of "
                f"{owner} is open (its last step has not run); nothing was changed"
            )
        drop = [] if keep else sorted(k for k, v in held.items() if k != key and v != password)
        commands = _alternate_commands(owner, key, password, grant, have, drop)
        if have is None:
            made = [f"s3.bucket.create -name {b}" for b in grant.buckets if b not in self._buckets]
            commands = [*made, self._new(owner, key, password, grant)]
        if not commands:
            return Done(OutcomeName.UNCHANGED)
        try:
            out = self._conversation().ask(commands, [password])
            after = next((i for i in self._identities() if i["name"] == owner), None)
        finally:
            commands.clear()
        said = errors(out, [password])
        del out
        got = self._alternate_back(owner, key, password, grant, keep, after)
        if isinstance(got, ProvisionError):
            raise ProvisionError(f"{got} (weed shell said: {said})") if said else got
        notes = [f"access key {key}", *(f"access key {k} deleted" for k in drop), got]
        return Done(OutcomeName.CREATED if have is None else OutcomeName.UPDATED, "; ".join(notes))

    def _alternate_back(
        self,
        owner: str,
        key: str,
        password: str,
        grant: Grant,
        keep: bool,
        identity: Mapping[str, Any] | None,
    ) -> str | ProvisionError:
        """Its rights in words when the store holds ``owner`` as :meth:`create_alternate`
        wrote it, else why not (no secret)."""
        if identity is None or not self._ours(identity):
            return ProvisionError(f"identity {owner} does not read back as meshtui's")
        held = dict(_credentials(identity))
        if held.get(key) != password:
            return ProvisionError(f"identity {owner} does not read back with access key {key}")
        if not keep and any(v != password for v in held.values()):
            return ProvisionError(f"identity {owner} still holds another access key")
        if not self._held(owner, identity, grant).in_place:
            got = ", ".join(sorted(str(a) for a in identity.get("actions") or [])) or "none"
            return ProvisionError(f"identity {owner} reads back with the rights {got}")
        return f"rights {' '.join(grant.rights)} on {' '.join(grant.buckets)}"

    def _read_back(
        self,
        login: str,
        password: str,
        grant: Grant,
        name: Change,
        identity: Mapping[str, Any] | None,
    ) -> Done | Exception:
        """Done when the store holds ``login`` exactly as written; else why not (no secret)."""
        if identity is None:
            return ProvisionError(f"identity {login} is not in the store after it was written")
        if not self._ours(identity):
            return ProvisionError(f"identity {login} does not read back as meshtui's")
        held = self._held(login, identity, grant)
        if held.digest != secret_digest(password.encode()):
            return ProvisionError(
                f"identity {login} does not read back with exactly its one key and secret"
            )
        if not held.in_place:
            got = ", ".join(sorted(str(a) for a in identity.get("actions") or [])) or "none"
            return ProvisionError(f"identity {login} reads back with the rights {got}")
        buckets = " ".join(grant.buckets)
        return Done(name, f"rights {' '.join(grant.rights)} on {buckets}")

    def remove(self, login: str) -> Done:
        """Delete an identity of ours, keeping its buckets and objects; held back when it is
        the store's last identity (SeaweedFS would then accept any request)."""
        check_name(login)
        if not _NAME.fullmatch(login):
            raise Refused(f"{login!r} cannot be an identity meshtui made")
        identities = self._identities()
        mine = [i for i in identities if i["name"] == login]
        if not mine:
            return Done(OutcomeName.REMOVED, "already gone; its buckets and objects are kept")
        if not self._ours(mine[0]):
            raise Refused(f"identity {login} was not made by meshtui for {self.scope.provider}")
        if len(identities) <= 1:
            return Done(
                OutcomeName.DROP_PENDING,
                "it is the store's last identity: without one SeaweedFS accepts any request "
                f"(give the store its static admin identity {self.admin.admin})",
            )
        self._conversation().ask([f"s3.configure -user={login} -delete -apply"])
        if any(i["name"] == login for i in self._identities()):
            raise ProvisionError(f"identity {login} is still in the store after its removal")
        return Done(OutcomeName.REMOVED, "identity deleted; its buckets and objects are kept")

    def close(self) -> None:
        """End the run's shell; nothing stays open after the run."""
        self._looked = None
        if self._shell is not None:
            self._shell.close()
            self._shell = None


def _grant(login: str, values: Mapping[str, str]) -> Grant | None:
    try:
        return grant_for(login, values)
    except ValuesError:
        return None


def _alternate_commands(
    owner: str,
    key: str,
    password: str,
    grant: Grant,
    have: Mapping[str, Any] | None,
    drop: Sequence[str],
) -> list[str]:
    """What makes an existing identity ``owner`` hold ``key`` with ``password``, without the
    keys of ``drop``, with its rights (nothing when it does already)."""
    if have is None:
        return []
    held = dict(_credentials(have))
    commands = [] if held.get(key) == password else [
        f"s3.configure -user={owner} -access_key={key} -secret_key={password} -apply"
    ]  # fmt: skip
    commands += [f"s3.configure -user={owner} -access_key={k} -delete -apply" for k in drop]
    return commands + _repairs(owner, grant, have)


def _repairs(login: str, grant: Grant, have: Mapping[str, Any]) -> list[str]:
    """The commands that bring identity ``login``'s rights back to ``grant``: missing actions
    added, others removed, policies detached, the identity enabled."""
    commands: list[str] = []
    held = frozenset(str(a) for a in have.get("actions") or [])
    for missing in sorted(grant.actions() - held):
        action, _, bucket = missing.partition(":")
        commands.append(f"s3.configure -user={login} -buckets={bucket} -actions={action} -apply")
    for extra in sorted(held - grant.actions()):
        action, _, bucket = extra.partition(":")
        where = f" -buckets={bucket}" if bucket else ""
        commands.append(f"s3.configure -user={login}{where} -actions={action} -delete -apply")
    for policy in have.get("policyNames") or []:
        commands.append(f"s3.policy.detach -user={login} -policy={policy}")
    if have.get("disabled"):
        commands.append(f"s3.user.enable -name={login}")
    return commands
