"""One node's part of a delivery: provider sets (manifest, secrets, provisioner), then consumer
credential files, each checked against the replay guard before anything is written.

Secrets exist only while a delivery is handled: each is unsealed right before its file is
written and is never logged, returned or put in an exception.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from meshtui import crypto
from meshtui.credential_unit import render, unchanged, unit_digest
from meshtui.errors import CryptoError, HostFileError, PolicyRefusal
from meshtui.host import credential_files as files
from meshtui.host import log
from meshtui.host.policy import commands
from meshtui.host.policy.node_policy import Command, ConsumerAsk, Policy, ProviderAsk
from meshtui.host.policy.paths import StateFolder, node_path
from meshtui.host.receive.manifest_writer import Serials, write_provider_files
from meshtui.host.receive.prepared import PREPARED_LIMIT, Prepared
from meshtui.host.receive.run_provisioner import Provisioner, provision
from meshtui.host.state.guard import Accepted, Record
from meshtui.host.state.holdings import Held, Holdings
from meshtui.host.state.identity import Identity
from meshtui.kinds import registry
from meshtui.model import APPLIED, NAME_RE, SUCCESS, End, OutcomeName, split_pair_id
from meshtui.protocol.manifest import secret_name
from meshtui.protocol.messages import (
    ConnectionItem,
    ConsumerItem,
    ConsumerOutcome,
    DeliverAnswer,
    DeliverRequest,
    PrepareAnswer,
    PreparedOutcome,
    PrepareRequest,
    ProviderOutcome,
    ProviderSet,
)
from meshtui.runas import RunAsError
from meshtui.terminal import shown

RELOAD_TIMEOUT_S = 30.0
RELOAD_SAID_CHARS = 300
"""At most this much of a failed reload's last stderr line is reported."""
CONSUMER_WRITERS = 8
"""Credential files of one delivery written at once (their fsyncs then share commits)."""


class Deliveries:
    """This node's deliveries, one at a time: files and provisioner are never raced."""

    def __init__(
        self,
        identity: Identity,
        holdings: Holdings,
        accepted: Accepted,
        provisioner: Provisioner,
        policy: Policy,
    ) -> None:
        self.identity = identity
        self.policy = policy
        self.holdings = holdings
        self.accepted = accepted
        self.provisioner = provisioner
        self.state = StateFolder(identity.state_dir)
        self.serials = Serials()
        self.prepared = Prepared()
        self._lock = threading.Lock()
        self._accepting = threading.Lock()  # a check and its record, never raced

    def deliver(self, payload: DeliverRequest, record: Record) -> DeliverAnswer:
        """Provider sets first (manifest + secrets + provisioner), then consumer credentials.

        An item of an older generation than this node accepted is refused first (unless it is
        the controller's rollback from that generation); nothing of a refused item is written.
        The request and the generations accepted are recorded (``record``: one durable write)
        before any file is.
        """
        with self._lock:
            with self._accepting:
                refusals, changes = self.accepted.check(payload)
                record(changes)
            refused = {r.key: r.reason for r in refusals}
            providers = [
                _refused_provider(s, why)
                if (why := refused.get(f"provider:{s['provider']}:{s['provision']}"))
                else self._provider(s)
                for s in payload.get("provider", [])  # either list may be left out
            ]
            held: dict[str, Held | None] = {}

            def one(c: ConsumerItem) -> ConsumerOutcome:
                why = refused.get(f"consumer:{c['pair']}")
                return _refused_consumer(c, why) if why else self._consumer(c, held)

            items = list(payload.get("consumer", []))
            if len(items) < 2:
                consumers = [one(c) for c in items]
            else:  # each file in its own folder: fsynced in parallel, committed together
                with ThreadPoolExecutor(max_workers=CONSUMER_WRITERS) as pool:
                    consumers = list(pool.map(one, items))
            if held:  # once, not once per credential; written after the answer (a cache)
                self.holdings.update(End.CONSUMER, held, later=True)
        return {"provider": providers, "consumer": consumers}

    def unseal(self, sealed_b64: str, digest: str, pair: str) -> bytes:
        """The secret sealed to this node, checked against its digest; CryptoError naming the pair."""
        try:
            secret = self.identity.keys.unseal(crypto.unb64(sealed_b64, "sealed"))
        except (CryptoError, ValueError) as exc:
            raise CryptoError(
                f"{pair}: sealed credential does not open with {self.identity.name}'s key"
            ) from exc
        if crypto.secret_digest(secret) != digest:
            raise CryptoError(f"{pair}: sealed credential does not match its digest (tampered?)")
        return secret

    # ---- the consumer end ------------------------------------------------------------------
    def _consumer_file(self, item: ConsumerItem) -> tuple[Path, str, Command | None]:
        """Where ``item``'s credential goes, the words naming it in errors, and the reload
        command the node's policy allows for it; ValueError when it is not for this node or not
        a place the agent writes a credential, PolicyRefusal when the policy does not allow it."""
        if item["node"] != self.identity.name:
            raise ValueError(
                f"delivery is for node {item['node']!r}, this is {self.identity.name!r}"
            )
        path = node_path(item["file"], "credential file")
        self.state.refuse_inside(path.parent, "credential file")
        provision_name, consumer, _ = split_pair_id(item["pair"])
        connection = item["connection"]["file"] if "connection" in item else None
        reload = self.policy.consumer(
            ConsumerAsk(
                consumer,
                provision_name,
                item["file"],
                item["owner"],
                item["group"],
                item["reload"],
                connection,
            )
        )
        return path, f"node {self.identity.name}: {consumer} requires {provision_name}", reload

    def prepare(self, payload: PrepareRequest, record: Record) -> PrepareAnswer:
        """Write each credential ahead, unnamed (:mod:`meshtui.host.receive.prepared`): nothing is held
        until a delivery of the same item names it. An item this node would refuse to deliver
        (an older generation, another node, a bad path) is not prepared.

        With the number of the delivery signed ahead (``delivery``), that number and the
        generations it will be accepted with are recorded now, in this request's line, so the
        delivery finds its acceptance on disk already (:meth:`Accepted.record`).
        """
        items = payload["consumer"]
        with self._accepting:
            refusals, changes = self.accepted.check({"consumer": items})
            if "delivery" in payload:
                record(changes, [payload["delivery"]])
            else:
                record(())
        refused = {r.key: r.reason for r in refusals}
        return {"consumer": [self._prepare(c, refused) for c in items]}

    def _prepare(self, item: ConsumerItem, refused: dict[str, str]) -> PreparedOutcome:
        pair = item["pair"]
        done: PreparedOutcome = {"pair": pair, "ok": False}
        why = refused.get(f"consumer:{pair}")
        try:
            if why:
                raise ValueError(why)
            if not self.prepared.room(pair):
                raise ValueError(f"{pair}: not prepared, {PREPARED_LIMIT} are already")
            path, _, _ = self._consumer_file(item)
            want = files.resolve_access(item["owner"], item["group"], item["mode"])
            unnamed = files.prepare_credential(path, want, self._content(item))
        except (ValueError, HostFileError, CryptoError, PolicyRefusal) as exc:
            done["error"] = str(exc)
            return done
        except OSError as exc:
            done["error"] = f"{pair}: cannot prepare {item['file']}: {exc.strerror}"
            return done
        if not self.prepared.put(item, unnamed):  # filled meanwhile
            done["error"] = f"{pair}: not prepared, {PREPARED_LIMIT} are already"
            return done
        done["ok"] = True
        return done

    def _consumer(self, item: ConsumerItem, held: dict[str, Held | None]) -> ConsumerOutcome:
        pair, gen = item["pair"], item["generation"]
        out: ConsumerOutcome = {"pair": pair, "generation": gen, "ok": False}
        prepared = self.prepared.take(item)
        try:
            path, where, reload = self._consumer_file(item)
        except (ValueError, PolicyRefusal) as exc:
            if prepared is not None:
                prepared.close()
            out["error"] = str(exc)
            return out
        digest = item["digest"]
        try:
            want = files.resolve_access(item["owner"], item["group"], item["mode"])
            was = self.holdings.get(End.CONSUMER, pair)
            held_file = was.get("file") if was is not None else None
            # when the file began to hold it (a prepared one: its rename, before the folder's
            # fsync): the end of the rotation's window; the answer still waits for the fsync
            written_at = files.write_credential(
                path,
                want,
                digest,
                self._content(item),
                prepared,
                ours=lambda data: held_file == str(path) or crypto.is_minted(data),
                digest_of=_digest_of(item),
            )
        except HostFileError as exc:
            out["error"] = f"{where}: {exc}"
            return out
        except CryptoError as exc:
            out["error"] = str(exc)
            return out
        except OSError as exc:
            out["error"] = f"{where}: cannot write {path}: {exc.strerror}"
            return out
        finally:
            if prepared is not None:
                prepared.close()
        out["written_at"] = written_at
        record: Held = {
            "generation": gen,
            "digest": digest,
            "file": str(path),
            "owner": want.owner,
            "group": want.group,
            "mode": want.mode,
        }
        if "unit" in item:  # the login and the password in one file: its format, its lines
            unit = item["unit"]
            record["unit"] = unit["format"]
            record["unit_digest"] = unit_digest(unit["format"], unit["fields"])
        if "connection" in item:
            try:  # what the app needs besides the password, with the credential's access
                record["connection"], record["connection_digest"] = self._connection(
                    item["connection"], want, was.get("connection") if was is not None else None
                )
            except (ValueError, HostFileError) as exc:
                out["error"] = f"{where}: connection file: {exc}"
                return out
            except OSError as exc:
                out["error"] = f"{where}: cannot write {item['connection']['file']}: {exc.strerror}"
                return out
        self._forget_moved(pair, record)
        held[pair] = record
        out["ok"], out["digest"] = True, digest
        if reload is not None:
            out["reload"] = run_reload(reload)
            if out["reload"] != "ok":
                log.say(f"{pair}: reload {' '.join(reload.argv)} {out['reload']}")
        return out

    def _content(self, item: ConsumerItem) -> Callable[[], bytes]:
        """What ``item``'s credential file holds, made when it is written: the password it
        unseals, alone or as a unit's line (:mod:`meshtui.credential_unit`)."""
        pair, digest = item["pair"], item["digest"]
        if "unit" not in item:
            return lambda: self.unseal(item["sealed"], digest, pair)
        unit = item["unit"]

        def content() -> bytes:
            try:
                return render(
                    unit["format"], unit["fields"], self.unseal(item["sealed"], digest, pair)
                )
            except (KeyError, ValueError) as exc:
                raise HostFileError(
                    f"{pair}: cannot write its {unit['format']} file: {exc}"
                ) from None

        return content

    def _forget_moved(self, pair: str, now: Held) -> None:
        """The files this agent wrote for ``pair`` at paths the declaration moved away from
        are removed (only while they hold what it wrote): no live credential stays behind."""
        before = self.holdings.get(End.CONSUMER, pair)
        if before is None:
            return
        for path_key, digest_key in (("file", "digest"), ("connection", "connection_digest")):
            old, digest = before.get(path_key), before.get(digest_key)
            if isinstance(old, str) and isinstance(digest, str) and old != now.get(path_key):
                files.remove_written(Path(old), digest)

    def _connection(
        self, conn: ConnectionItem, want: files.FileAccess, held: str | None
    ) -> tuple[str, str]:
        """Write a consumer's connection file (no secret in it) as its credential file is
        written: by descriptor, owner, group and mode set before it appears, only when its
        text changed, and over an existing file only when this agent wrote it there (``held``:
        the connection file it holds for the pair). Its path and the digest of its text."""
        path = node_path(conn["file"], "connection file")
        self.state.refuse_inside(path.parent, "connection file")
        text = conn["text"].encode("utf-8")
        digest = crypto.secret_digest(text)
        files.write_credential(path, want, digest, lambda: text, ours=lambda _: held == str(path))
        return str(path), digest

    # ---- the provider end ------------------------------------------------------------------
    def _provider(self, spec: ProviderSet) -> ProviderOutcome:
        provider, provision_name = spec["provider"], spec["provision"]
        out: ProviderOutcome = {
            "provider": provider,
            "provision": provision_name,
            "ok": False,
            "outcomes": [],
        }
        if provider.split("/", 1)[0] != self.identity.name:
            out["error"] = f"manifest is for {provider}, this node is {self.identity.name!r}"
            return out
        try:
            manifest = node_path(spec["receives"], "manifest")
            grants = node_path(spec["grants"], "grants folder")
            grants.relative_to(manifest.parent)
            self.state.refuse_inside(manifest.parent, "manifest")
            self.state.refuse_inside(grants, "grants folder")
            for c in spec["consumers"]:
                for name in (c["node"], c["module"]):
                    if not NAME_RE.match(name):
                        raise ValueError(f"consumer name {name!r} is not a node or module name")
        except ValueError as exc:
            out["error"] = f"{provider}: {exc}"
            return out
        try:
            command = self.policy.provider(provider_ask(spec))
        except PolicyRefusal as exc:
            out["error"] = str(exc)
            return out
        try:
            written = write_provider_files(spec, manifest, grants, self.unseal, self.serials)
        except HostFileError as exc:
            out["error"] = f"node {self.identity.name}: {provider} {provision_name}: {exc}"
            return out
        except CryptoError as exc:
            out["error"] = str(exc)
            return out
        except OSError as exc:
            out["error"] = f"cannot write the manifest or secret files: {exc.strerror}"
            return out
        if written.refused is not None:  # a delta on another base: nothing was written
            out["error"] = out["base_refused"] = f"{provider} {provision_name}: {written.refused}"
            return out
        report = provision(
            spec, manifest, self.provisioner, written.logins, written.scoped, command=command
        )
        out["applied_at"] = time.time()
        out["outcomes"] = report["outcomes"]
        out["ok"] = report["ok"] and "error" not in report
        if "error" in report:
            out["error"] = report["error"]
        if not out["ok"]:
            failed = [f"{o['login']}: {o['outcome']} {o['reason']}" for o in report["outcomes"]
                      if o["outcome"] not in SUCCESS][:5]  # fmt: skip
            said = "; ".join(([report["error"]] if "error" in report else []) + failed)
            log.say(f"{provider} {provision_name}: provisioner not ok: {said}")
        self._record_provider(spec, out)
        return out

    def _record_provider(self, spec: ProviderSet, out: ProviderOutcome) -> None:
        """Hold what the provisioner applied; forget a withdrawn pair once its login is gone."""
        provider = spec["provider"]
        by_login = {o["login"]: o["outcome"] for o in out["outcomes"]}
        grants = node_path(spec["grants"], "grants folder")
        manifest = str(node_path(spec["receives"], "manifest"))
        changes: dict[str, Held | None] = {}
        for c in spec["consumers"]:
            if by_login.get(c["as"]) in APPLIED:
                changes[c["pair"]] = {
                    "generation": c["generation"],
                    "digest": c["digest"],
                    "provider": provider,
                    "login": c["as"],
                    "file": str(grants / secret_name(c["node"], c["module"])),
                    "manifest": manifest,
                }
        listed = {c["pair"] for c in spec["consumers"]}
        delta, removed = "base" in spec, set(spec.get("removed", []))
        # a delta names what goes; the rest of the manifest stays as it was
        for h in self.holdings.listing() if not delta or removed else []:
            if delta and h.get("login") not in removed:
                continue
            if h["end"] == "provider" and h.get("provider") == provider and h["pair"] not in listed:
                # a withdrawn pair stays held until its login is gone ("drop pending" is not gone)
                gone = by_login.get(str(h.get("login")), OutcomeName.REMOVED) == OutcomeName.REMOVED
                if gone and out["ok"]:
                    changes[h["pair"]] = None
        # written once the answer is sent (the agent persists it then): a cache, see Holdings
        self.holdings.update(End.PROVIDER, changes, later=True)


def _refused_provider(spec: ProviderSet, why: str) -> ProviderOutcome:
    return {
        "provider": spec["provider"],
        "provision": spec["provision"],
        "ok": False,
        "outcomes": [],
        "error": why,
    }


def _refused_consumer(item: ConsumerItem, why: str) -> ConsumerOutcome:
    return {
        "pair": item["pair"],
        "generation": item["generation"],
        "ok": False,
        "error": why,
    }


def provider_ask(spec: ProviderSet) -> ProviderAsk:
    """What a provider set asks of this node, for its policy."""
    return ProviderAsk(
        spec["provider"],
        spec["provision"],
        registry.name_of(spec.get("kind")),
        spec["receives"],
        spec["grants"],
        spec["admin"],
        spec["provisioner"],
    )


def _digest_of(item: ConsumerItem) -> Callable[[bytes], str]:
    """How a credential file already there is compared with ``item``: the digest of the
    password it holds, and for a unit only when all its other lines are ``item``'s too."""
    if "unit" not in item:
        return crypto.secret_digest
    unit = item["unit"]

    def digest_of(data: bytes) -> str:
        password = unchanged(unit["format"], unit["fields"], data)
        return crypto.secret_digest(password) if password is not None else ""

    return digest_of


def run_reload(command: Command) -> str:
    """Run a consumer's reload command as the policy's user (no shell, a new session, bounded);
    a one-line outcome.

    A failure carries the last line the command wrote on stderr (bounded, control characters
    shown as ``\\xNN``): "failed: exit 1" alone never told an operator why.
    """
    try:
        done = commands.run(command, timeout=RELOAD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"failed: no exit within {RELOAD_TIMEOUT_S:.0f} s"
    except RunAsError as exc:
        return f"failed: {exc}"
    except OSError as exc:
        return f"failed: cannot run {command.argv[0]}: {exc.strerror or type(exc).__name__}"
    if done.returncode == 0:
        return "ok"
    said = [ln.strip() for ln in done.stderr.decode(errors="replace").splitlines() if ln.strip()]
    tail = f": {shown(said[-1][:RELOAD_SAID_CHARS])}" if said else ""
    return f"failed: exit {done.returncode}{tail}"
