"""The OpenBao adapter: each pair an AppRole role, its credential the role's only secret_id.

For the login ``L`` of a consumer (derived by the mesh), meshtui makes, through OpenBao's HTTP
API with the admin file's token (never the root token):

* the ACL policy ``meshtui-L``: read and list on the module's own path of the KV v2 mount
  (``<kv>/data/L/*``, ``<kv>/metadata/L/*``) and nothing else, so another module's path answers
  403. Its first line is meshtui's mark, ``# meshtui:1 {"provider": ..., "provision": ...,
  "login": ...}``: only a policy carrying the mark for this scope is ours, and it is deleted
  last on removal, so an unfinished removal is found and finished by the next run;
* the AppRole role ``meshtui-L`` whose ``role_id`` is set to ``L`` (the mesh names identities,
  never the provider), bound to that one policy, with short token TTLs (:data:`TOKEN_TTL_S`);
* the pair's credential as the role's secret_id, set with ``custom-secret-id`` and carrying the
  secret's digest as its metadata. Set every time: after a run the role holds exactly the
  delivered secret_id and no other (every other accessor is destroyed). An overlap's first
  step (``create_keeping``) keeps the one it held beside the new until that plain run.

"Unchanged" is decided without writing where it can be proved: ``create`` asks
``secret-id/lookup`` whether the role holds exactly that secret_id (OpenBao answers from its
own store; the audit log keeps only an HMAC of it) and writes only what is off. ``inspect``
reports the digest the role's one secret_id carries in its metadata (written only by a token
that may write meshtui's roles); two secret_ids, none, or a role or policy changed by hand make
the next run rewrite (drift restored).

Removal deletes the role (and with it its secret_ids), then revokes every token the role
issued, by accessor (deleting a role or a secret_id leaves issued tokens alive in OpenBao),
then deletes the policy. The module's stored secrets are kept. Roles and policies without
meshtui's mark, or marked for another scope, are never touched.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import NamedTuple

from meshtui.contracts.adapter import Capabilities, Done, Held, Refused, Scope, Wanted
from meshtui.crypto import secret_digest
from meshtui.errors import ProvisionError, UnsafeLoginError
from meshtui.freeform import ForeignJson
from meshtui.kinds.kind import ValuesError
from meshtui.kinds.openbao.client import APPROLE_MOUNT, KV_MOUNT, Bao, BaoError, read_admin
from meshtui.kinds.openbao.values import check_values
from meshtui.model import OutcomeName

PREFIX = "meshtui-"
READERS = 8
"""How many reads an inspect (or writes a batch) keeps in flight at once."""
MARK = "# meshtui:1 "
KEEPALIVE_S = 60.0
"""How long the session's idle connection is kept: an agent lends it again for the next run
(``kept.py``), well within OpenBao's own idle timeout (``http_idle_timeout``, 5 minutes)."""
TOKEN_TTL_S = 300
TOKEN_MAX_TTL_S = 900
DIGEST_KEY = "meshtui_digest"
_LOGIN = re.compile(r"[a-z0-9_]{1,63}")
ROLE_SETTINGS: ForeignJson = {
    "bind_secret_id": True,
    "secret_id_num_uses": 0,
    "secret_id_ttl": 0,
    "token_ttl": TOKEN_TTL_S,
    "token_max_ttl": TOKEN_MAX_TTL_S,
    "token_num_uses": 0,
    "token_period": 0,
    "token_type": "default",
}
"""What every role of ours holds besides its policy (compared on each run, restored if off)."""


def role_name(login: str) -> str:
    """The AppRole role (and ACL policy) name of a login."""
    return PREFIX + login


def kv_path(login: str) -> str:
    """The module's own path inside the KV v2 mount."""
    return login


def policy_text(scope: Scope, login: str, kv: str) -> str:
    """The ACL policy of one login: its mark, then read and list on its own KV path only."""
    mark = json.dumps(
        {"provider": scope.provider, "provision": scope.provision, "login": login},
        sort_keys=True,
    )
    path = kv_path(login)
    return (
        f"{MARK}{mark}\n"
        f'path "{kv}/data/{path}/*" {{ capabilities = ["read"] }}\n'
        f'path "{kv}/metadata/{path}/*" {{ capabilities = ["read", "list"] }}\n'
        f'path "{kv}/metadata/{path}" {{ capabilities = ["list"] }}\n'
    )


def mark_of(text: str) -> dict[str, str] | None:
    """The mark on a policy's first line, or None when it carries none."""
    first = text.split("\n", 1)[0]
    if not first.startswith(MARK):
        return None
    try:
        found = json.loads(first[len(MARK) :])
    except ValueError:
        return None
    if not isinstance(found, dict):
        return None
    return {str(k): str(v) for k, v in found.items()}


@dataclass
class Seen:
    """What OpenBao holds for one login, read without writing."""

    login: str
    policy: str | None = None
    role: ForeignJson | None = None
    role_id: str | None = None
    accessors: list[str] = field(default_factory=list)
    digest: str | None = None  # the one secret_id's metadata digest


TOKEN_SCAN_LIMIT = 5000
"""The most live tokens the provisioner looks up one by one to find a login's. OpenBao lists
tokens by accessor only, server-wide, with no filter by role or secret_id, and each must be
looked up to learn whose it is; past this many, a count or an end is refused rather than
taking minutes, and the tokens live out their TTL (15 minutes at most) as under ``drain``."""


class _Token(NamedTuple):
    """A live token as its lookup said: the path it was issued at and its metadata."""

    path: str
    meta: Mapping[str, object]


class TooManyTokens(ProvisionError):
    """More live tokens in OpenBao than :data:`TOKEN_SCAN_LIMIT`: none looked up."""


class OpenBaoAdapter:
    """One session with one OpenBao, working for one manifest scope."""

    token_scan_limit = TOKEN_SCAN_LIMIT

    create_decides = True
    capabilities = Capabilities(
        batching=True, narrowing=True, deciding=True, live_sessions=True, overlapping=True
    )

    def describe(self, exc: BaseException) -> str | None:
        """None: OpenBao's refusals reach the harness as meshtui's own errors already."""
        return None

    def __init__(self, admin: str, scope: Scope) -> None:
        self.scope = scope
        fields = read_admin(admin)
        del admin
        missing = [k for k in ("address", "ca", "token") if not fields.get(k)]
        if missing:
            raise ProvisionError(
                f"the admin file lacks {', '.join(missing)} (its text is not shown); write "
                'address = "https://HOST:8200", ca = "/path/ca.pem", token = "..."'
            )
        self.approle = APPROLE_MOUNT
        self.kv = KV_MOUNT
        self.bao = Bao(
            fields["address"], ca=fields["ca"], token=fields["token"], keepalive=KEEPALIVE_S
        )
        self._seen: dict[str, Seen] = {}
        self._looked_up: dict[str, _Token | None] = {}
        """Each live token's lookup (None: gone) by accessor, from the last listing: a token's
        role, path and metadata never change, so a run that counts or ends the sessions of
        many logins looks each token up once."""
        try:
            self._preflight()
        except BaseException:
            self.bao.close()
            raise

    def _preflight(self) -> None:
        """Refuse at once, naming what is missing, when the token, AppRole or KV cannot serve."""
        try:
            self.bao.call("GET", "auth/token/lookup-self")
        except BaoError as exc:
            if exc.status == 403:
                raise ProvisionError(
                    "OpenBao refused the admin token (expired or revoked): make a new one "
                    "with the provisioner's policy (bao token create -orphan "
                    "-policy=meshtui_provisioner) and write it to the admin file"
                ) from None
            raise
        auths = self.bao.data("GET", "sys/auth") or {}
        if f"{self.approle}/" not in auths:
            raise ProvisionError(
                f"AppRole is not enabled at auth/{self.approle} in OpenBao: enable it "
                f"(bao auth enable -path={self.approle} approle)"
            )
        try:
            mount = self.bao.call("GET", f"sys/mounts/{self.kv}") or {}
        except BaoError as exc:
            if exc.status in (400, 404):
                raise ProvisionError(
                    f"OpenBao has no KV v2 mount at {self.kv}/: enable it "
                    f"(bao secrets enable -path={self.kv} -version=2 kv)"
                ) from None
            raise
        options = mount.get("options") or {}
        if mount.get("type") != "kv" or str(options.get("version")) != "2":
            raise ProvisionError(
                f"{self.kv}/ in OpenBao is not a KV version 2 mount; meshtui needs one "
                f"(bao secrets enable -path={self.kv} -version=2 kv)"
            )

    def close(self) -> None:
        """Close the session."""
        self.bao.close()

    def forget(self) -> None:
        """Drop what this session read (a kept session lent again reads afresh)."""
        self._seen.clear()

    def alive(self) -> bool:
        """Whether OpenBao still answers this session and still takes its token (one read)."""
        try:
            self.bao.call("GET", "auth/token/lookup-self")
        except BaoError:
            return False
        return True

    def __enter__(self) -> OpenBaoAdapter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading -------------------------------------------------------------------------------

    def _role_path(self, login: str, tail: str = "") -> str:
        return f"auth/{self.approle}/role/{role_name(login)}" + (f"/{tail}" if tail else "")

    def _read(
        self,
        login: str,
        policy: str | None = None,
        *,
        with_policy: bool = True,
        with_digest: bool = True,
    ) -> Seen:
        """Everything about one login: policy, role, role_id, secret_id accessors, and (with
        ``with_digest``) the digest its one secret_id carries, which only :meth:`inspect` needs
        (``create`` asks OpenBao whether the role holds the delivered secret_id itself)."""
        seen = Seen(login)
        if with_policy:
            answer = self.bao.call("GET", f"sys/policies/acl/{role_name(login)}", missing_ok=True)
            seen.policy = None if answer is None else str(answer["data"]["policy"])
        else:
            seen.policy = policy
        seen.role = self.bao.data("GET", self._role_path(login), missing_ok=True)
        if seen.role is None:
            return seen
        role_id = self.bao.data("GET", self._role_path(login, "role-id"), missing_ok=True)
        seen.role_id = None if role_id is None else str(role_id.get("role_id"))
        seen.accessors = self.bao.keys(self._role_path(login, "secret-id"))
        if with_digest and len(seen.accessors) == 1:
            found = self.bao.data(
                "POST",
                self._role_path(login, "secret-id-accessor/lookup"),
                {"secret_id_accessor": seen.accessors[0]},
                missing_ok=True,
            )
            meta = (found or {}).get("metadata") or {}
            digest = meta.get(DIGEST_KEY)
            seen.digest = str(digest) if digest else None
        return seen

    def _foreign(self, seen: Seen) -> str | None:
        """Why the login's role or policy is not ours for this scope, or None when it is."""
        name = role_name(seen.login)
        if seen.policy is None:
            if seen.role is not None:
                return f"the AppRole role {name} has no policy of meshtui's: not made by meshtui"
            return None
        mark = mark_of(seen.policy)
        if mark is None:
            return f"the ACL policy {name} was not made by meshtui"
        if (mark.get("provider"), mark.get("provision"), mark.get("login")) != (
            self.scope.provider,
            self.scope.provision,
            seen.login,
        ):
            return f"made by meshtui for {mark.get('provision')} at {mark.get('provider')}"
        if seen.role is not None and list(seen.role.get("token_policies") or []) != [name]:
            return f"the AppRole role {name} grants other policies: not made by meshtui"
        return None

    def _in_place(self, seen: Seen) -> bool:
        """Role, role_id and policy are exactly what meshtui writes."""
        role = seen.role
        return (
            role is not None
            and seen.role_id == seen.login
            and seen.policy == policy_text(self.scope, seen.login, self.kv)
            and all(role.get(k) == v for k, v in ROLE_SETTINGS.items())
            and list(role.get("token_policies") or []) == [role_name(seen.login)]
        )

    def _held(self, seen: Seen) -> Held:
        foreign = self._foreign(seen)
        if foreign is not None:
            return Held(seen.login, ours=False, note=foreign)
        one = len(seen.accessors) == 1
        return Held(
            seen.login,
            ours=True,
            digest=seen.digest if one else None,
            in_place=self._in_place(seen),
        )

    def inspect(self, wanted: Mapping[str, Mapping[str, str]]) -> dict[str, Held]:
        """Held for each wanted login that exists and each login of ours; no write.

        Two LISTs (policies, roles) tell which logins exist at all; only meshtui's policies are
        read to find this scope's, and only logins that exist are read further, ``READERS``
        requests at a time (OpenBao serves reads in parallel; one at a time, an idle run of
        1,000 logins waited longer than writing them)."""
        policies = set(self.bao.keys("sys/policies/acl"))
        roles = set(self.bao.keys(f"auth/{self.approle}/role"))
        names = sorted(
            n for n in policies if n.startswith(PREFIX) and _LOGIN.fullmatch(n[len(PREFIX) :])
        )
        texts: dict[str, str] = {}
        with ThreadPoolExecutor(READERS, thread_name_prefix="bao-read") as pool:
            for name, answer in zip(names, pool.map(self._policy, names), strict=True):
                if answer is not None:
                    texts[name[len(PREFIX) :]] = answer
            ours = {
                login
                for login, text in texts.items()
                if (mark := mark_of(text)) is not None
                and (mark.get("provider"), mark.get("provision"))
                == (self.scope.provider, self.scope.provision)
            }
            logins = [login for login in sorted(set(wanted) | ours) if _LOGIN.fullmatch(login)]
            for login in logins:
                if role_name(login) not in roles and login not in texts:
                    self._seen[login] = Seen(login)  # nothing there: create reads nothing
            present = [login for login in logins if login not in self._seen]
            seen_all = pool.map(lambda x: self._read(x, texts.get(x), with_policy=False), present)
            out: dict[str, Held] = {}
            for login, seen in zip(present, seen_all, strict=True):
                self._seen[login] = seen
                out[login] = self._held(seen)
        return out

    def _policy(self, name: str) -> str | None:
        answer = self.bao.call("GET", f"sys/policies/acl/{name}", missing_ok=True)
        return None if answer is None else str(answer["data"]["policy"])

    def inspect_only(
        self, wanted: Mapping[str, Mapping[str, str]], logins: frozenset[str]
    ) -> dict[str, Held]:
        """:meth:`inspect` for ``logins`` alone (each read on its own)."""
        out: dict[str, Held] = {}
        for login in sorted(logins):
            if not _LOGIN.fullmatch(login):
                continue
            seen = self._read(login)
            self._seen[login] = seen
            if seen.policy is not None or seen.role is not None:
                out[login] = self._held(seen)
        return out

    # -- create --------------------------------------------------------------------------------

    def _check(self, login: str, values: Mapping[str, str]) -> None:
        if not _LOGIN.fullmatch(login):
            raise UnsafeLoginError(
                f"login {login!r} is not a meshtui login (lower-case letters, digits, _)"
            )
        try:
            check_values(login, values)
        except ValuesError as exc:
            raise Refused(str(exc)) from None

    def create(self, login: str, password: str, values: Mapping[str, str]) -> Done:
        """Make ``login``'s role hold exactly ``password`` as its one secret_id (see the module
        docstring); "unchanged" when OpenBao already holds exactly that, nothing written."""
        return self._make(login, password, values, keeping=False)

    def create_keeping(self, login: str, password: str, values: Mapping[str, str]) -> Done:
        """Make ``login``'s role hold ``password`` as a secret_id beside the one it holds now
        (an overlap's first step); a later :meth:`create` destroys that one by its accessor.
        A role that holds two others already is refused: meshtui will not choose."""
        return self._make(login, password, values, keeping=True)

    def _make(self, login: str, password: str, values: Mapping[str, str], keeping: bool) -> Done:
        self._check(login, values)
        if not password or "\x00" in password:
            raise Refused("the secret is empty or holds a NUL character")
        digest = secret_digest(password.encode("utf-8"))
        seen = self._seen.pop(login, None) or self._read(login, with_digest=False)
        foreign = self._foreign(seen)
        if foreign is not None:
            raise Refused(foreign)
        wrote = False
        created = seen.role is None
        name = role_name(login)
        want_policy = policy_text(self.scope, login, self.kv)
        if seen.policy != want_policy:
            self.bao.call("PUT", f"sys/policies/acl/{name}", {"policy": want_policy})
            wrote = True
        role = seen.role
        settings = {**ROLE_SETTINGS, "token_policies": [name]}
        try:
            if role is None:  # role_id in the same write: taken by another role, nothing made
                self.bao.call("POST", self._role_path(login), {**settings, "role_id": login})
                wrote = True
            else:
                if list(role.get("token_policies") or []) != [name] or any(
                    role.get(k) != v for k, v in ROLE_SETTINGS.items()
                ):
                    self.bao.call("POST", self._role_path(login), settings)
                    wrote = True
                if seen.role_id != login:
                    self.bao.call("POST", self._role_path(login, "role-id"), {"role_id": login})
                    wrote = True
        except BaoError as exc:
            if not any("role_id already in use" in e for e in exc.errors):
                raise
            if seen.policy is None:  # the policy just written for it goes again
                self.bao.call("DELETE", f"sys/policies/acl/{name}")
            raise Refused(
                f"role_id {login} is already an AppRole role's that meshtui did not make; "
                "left alone"
            ) from None
        held = None
        if seen.accessors:
            held = self.bao.data(
                "POST",
                self._role_path(login, "secret-id/lookup"),
                {"secret_id": password},
                secrets=[password],
                missing_ok=True,
            )
        mine = str(held["secret_id_accessor"]) if held else None
        if keeping and len([a for a in seen.accessors if a != mine]) > 1:
            raise Refused(
                f"{login}'s role holds {len(seen.accessors)} secret_ids; an overlap keeps one "
                "beside the new, so meshtui will not choose: a plain rotation (swap) sets it right"
            )
        if held is not None and ((held.get("metadata") or {}).get(DIGEST_KEY)) != digest:
            self._destroy(login, [str(held["secret_id_accessor"])])
            mine, wrote = None, True
        if mine is None:
            made = self.bao.data(
                "POST",
                self._role_path(login, "custom-secret-id"),
                {"secret_id": password, "metadata": json.dumps({DIGEST_KEY: digest})},
                secrets=[password],
            )
            mine = str((made or {}).get("secret_id_accessor"))
            wrote = True
        del password
        others = [a for a in seen.accessors if a != mine]  # as read this run (drift: next run)
        if others and not keeping:
            self._destroy(login, others)
            wrote = True
        if not wrote:
            return Done(OutcomeName.UNCHANGED)
        return Done(OutcomeName.CREATED if created else OutcomeName.UPDATED)

    def create_many(self, batch: Sequence[Wanted]) -> dict[str, Done | Exception]:
        """:meth:`create` for many logins, ``READERS`` at a time (each login's requests stand
        alone, so one refused login costs only itself); each login's Done or its error."""

        def one(wanted: Wanted) -> Done | Exception:
            try:
                return self.create(wanted.login, wanted.password, wanted.values)
            except (ProvisionError, UnsafeLoginError) as exc:
                return exc

        with ThreadPoolExecutor(READERS, thread_name_prefix="bao-write") as pool:
            done = list(pool.map(one, batch))
        return {w.login: d for w, d in zip(batch, done, strict=True)}

    def _destroy(self, login: str, accessors: list[str]) -> None:
        for accessor in accessors:
            self.bao.call(
                "POST",
                self._role_path(login, "secret-id-accessor/destroy"),
                {"secret_id_accessor": accessor},
            )

    # -- remove --------------------------------------------------------------------------------

    def remove(self, login: str) -> Done:
        """Delete the role, revoke every token it issued (by accessor), then delete its policy;
        the module's secrets in KV are kept."""
        if not _LOGIN.fullmatch(login):
            raise UnsafeLoginError(f"login {login!r} is not a meshtui login")
        seen = self._seen.pop(login, None) or self._read(login)
        if seen.policy is None and seen.role is None:
            return Done(OutcomeName.REMOVED, "it was already gone")
        foreign = self._foreign(seen)
        if foreign is not None or seen.policy is None:
            raise Refused(f"{foreign or 'not provably made by meshtui'}; left alone")
        if seen.role is not None:
            self.bao.call("DELETE", self._role_path(login))
        try:
            revoked = self.revoke_tokens(login)
        except TooManyTokens as exc:  # the role is gone: its tokens expire within their TTL
            revoked, said = 0, f"{exc}"
        else:
            said = (
                f"{revoked} token{'s' if revoked != 1 else ''} it issued revoked" if revoked else ""
            )
        self.bao.call("DELETE", f"sys/policies/acl/{role_name(login)}")
        return Done(
            OutcomeName.REMOVED,
            "; ".join(
                x for x in (said, f"its secrets in {self.kv}/{kv_path(login)} are kept") if x
            ),
        )

    def revoke_tokens(self, login: str) -> int:
        """Revoke every live token the login's role issued (found by accessor); how many."""
        return self._revoke(accessor for accessor, _ in self._tokens(login))

    # -- sessions ------------------------------------------------------------------------------

    def mark_sessions(self, login: str) -> str:
        """No mark: a token's metadata names the secret_id it was issued from."""
        del login
        return ""

    def end_sessions(self, login: str, digest: str, before: str | None = None) -> int:
        """Revoke, by accessor, every live token the login's role issued from a secret_id
        other than the one of ``digest``: each token carries the metadata of the secret_id it
        was issued from (the digest meshtui set on it), so the new secret_id's tokens stay."""
        del before
        return self._revoke(a for a, meta in self._tokens(login) if meta.get(DIGEST_KEY) != digest)

    def count_sessions(self, login: str, digest: str, before: str | None = None) -> int:
        """How many live tokens the login's role issued from a secret_id other than the one of
        ``digest`` (see :meth:`end_sessions`)."""
        del before
        return sum(1 for _, meta in self._tokens(login) if meta.get(DIGEST_KEY) != digest)

    def _tokens(self, login: str) -> Iterator[tuple[str, Mapping[str, object]]]:
        """Each live token the login's role issued through AppRole login: its accessor and
        its metadata (OpenBao lists accessors only; each is looked up). TooManyTokens, before
        any lookup, past :attr:`token_scan_limit` live tokens."""
        if not _LOGIN.fullmatch(login):
            raise UnsafeLoginError(f"login {login!r} is not a meshtui login")
        name = role_name(login)
        login_path = f"auth/{self.approle}/login"
        accessors = self.bao.keys("auth/token/accessors")
        if len(accessors) > self.token_scan_limit:
            raise TooManyTokens(
                f"OpenBao holds {len(accessors)} live tokens, more than the "
                f"{self.token_scan_limit} meshtui looks up one by one to find those of {login}: "
                "none was looked up, and its tokens live out their TTL (15 minutes at most)"
            )
        known, self._looked_up = self._looked_up, {}
        for accessor in accessors:
            info = known[accessor] if accessor in known else self._lookup(accessor)
            self._looked_up[accessor] = info
            if info is None:
                continue
            if info.meta.get("role_name") == name and info.path.startswith(login_path):
                yield accessor, info.meta

    def _lookup(self, accessor: str) -> _Token | None:
        """What OpenBao says of one token: its path and metadata (None: gone)."""
        info = self.bao.data(
            "POST", "auth/token/lookup-accessor", {"accessor": accessor}, missing_ok=True
        )
        if not info:
            return None
        return _Token(str(info.get("path", "")), dict(info.get("meta") or {}))

    def _revoke(self, accessors: Iterable[str]) -> int:
        count = 0
        for accessor in list(accessors):  # listed first: revoking while listing skips some
            try:
                self.bao.call("POST", "auth/token/revoke-accessor", {"accessor": accessor})
            except BaoError as exc:
                if exc.status != 400:  # 400: it expired meanwhile
                    raise
            count += 1
        return count
