"""A node's part in a module's own secrets (not a pair's): the vault node writes them into KV,
the module's node reads them back with the module's own AppRole credential and writes its file.

``store`` (on the vault's node): each secret arrives sealed to this node; it is unsealed, checked
against its digest and written to ``<kv>/data/<login>/<name>`` with the vault module's admin
token, its digest and meshtui's version in the entry's custom metadata. An entry that already
carries that digest and version is not written again (a retried request changes nothing). The
admin token can write there but not read: the policy ``meshtui_provisioner`` grants no read.

``fetch`` (on the module's node): logs in with AppRole as the module (``role_id`` its login,
``secret_id`` the pair credential this node holds), reads exactly the KV version the controller
names, checks the value's digest, writes the file with the declared owner, group and mode
(nothing written when it already holds it), runs the reload, and revokes the token. So each
delivery proves the module's login works and that its policy lets it read its own path. The
file goes only where the node's policy allows a credential file (``[[credentials]]``: folder,
owner, group, reload), and never over a file this agent did not write for that secret
(:mod:`meshtui.host.state.secret_files` records what it wrote), as a pair's credential file.

``check`` (on the module's node, for a drill): the digest of the file the agent wrote for a
secret (only that file, only where the policy allows a credential file) and the digest of the
vault's current version, read as the module; never a value.

What a request may name is bounded by this node alone: the module's vault credential read
for the login is the file this agent wrote for that module's ``secret`` pair (its holdings),
never a path the request chooses, and it is sent only to a vault the node's policy lists
(``[[servers]]`` of the vault's kind: address, port, CA file), checked before anything is read
or connected.

Values live here only in memory, for one request; no log, answer or error carries them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import partial
from pathlib import Path

from meshtui import crypto
from meshtui.contracts.provider_files import read_admin as read_admin_file
from meshtui.contracts.vault_store import (
    MARK_DIGEST,
    MARK_VERSION,
    AdminStore,
    OwnSecretStore,
    VaultRead,
)
from meshtui.errors import (
    CryptoError,
    HostFileError,
    MeshtuiError,
    PolicyRefusal,
    UnknownKindError,
)
from meshtui.host import credential_files as files
from meshtui.host.policy.node_policy import ConsumerAsk, Policy, ProviderAsk
from meshtui.host.policy.paths import StateFolder, node_path
from meshtui.host.receive.delivery import run_reload
from meshtui.host.state.holdings import Holdings
from meshtui.host.state.identity import Identity
from meshtui.host.state.secret_files import SecretFiles, Written
from meshtui.kinds import registry
from meshtui.kinds.kind import Kind
from meshtui.model import NAME_RE, VAULT_PROVISION, End, split_pair_id
from meshtui.protocol.messages import (
    HeldSecret,
    SecretCheckAnswer,
    SecretChecked,
    SecretCheckItem,
    SecretCheckRequest,
    SecretFetchAnswer,
    SecretFetched,
    SecretFetchItem,
    SecretFetchRequest,
    SecretStoreAnswer,
    SecretStored,
    SecretStoreItem,
    SecretStoreRequest,
)

_LOGIN = re.compile(r"[a-z0-9_]{1,63}")
DIGEST_KEY = MARK_DIGEST
VERSION_KEY = MARK_VERSION


def _store_of(name: str | None) -> tuple[Kind, OwnSecretStore]:
    """The kind that stores modules' own secrets named ``name`` (None: the one there is) and
    its store, reached through the kind's declaration only (UnknownKindError: not such a kind)."""
    kind = registry.own_secret_kind(name or None)
    assert kind.own_secrets is not None
    store: OwnSecretStore = kind.own_secrets.load()
    return kind, store


def _path(login: str, name: str) -> str:
    """``<login>/<name>`` once both are checked plain names (no '/', no '..')."""
    if not _LOGIN.fullmatch(login) or not NAME_RE.match(name):
        raise ValueError(f"{login!r}/{name!r} is not a module's own secret path")
    return f"{login}/{name}"


class OwnSecrets:
    """The agent's handlers for ``secret-store`` and ``secret-fetch``."""

    def __init__(self, identity: Identity, policy: Policy, holdings: Holdings) -> None:
        self.identity = identity
        self.policy = policy
        self.holdings = holdings
        self.state = StateFolder(identity.state_dir)
        self.written = SecretFiles(identity.state_dir)

    # ---- the vault's node ------------------------------------------------------------------
    def store(self, request: SecretStoreRequest) -> SecretStoreAnswer:
        """Write each sealed secret into the vault's KV (see the module docstring)."""
        out: list[SecretStored] = []
        ask = ProviderAsk(
            request["vault"],
            "secret",
            request["kind"],
            request["receives"],
            request["grants"],
            request["admin"],
            None,
        )
        refused = self.policy.provider_refusals(ask)
        if refused:
            return {"stored": [_stored(i, None, str(refused[0])) for i in request["items"]]}
        try:
            _, kind_store = _store_of(request["kind"])
            store = kind_store.admin(read_admin_file(node_path(request["admin"], "admin file")))
        except (MeshtuiError, ValueError) as exc:
            why = f"{request['vault']}: the admin file cannot be used: {exc}"
            return {"stored": [_stored(i, None, why) for i in request["items"]]}
        with store:
            for item in request["items"]:
                out.append(self._store_one(store, item))
        return {"stored": out}

    def _store_one(self, store: AdminStore, item: SecretStoreItem) -> SecretStored:
        where = f"{item['module']} secret {item['name']}"
        try:
            path = _path(item["login"], item["name"])
            value = self._unseal(item)
        except (ValueError, CryptoError) as exc:
            return _stored(item, None, f"{where}: {exc}")
        marks = {DIGEST_KEY: item["digest"], VERSION_KEY: str(item["version"])}
        try:
            held, current = store.marked(path)
            if current is not None and dict(held) == marks:
                return _stored(item, current, None)
            value.decode("utf-8")
            kv_version = store.put(path, value, marks)
            del value
        except UnicodeDecodeError:
            return _stored(item, None, f"{where}: the secret is not UTF-8 text")
        except (MeshtuiError, KeyError, TypeError, ValueError) as exc:
            return _stored(item, None, f"{where}: {exc}")
        return _stored(item, kv_version, None)

    def _unseal(self, item: SecretStoreItem) -> bytes:
        try:
            value = self.identity.keys.unseal(crypto.unb64(item["sealed"], "sealed"))
        except (CryptoError, ValueError) as exc:
            raise CryptoError(f"does not open with {self.identity.name}'s key") from exc
        if self._digest_of(item)(value) != item["digest"]:
            raise CryptoError("does not match its digest (tampered?)")
        return value

    def _local_digest(self, value: bytes) -> str:
        """The digest of a secret file as this node records it for itself: keyed under a key
        only this node's own key makes (never sent), so the node can tell later whether the
        file still holds it, and its record tells nothing to whoever reads it."""
        return crypto.keyed_digest(value, self.identity.keys.digest_key(b"own secret files"))

    def _held(self, w: Written, data: bytes | None) -> bool:
        """Whether ``data`` (a secret file's bytes now) is what the agent wrote there: by the
        node's own keyed digest; a record from before it kept one cannot tell a changed file
        from the one written and says it holds it (the next write records one)."""
        if data is None:
            return False
        if w.local is not None:
            return self._local_digest(data) == w.local
        if w.digest.startswith(crypto.KEYED_PREFIX):
            return True
        return crypto.secret_digest(data) == w.digest

    def _digest_of(
        self, item: SecretStoreItem | SecretFetchItem | SecretCheckItem
    ) -> Callable[[bytes], str]:
        """How this request's digests are made: keyed under the key it carries sealed to this
        node (docs/security-digests.md), or unkeyed for a version made before they were."""
        sealed = item.get("digest_key")
        if sealed is None:
            return crypto.secret_digest
        try:
            key = self.identity.keys.unseal(crypto.unb64(sealed, "digest key"))
        except (CryptoError, ValueError) as exc:
            raise CryptoError(
                f"its digest key does not open with {self.identity.name}'s key"
            ) from exc
        return partial(crypto.keyed_digest, key=key)

    # ---- the module's node -----------------------------------------------------------------
    def fetch(self, request: SecretFetchRequest) -> SecretFetchAnswer:
        """Read each secret from the vault as its module and write its file."""
        return {"fetched": [self._fetch_one(item) for item in request["items"]]}

    def _fetch_one(self, item: SecretFetchItem) -> SecretFetched:
        where = f"node {self.identity.name}: {item['module']} secret {item['name']}"
        try:
            path = _path(item["login"], item["name"])
            target = node_path(item["file"], "secret file")
            self.state.refuse_inside(target.parent, "secret file")
            want = files.resolve_access(item["owner"], item["group"], item["mode"])
            digest_of = self._digest_of(item)
            reload = self.policy.consumer(
                ConsumerAsk(
                    item["module"],
                    f"its secret {item['name']}",
                    item["file"],
                    item["owner"],
                    item["group"],
                    item["reload"],
                )
            )
        except PolicyRefusal as exc:
            return _fetched(item, None, str(exc))
        except (ValueError, HostFileError, CryptoError) as exc:
            return _fetched(item, None, f"{where}: {exc}")
        found = self._from_vault(item, path, where, item["kv_version"])
        value = found.value
        if value is None:
            return _fetched(item, None, found.error)
        if digest_of(value) != item["digest"]:
            return _fetched(item, None, f"{where}: the vault's value does not match its digest")
        data = value
        local = self._local_digest(value)
        was = self.written.get(item["module"], item["name"])
        try:
            files.write_credential(
                target,
                want,
                item["digest"],
                lambda: data,
                ours=lambda _: was is not None and was.file == str(target),
                digest_of=digest_of,
            )
        except HostFileError as exc:
            return _fetched(item, None, f"{where}: file: {exc}")
        except OSError as exc:
            return _fetched(item, None, f"{where}: cannot write {target}: {exc.strerror}")
        finally:
            data = value = b""
        self.written.put(
            item["module"],
            item["name"],
            Written(
                str(target),
                item["version"],
                item["digest"],
                want.owner,
                want.group,
                want.mode,
                local,
            ),
        )
        if was is not None and was.file != str(target):  # the declaration moved it
            keyed = was.digest.startswith(crypto.KEYED_PREFIX)
            files.remove_written(
                Path(was.file), was.digest, digest_of if keyed else crypto.secret_digest
            )
        ran = run_reload(reload) if reload is not None else None
        return _fetched(item, item["digest"], None, ran)

    def _from_vault(
        self, item: SecretFetchItem | SecretCheckItem, path: str, where: str, version: int | None
    ) -> VaultRead:
        """``path``'s ``version`` in the module's vault (None: the current one), its version
        number there and meshtui's marks on it, read as the module with the pair credential
        this node holds, through the vault kind's store (its Kind's ``own_secrets``); or why
        not, in the answer's ``error``."""
        try:
            kind, store = _store_of(item.get("kind"))
            vault = self.policy.server(
                kind.name,
                f"{item['module']} requires {VAULT_PROVISION}",
                item["host"],
                item["port"],
                item["ca"],
            )
            credential = self._vault_credential(item["module"], item["credential"])
        except PolicyRefusal as exc:
            return VaultRead(None, None, str(exc))
        except (HostFileError, UnknownKindError) as exc:
            return VaultRead(None, None, f"{where}: {exc}")
        held, why = files.read_credential(credential)
        if held is None:
            why = why or "missing"
            return VaultRead(
                None, None, f"{where}: the module's vault credential is not held ({why})"
            )
        secret_id = held.decode("utf-8", "replace").strip()
        del held
        found = store.read_as(
            vault.address, vault.port, vault.ca, item["login"], secret_id, path, version
        )
        del secret_id
        if found.value is None:
            return VaultRead(None, None, f"{where}: {found.error}")
        return found

    def _vault_credential(self, module: str, named: str) -> Path:
        """The credential file this agent wrote for ``module``'s vault pair, when ``named`` is
        it; HostFileError otherwise (nothing is read: any other path, however small and
        root-only, is not the module's vault credential)."""
        held = []
        for h in self.holdings.listing():
            if h["end"] != End.CONSUMER or "file" not in h:
                continue
            try:
                provision, consumer, _ = split_pair_id(h["pair"])
            except ValueError:
                continue
            if provision == VAULT_PROVISION and consumer == module:
                held.append(h["file"])
        if named in held:
            return Path(named)
        if not held:
            raise HostFileError(
                f"this node holds no vault credential for {module} (push delivers its "
                f"{VAULT_PROVISION!r} pair first); nothing was read"
            )
        raise HostFileError(
            f"{named} is not the vault credential this agent wrote for {module} "
            f"({', '.join(held)}); nothing was read"
        )

    def examined(self) -> list[HeldSecret]:
        """Each secret file this agent wrote, as it is now (read through checked folders, never
        through a link): whether it holds the digest written, and how its mode, owner and
        group differ from what was written."""
        out: list[HeldSecret] = []
        for key, w in sorted(self.written.listing().items()):
            module, name = key.split(" ", 1)
            want = files.held_access(w.owner, w.group, w.mode)
            access = want if isinstance(want, files.FileAccess) else None
            found = files.read_held(Path(w.file), access)
            held: HeldSecret = {
                "module": module,
                "name": name,
                "file": w.file,
                "version": w.version,
                "present": self._held(w, found.data),
            }
            unlike = list(found.unlike) + ([want] if isinstance(want, str) else [])
            if unlike and found.data is not None:
                held["unlike"] = unlike
            if found.error:
                held["error"] = found.error
            out.append(held)
        return out

    # ---- a drill ---------------------------------------------------------------------------
    def check(self, request: SecretCheckRequest) -> SecretCheckAnswer:
        """For each secret: the digest its file holds and the digest of the vault's current
        version read as the module (a drill proves with them that the old value is gone)."""
        return {"checked": [self._check_one(item) for item in request["items"]]}

    def _check_one(self, item: SecretCheckItem) -> SecretChecked:
        where = f"node {self.identity.name}: {item['module']} secret {item['name']}"
        out: SecretChecked = {
            "module": item["module"],
            "name": item["name"],
            "file_digest": None,
            "vault_digest": None,
            "kv_version": None,
            "error": None,
        }
        ask = ConsumerAsk(
            item["module"], f"its secret {item['name']}", item["file"], None, None, ()
        )
        try:
            path = _path(item["login"], item["name"])
            target = node_path(item["file"], "secret file")
            refused = self.policy.consumer_refusals(ask)
            if refused:
                raise refused[0]
            digest_of = self._digest_of(item)
        except PolicyRefusal as exc:
            out["error"] = str(exc)
            return out
        except (ValueError, CryptoError) as exc:
            out["error"] = f"{where}: {exc}"
            return out
        was = self.written.get(item["module"], item["name"])
        if was is None or was.file != str(target):
            out["error"] = f"{where}: file: {target} is not a file this agent wrote for it"
            return out
        held, why = files.read_credential(target)
        if held is not None:
            out["file_digest"] = digest_of(held)
            del held
        found = self._from_vault(item, path, where, None)
        error, marks = found.error, found.marks
        if found.value is not None:
            out["vault_digest"], out["kv_version"] = digest_of(found.value), found.version
            del found
            # what meshtui's last store marked the entry with: a current version whose digest
            # is not the marked one was written by someone else
            out["marked_digest"] = marks.get(DIGEST_KEY)
            out["marked_version"] = (
                int(marks[VERSION_KEY]) if marks.get(VERSION_KEY, "").isdigit() else None
            )
        problems = [p for p in (why and f"{where}: file: {why}", error) if p]
        out["error"] = "; ".join(problems) or None
        return out


def _stored(item: SecretStoreItem, kv_version: int | None, error: str | None) -> SecretStored:
    return {
        "module": item["module"],
        "name": item["name"],
        "version": item["version"],
        "kv_version": kv_version,
        "error": error,
    }


def _fetched(
    item: SecretFetchItem, digest: str | None, error: str | None, reload: str | None = None
) -> SecretFetched:
    return {
        "module": item["module"],
        "name": item["name"],
        "version": item["version"],
        "digest": digest,
        "reload": reload,
        "error": error,
    }
