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
(:mod:`meshtui.host.secret_files` records what it wrote), as a pair's credential file.

``check`` (on the module's node, for a drill): the digest of the file the agent wrote for a
secret (only that file, only where the policy allows a credential file) and the digest of the
vault's current version, read as the module; never a value.

Values live here only in memory, for one request; no log, answer or error carries them.
"""

from __future__ import annotations

import re
from pathlib import Path

from meshtui import crypto
from meshtui.bao import APPROLE_MOUNT, KV_MOUNT, Bao, BaoError, read_admin, scrub
from meshtui.errors import CryptoError, HostFileError, MeshtuiError, PolicyRefusal
from meshtui.host import files
from meshtui.host.deliver import run_reload
from meshtui.host.identity import Identity
from meshtui.host.paths import StateFolder, node_path
from meshtui.host.policy import ConsumerAsk, Policy, ProviderAsk
from meshtui.host.secret_files import SecretFiles, Written
from meshtui.messages import (
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
from meshtui.model import NAME_RE
from meshtui.provisioner.files import read_admin as read_admin_file

_LOGIN = re.compile(r"[a-z0-9_]{1,63}")
DIGEST_KEY = "meshtui_digest"
VERSION_KEY = "meshtui_version"


def _path(login: str, name: str) -> str:
    """``<login>/<name>`` once both are checked plain names (no '/', no '..')."""
    if not _LOGIN.fullmatch(login) or not NAME_RE.match(name):
        raise ValueError(f"{login!r}/{name!r} is not a module's own secret path")
    return f"{login}/{name}"


class OwnSecrets:
    """The agent's handlers for ``secret-store`` and ``secret-fetch``."""

    def __init__(self, identity: Identity, policy: Policy) -> None:
        self.identity = identity
        self.policy = policy
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
            admin = read_admin(read_admin_file(node_path(request["admin"], "admin file")))
            bao = Bao(admin.get("address", ""), ca=admin.get("ca"), token=admin.get("token"))
        except (MeshtuiError, ValueError) as exc:
            why = f"{request['vault']}: the admin file cannot be used: {exc}"
            return {"stored": [_stored(i, None, why) for i in request["items"]]}
        with bao:
            for item in request["items"]:
                out.append(self._store_one(bao, item))
        return {"stored": out}

    def _store_one(self, bao: Bao, item: SecretStoreItem) -> SecretStored:
        where = f"{item['module']} secret {item['name']}"
        try:
            path = _path(item["login"], item["name"])
            value = self._unseal(item)
        except (ValueError, CryptoError) as exc:
            return _stored(item, None, f"{where}: {exc}")
        try:
            meta = bao.data("GET", f"{KV_MOUNT}/metadata/{path}", missing_ok=True) or {}
            custom = meta.get("custom_metadata") or {}
            if custom.get(DIGEST_KEY) == item["digest"] and custom.get(VERSION_KEY) == str(
                item["version"]
            ):
                return _stored(item, int(meta["current_version"]), None)
            text = value.decode("utf-8")
            written = bao.data(
                "POST", f"{KV_MOUNT}/data/{path}", {"data": {"value": text}}, secrets=[text]
            )
            del text, value
            kv_version = int((written or {})["version"])
            bao.call(
                "POST",
                f"{KV_MOUNT}/metadata/{path}",
                {
                    "custom_metadata": {
                        DIGEST_KEY: item["digest"],
                        VERSION_KEY: str(item["version"]),
                    }
                },
            )
        except UnicodeDecodeError:
            return _stored(item, None, f"{where}: the secret is not UTF-8 text")
        except (BaoError, KeyError, TypeError, ValueError) as exc:
            return _stored(item, None, f"{where}: {exc}")
        return _stored(item, kv_version, None)

    def _unseal(self, item: SecretStoreItem) -> bytes:
        try:
            value = self.identity.keys.unseal(crypto.unb64(item["sealed"], "sealed"))
        except (CryptoError, ValueError) as exc:
            raise CryptoError(f"does not open with {self.identity.name}'s key") from exc
        if crypto.secret_digest(value) != item["digest"]:
            raise CryptoError("does not match its digest (tampered?)")
        return value

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
        except (ValueError, HostFileError) as exc:
            return _fetched(item, None, f"{where}: {exc}")
        value, _, error = self._from_vault(item, path, where, item["kv_version"])
        if value is None:
            return _fetched(item, None, error)
        if crypto.secret_digest(value) != item["digest"]:
            return _fetched(item, None, f"{where}: the vault's value does not match its digest")
        data = value
        was = self.written.get(item["module"], item["name"])
        try:
            files.write_credential(
                target,
                want,
                item["digest"],
                lambda: data,
                ours=lambda _: was is not None and was.file == str(target),
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
                str(target), item["version"], item["digest"], want.owner, want.group, want.mode
            ),
        )
        if was is not None and was.file != str(target):  # the declaration moved it
            files.remove_written(Path(was.file), was.digest)
        ran = run_reload(reload) if reload is not None else None
        return _fetched(item, item["digest"], None, ran)

    def _from_vault(
        self, item: SecretFetchItem | SecretCheckItem, path: str, where: str, version: int | None
    ) -> tuple[bytes | None, int | None, str]:
        """The value of ``path``'s KV ``version`` (None: the current one) and its KV version,
        read as the module: an AppRole login with the pair credential this node holds, the
        token revoked after; or (None, None, why not)."""
        held, why = files.read_credential(node_path(item["credential"], "credential file"))
        if held is None:
            why = why or "missing"
            return None, None, f"{where}: the module's vault credential is not held ({why})"
        secret_id = held.decode("utf-8", "replace").strip()
        del held
        host = f"[{item['host']}]" if ":" in item["host"] else item["host"]
        try:
            bao = Bao(f"https://{host}:{item['port']}", ca=item["ca"])
        except MeshtuiError as exc:
            return None, None, f"{where}: {exc}"
        with bao:
            try:
                login = bao.call(
                    "POST",
                    f"auth/{APPROLE_MOUNT}/login",
                    {"role_id": item["login"], "secret_id": secret_id},
                    secrets=[secret_id],
                )
                token = str(((login or {}).get("auth") or {})["client_token"])
            except (BaoError, KeyError, TypeError) as exc:
                return None, None, f"{where}: AppRole login: {scrub(str(exc), [secret_id])}"
            finally:
                del secret_id
            query = "" if version is None else f"?version={int(version)}"
            try:
                found = bao.data("GET", f"{KV_MOUNT}/data/{path}{query}", token=token) or {}
                value = str((found.get("data") or {})["value"]).encode("utf-8")
                kv_version = int((found.get("metadata") or {}).get("version") or 0) or None
            except (BaoError, KeyError, TypeError, ValueError) as exc:
                return None, None, f"{where}: reading it from the vault: {exc}"
            finally:
                try:
                    bao.call("POST", "auth/token/revoke-self", token=token)
                except BaoError:
                    pass  # short-lived: it expires within the role's token TTL
                del token
        return value, kv_version, ""

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
                "present": found.data is not None and crypto.secret_digest(found.data) == w.digest,
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
        except PolicyRefusal as exc:
            out["error"] = str(exc)
            return out
        except ValueError as exc:
            out["error"] = f"{where}: {exc}"
            return out
        was = self.written.get(item["module"], item["name"])
        if was is None or was.file != str(target):
            out["error"] = f"{where}: file: {target} is not a file this agent wrote for it"
            return out
        held, why = files.read_credential(target)
        if held is not None:
            out["file_digest"] = crypto.secret_digest(held)
            del held
        value, kv_version, error = self._from_vault(item, path, where, None)
        if value is not None:
            out["vault_digest"], out["kv_version"] = crypto.secret_digest(value), kv_version
            del value
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
