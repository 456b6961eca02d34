"""The host agent's work, without HTTP: verify, unseal, write files, provision, probe, report.

Each request is a signed envelope from the pinned controller key; each answer is signed with
this node's key. Secrets exist only while a request is handled (and, for a drill, in memory
for a bounded time); they are never logged, returned or put in an exception.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, NotRequired, Protocol, TypedDict, TypeVar, cast

from meshtui import crypto, messages, wire
from meshtui.atomic import PRIVATE
from meshtui.errors import CryptoError, EnvelopeError, HostFileError, MeshtuiError, MessageError
from meshtui.host import checks as checks_mod
from meshtui.host import files
from meshtui.host import probe as probe_mod
from meshtui.host.anchor import AuditAnchor, is_nonce
from meshtui.host.guard import AcceptedGenerations, AcceptedRequests
from meshtui.host.holdings import Holdings
from meshtui.host.identity import Identity
from meshtui.messages import (
    CheckAnswer,
    CheckRequest,
    ConsumerItem,
    ConsumerOutcome,
    DeliverAnswer,
    DeliverRequest,
    DrillCheckAnswer,
    DrillHoldAnswer,
    DrillRequest,
    Holding,
    Inspection,
    InspectSpec,
    LoginOutcome,
    ManifestEntry,
    ProbeAnswer,
    ProbedPair,
    ProbeReport,
    ProbeRequest,
    ProviderOutcome,
    ProviderSet,
    StateAnswer,
    StateRequest,
    Target,
    WithdrawAnswer,
    WithdrawOutcome,
    WithdrawRequest,
)
from meshtui.model import APPLIED, NAME_RE, OutcomeName, Verdict, split_pair_id

if TYPE_CHECKING:
    from meshtui.provisioner.warm import WarmSessions

RELOAD_TIMEOUT_S = 30.0
PROVISION_TIMEOUT_S = 300.0
INSPECT_TIMEOUT_S = 5.0  # within the controller's STATE_TIMEOUT_S
DRILL_HOLD_S = 300.0
CONSUMER_WRITERS = 8
"""Credential files of one delivery written at once (their fsyncs then share commits)."""


class ProvisionReport(TypedDict):
    """What a provisioner reports to the agent: ok, each login's outcome, or why not."""

    ok: bool
    outcomes: list[LoginOutcome]
    error: NotRequired[str]


Provisioner = Callable[[Path, Path], ProvisionReport]


def builtin_provisioner(manifest: Path, admin: Path) -> ProvisionReport:
    """Run the built-in provisioner in-process; its outcomes.

    Its PostgreSQL admin sessions are kept warm between deliveries (:mod:`meshtui.provisioner.warm`):
    each is checked and its settings read again before it is used.
    """
    from meshtui.provisioner.harness import reconcile

    report = reconcile(manifest, admin, postgres=_warm_sessions().open)
    return {
        "ok": report.ok,
        "outcomes": [
            {
                "login": o.login,
                "outcome": o.outcome,
                "reason": o.reason,
                "node": o.node,
                "module": o.module,
            }
            for o in report.outcomes
        ],
    }


@functools.cache
def _warm_sessions() -> WarmSessions:
    """The agent process's kept admin sessions (one pool for every manifest it provisions)."""
    from meshtui.provisioner.warm import WarmSessions

    return WarmSessions()


Req = TypeVar("Req", bound=Mapping[str, object])
Ans = TypeVar("Ans", bound=Mapping[str, object])


class Accept(Protocol):
    """A checked request, ready to run: ``accept(payload)()`` is the answer."""

    def accept(self, payload: Mapping[str, object]) -> Callable[[], Mapping[str, object]]: ...


class Route(Generic[Req, Ans]):
    """One kind and its handler: the request is checked against the kind's shape, then run."""

    def __init__(self, kind: messages.Kind[Req, Ans], handler: Callable[[Req], Ans]) -> None:
        self.kind, self.handler = kind, handler

    def accept(self, payload: Mapping[str, object]) -> Callable[[], Ans]:
        """MessageError (naming the field) unless ``payload`` is this kind's request."""
        request = self.kind.request_of(payload)
        return lambda: self.handler(request)


def inspect_provider(spec: InspectSpec) -> Inspection:
    """The built-in provisioner's read-only inspection of one manifest, within a time bound.

    Per login: ``matches``, ``changed`` (changed outside meshtui), ``missing``, ``unknown``,
    ``waiting`` or ``refused``. Nothing is written; a declared command provisioner cannot be
    asked, so it answers no logins.
    """
    from meshtui.provisioner.harness import inspect

    out: Inspection = {
        "provider": spec["provider"],
        "provision": spec["provision"],
        "ok": False,
        "logins": [],
    }
    admin = spec["admin"]
    if (spec["provisioner"] or ["builtin:postgres"]) != ["builtin:postgres"]:
        out["error"] = "a declared provisioner command cannot be inspected"
        return out
    if not admin:
        out["error"] = "no admin conninfo file declared for the provisioner"
        return out
    try:
        manifest = node_path(spec["receives"], "manifest")
        admin_path = node_path(admin, "admin file")
    except ValueError as exc:
        out["error"] = str(exc)
        return out
    pool = ThreadPoolExecutor(max_workers=1)
    future = pool.submit(inspect, manifest, admin_path)
    pool.shutdown(wait=False)  # a hung server must not hold up the answer
    try:
        found = future.result(timeout=INSPECT_TIMEOUT_S)
    except FutureTimeout:
        out["error"] = f"PostgreSQL did not answer within {INSPECT_TIMEOUT_S:.0f} s"
        return out
    except Exception as exc:  # the inspection's failure is this answer, not the agent's
        text = str(exc).strip().splitlines()  # psycopg and our errors carry no secret
        out["error"] = text[0] if text else type(exc).__name__
        return out
    out["ok"] = True
    out["logins"] = [{"login": f.login, "verdict": f.verdict, "reason": f.reason} for f in found]
    return out


def secret_name(node: str, module: str) -> str:
    """The secret file's name beside the manifest (docs/ARCHITECTURE.md, the manifest)."""
    return f"{node}.{module}.secret"


class Agent:
    """One node's agent: identity, holdings, replay protection, drill memory.

    Replay protection survives restarts: the controller's sequence numbers and each pair end's
    generation are recorded on disk before a request is acted on (:mod:`meshtui.host.guard`).
    """

    def __init__(
        self,
        identity: Identity,
        *,
        allow_loopback: bool = False,
        provisioner: Provisioner = builtin_provisioner,
        probe_timeout: float = 5.0,
    ) -> None:
        self.identity = identity
        self.allow_loopback = allow_loopback
        self.provisioner = provisioner
        self.probe_timeout = probe_timeout
        self.holdings = Holdings(identity.state_dir)
        self.accepted = AcceptedRequests(identity.state_dir)
        self.generations = AcceptedGenerations(
            identity.state_dir, identity.name, self.holdings.listing()
        )
        self._state = own_state(identity.state_dir)
        self.anchor = AuditAnchor(identity.state_dir, identity.controller.verify)
        self._drills: dict[str, tuple[bytes, float]] = {}
        self._serials: dict[str, int] = {}  # manifest path -> the serial written last
        self._lock = threading.Lock()  # one delivery at a time: files and provisioner
        self._drill_lock = threading.Lock()
        self._routes: dict[str, Accept] = {
            r.kind.name: r
            for r in (
                Route(messages.STATE, self.state),
                Route(messages.DELIVER, self.deliver),
                Route(messages.WITHDRAW, self.withdraw),
                Route(messages.PROBE, self.probe),
                Route(messages.DRILL_HOLD, self.drill_hold),
                Route(messages.DRILL_CHECK, self.drill_check),
                Route(messages.CHECK, self.check),
            )
        }

    # ---- envelope -----------------------------------------------------------------------
    def handle(self, envelope: Any) -> tuple[int, dict[str, str]]:
        """Verify a request, do it, and sign the answer. Returns (HTTP status, envelope)."""
        me = self.identity.name
        try:
            msg = wire.open_envelope(
                envelope,
                verify_key=self.identity.controller.verify,
                sender=wire.CONTROLLER,
                to=me,
            )
        except EnvelopeError as exc:
            return 403, self._reply("error", {"error": str(exc)}, None)
        try:
            self.accepted.admit(msg.seq)  # durably recorded before anything is done
        except EnvelopeError as exc:
            return 403, self._reply("error", {"error": str(exc)}, None)
        except OSError as exc:
            return 500, self._reply(
                "error", {"error": f"{me} cannot record the request: {exc.strerror}"}, msg.nonce
            )
        if msg.head is not None:
            try:
                self.anchor.offer(msg.head)  # kept durably before the request is acted on
            except OSError as exc:
                return 500, self._reply(
                    "error",
                    {"error": f"{me} cannot keep the audit head: {exc.strerror}"},
                    msg.nonce,
                )
        route = self._routes.get(msg.kind)
        if route is None:
            return 400, self._reply("error", {"error": f"unknown kind {msg.kind!r}"}, msg.nonce)
        try:
            work = route.accept(msg.payload)  # the one check of the request's shape
        except MessageError as exc:
            return 400, self._reply("error", {"error": f"{me} refused: {exc}"}, msg.nonce)
        try:
            payload = work()
        except MeshtuiError as exc:
            return 422, self._reply("error", {"error": str(exc)}, msg.nonce)
        except ValueError as exc:  # a value that has the shape but not the meaning
            return 400, self._reply(
                "error", {"error": f"{me} refused {msg.kind}: {exc}"}, msg.nonce
            )
        except OSError as exc:
            return 500, self._reply(
                "error", {"error": f"{msg.kind} failed on {me}: {exc.strerror}"}, msg.nonce
            )
        finally:
            self._forget_expired_drills()
        return 200, self._reply(msg.kind, payload, msg.nonce)

    def read_anchor(self, nonce: str) -> tuple[int, dict[str, str]]:
        """Answer an unsigned read of the kept audit head, signed and quoting ``nonce``.

        No key is needed to ask (a read-only controller verifies with the public keys only):
        the answer is a number and a hash signed by the controller, which this node cannot
        invent, inside an answer signed by this node that quotes the asker's fresh nonce.
        Nothing is recorded or changed.
        """
        if not is_nonce(nonce):
            return 400, {"error": "nonce must be 32 to 64 hex characters"}
        head = self.anchor.head
        payload = {"node": self.identity.name, "head": head.to_json() if head else None}
        return 200, self._reply(wire.ANCHOR, payload, nonce)

    def check(self, payload: CheckRequest) -> CheckAnswer:
        """The node's side of ``meshtui doctor`` (reads and connects only; nothing is written)."""
        return checks_mod.run(self.identity.name, payload).to_json()

    def _reply(
        self, kind: str, payload: Mapping[str, object], reply_to: str | None
    ) -> dict[str, str]:
        env, _ = wire.envelope(
            kind,
            payload,
            sender=self.identity.name,
            to=wire.CONTROLLER,
            keys=self.identity.keys,
            reply_to=reply_to,
        )
        return env

    def _forget_expired_drills(self) -> None:
        with self._drill_lock:
            now = time.time()
            self._drills = {k: v for k, v in self._drills.items() if v[1] > now}

    # ---- state --------------------------------------------------------------------------
    def state(self, payload: StateRequest) -> StateAnswer:
        """Who this is and what it holds, by digest; checks each consumer file still matches.

        Asked with ``inspect`` (provider manifests), it also answers what each provider's server
        holds, from the provisioner's read-only inspection (:func:`inspect_provider`).
        """
        if payload.get("holdings") is False:  # only who this is (a rotation resolving it)
            return {
                "node": self.identity.name,
                "fingerprint": self.identity.keys.public().fingerprint(),
            }
        held = cast(list[Holding], self.holdings.listing())  # the agent's own record
        with files.Ancestors() as ancestors:
            for h in held:
                if h["end"] == "consumer":
                    data, error = files.read_credential(Path(h.get("file", "")), ancestors)
                    h["present"] = data is not None and crypto.secret_digest(data) == h["digest"]
                    if error:
                        h["error"] = error
        out: StateAnswer = {
            "node": self.identity.name,
            "fingerprint": self.identity.keys.public().fingerprint(),
            "holdings": held,
        }
        if "inspect" in payload:  # a provider: what its server holds, read-only
            out["inspected"] = [inspect_provider(spec) for spec in payload["inspect"]]
        return out

    # ---- deliver ------------------------------------------------------------------------
    def deliver(self, payload: DeliverRequest) -> DeliverAnswer:
        """Provider sets first (manifest + secrets + provisioner), then consumer credentials.

        An item of an older generation than this node accepted is refused first (unless it is
        the controller's rollback from that generation); nothing of a refused item is written.
        """
        with self._lock:
            refused = {r.key: r.reason for r in self.generations.admit(payload)}
            providers = [
                _refused_provider(s, why)
                if (why := refused.get(f"provider:{s['provider']}:{s['provision']}"))
                else self._deliver_provider(s)
                for s in payload.get("provider", [])  # either list may be left out
            ]
            held: dict[str, dict[str, Any] | None] = {}

            def one(c: ConsumerItem) -> ConsumerOutcome:
                why = refused.get(f"consumer:{c['pair']}")
                return _refused_consumer(c, why) if why else self._deliver_consumer(c, held)

            items = list(payload.get("consumer", []))
            if len(items) < 2:
                consumers = [one(c) for c in items]
            else:  # each file in its own folder: fsynced in parallel, committed together
                with ThreadPoolExecutor(max_workers=CONSUMER_WRITERS) as pool:
                    consumers = list(pool.map(one, items))
            if held:
                self.holdings.update("consumer", held)  # once, not once per credential
        return {"provider": providers, "consumer": consumers}

    def _unseal(self, sealed_b64: str, digest: str, pair: str) -> bytes:
        try:
            secret = self.identity.keys.unseal(crypto.unb64(sealed_b64, "sealed"))
        except (CryptoError, ValueError) as exc:
            raise CryptoError(
                f"{pair}: sealed credential does not open with {self.identity.name}'s key"
            ) from exc
        if crypto.secret_digest(secret) != digest:
            raise CryptoError(f"{pair}: sealed credential does not match its digest (tampered?)")
        return secret

    def _deliver_consumer(
        self, item: ConsumerItem, held: dict[str, dict[str, Any] | None]
    ) -> ConsumerOutcome:
        pair, gen = item["pair"], item["generation"]
        out: ConsumerOutcome = {"pair": pair, "generation": gen, "ok": False}
        if item["node"] != self.identity.name:
            out["error"] = f"delivery is for node {item['node']!r}, this is {self.identity.name!r}"
            return out
        try:
            path = node_path(item["file"], "credential file")
            self._outside_state(path.parent, "credential file")
        except ValueError as exc:
            out["error"] = str(exc)
            return out
        digest = item["digest"]
        try:
            provision, consumer, _ = split_pair_id(pair)
        except ValueError as exc:
            out["error"] = str(exc)
            return out
        where = f"node {self.identity.name}: {consumer} requires {provision}"
        try:
            want = files.resolve_access(item["owner"], item["group"], item["mode"])
            files.write_credential(
                path, want, digest, lambda: self._unseal(item["sealed"], digest, pair)
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
        out["written_at"] = time.time()
        held[pair] = {
            "generation": gen,
            "digest": digest,
            "file": str(path),
            "owner": want.owner,
            "group": want.group,
            "mode": want.mode,
        }
        out["ok"], out["digest"] = True, digest
        if item["reload"]:
            out["reload"] = _run_reload(item["reload"])
        return out

    def _deliver_provider(self, spec: ProviderSet) -> ProviderOutcome:
        provider, provision = spec["provider"], spec["provision"]
        out: ProviderOutcome = {
            "provider": provider,
            "provision": provision,
            "ok": False,
            "outcomes": [],
        }
        if provider.split("/", 1)[0] != self.identity.name:
            out["error"] = f"manifest is for {provider}, this node is {self.identity.name!r}"
            return out
        try:
            manifest = node_path(spec["receives"], "manifest")
            grants = node_path(spec["grants"], "grants folder")
            inside = grants.relative_to(manifest.parent).as_posix()
            self._outside_state(manifest.parent, "manifest")
            self._outside_state(grants, "grants folder")
            for c in spec["consumers"]:
                for name in (c["node"], c["module"]):
                    if not NAME_RE.match(name):
                        raise ValueError(f"consumer name {name!r} is not a node or module name")
        except ValueError as exc:
            out["error"] = f"{provider}: {exc}"
            return out
        rel = "" if inside == "." else inside + "/"
        consumers = spec["consumers"]
        try:
            error = self._write_provider_files(manifest, grants, rel, spec, consumers)
        except HostFileError as exc:
            error = f"node {self.identity.name}: {provider} {provision}: {exc}"
        except CryptoError as exc:
            error = str(exc)
        except OSError as exc:
            error = f"cannot write the manifest or secret files: {exc.strerror}"
        if error:
            out["error"] = error
            return out
        report = self._provision(spec, manifest)
        out["applied_at"] = time.time()
        out["outcomes"] = report["outcomes"]
        out["ok"] = report["ok"] and "error" not in report
        if "error" in report:
            out["error"] = report["error"]
        by_login = {o["login"]: o["outcome"] for o in out["outcomes"]}
        changes: dict[str, dict[str, Any] | None] = {}
        for c in consumers:
            if by_login.get(c["as"]) in APPLIED:
                changes[c["pair"]] = {
                    "generation": c["generation"],
                    "digest": c["digest"],
                    "provider": provider,
                    "login": c["as"],
                }
        listed = {c["pair"] for c in consumers}
        for h in self.holdings.listing():
            if h["end"] == "provider" and h.get("provider") == provider and h["pair"] not in listed:
                # a withdrawn pair stays held until its login is gone ("drop pending" is not gone)
                gone = by_login.get(str(h.get("login")), OutcomeName.REMOVED) == OutcomeName.REMOVED
                if gone and out["ok"]:
                    changes[h["pair"]] = None
        self.holdings.update("provider", changes)
        return out

    def _write_provider_files(
        self,
        manifest: Path,
        grants: Path,
        rel: str,
        spec: ProviderSet,
        consumers: list[ManifestEntry],
    ) -> str | None:
        """Secret files into the grants folder, then the manifest beside it; stale secrets go.

        Both folders are opened once, checked (real folders, the agent's own, nobody else may
        write them) and worked in by descriptor. Every blob is unsealed before anything is
        written, so a bad one changes nothing; an unsafe folder is refused before any write.
        """
        mdir = files.open_folder(manifest.parent, create=0o755)
        assert mdir is not None
        with mdir:
            gdir = files.open_folder(grants, create=0o700, own=True)
            assert gdir is not None
            with gdir:
                os.fchmod(gdir.fd, 0o700)
                secrets: dict[str, bytes] = {}
                for c in consumers:
                    name = secret_name(c["node"], c["module"])
                    current, _ = files.read_in(gdir, name)
                    if current is None or crypto.secret_digest(current) != c["digest"]:
                        secrets[name] = self._unseal(c["sealed"], c["digest"], c["pair"])
                gdir.write_many(secrets, PRIVATE)
                secrets.clear()
                serial = self._next_serial(mdir, manifest)
                body = {
                    "version": 1,
                    "provision": spec["provision"],
                    "provider": spec["provider"],
                    "serial": serial,
                    "pin": spec["pin"],
                    "consumers": [
                        {
                            "as": c["as"],
                            "node": c["node"],
                            "module": c["module"],
                            "at": c["at"],
                            "values": c["values"],
                            "secret": rel + secret_name(c["node"], c["module"]),
                            "digest": c["digest"],
                        }
                        for c in consumers
                    ],
                }
                if spec.get("kind", "postgres") != "postgres":  # absent: PostgreSQL
                    body["kind"] = spec["kind"]  # the harness picks its adapter by this
                mdir.write(manifest.name, manifest_text(body), PRIVATE)
                self._serials[str(manifest)] = serial
                wanted = {secret_name(c["node"], c["module"]) for c in consumers}
                for stale in gdir.names():
                    old = stale.endswith(".secret") and stale not in wanted
                    if old and not gdir.is_folder(stale):
                        gdir.remove(stale)
        return None

    def _next_serial(self, folder: files.Folder, manifest: Path) -> int:
        """One more than the serial this agent wrote last (read from the file after a start)."""
        last = self._serials.get(str(manifest))
        return last + 1 if last is not None else _next_serial(folder, manifest.name)

    def _provision(self, spec: ProviderSet, manifest: Path) -> ProvisionReport:
        argv = spec["provisioner"] or ["builtin:postgres"]
        admin = spec["admin"] or ""
        if argv == ["builtin:postgres"]:
            if not admin:
                return {
                    "ok": False,
                    "outcomes": [],
                    "error": "no admin conninfo file declared for the provisioner",
                }
            try:
                return self.provisioner(manifest, Path(admin))
            except MeshtuiError as exc:
                return {"ok": False, "outcomes": [], "error": str(exc)}
        argv = [a.replace("{admin}", admin) for a in argv]
        try:
            done = subprocess.run(
                [*argv, str(manifest)],
                capture_output=True,
                timeout=PROVISION_TIMEOUT_S,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            why = f"provisioner {argv[0]} failed to run: {exc}"
            return {"ok": False, "outcomes": [], "error": why}
        logins = [c["as"] for c in spec["consumers"]]
        return command_report(argv[0], done.returncode, done.stdout, logins)

    def _outside_state(self, folder: Path, what: str) -> None:
        """ValueError when ``folder`` is this agent's state folder or below it: a declaration
        must never make the agent overwrite its own key, pinned controller key or replay guard.

        The walk to any folder refuses links, so its path is its real path and a comparison of
        paths is enough; the folder's device and inode also catch a bind mount of the state.
        """
        path, ident = self._state
        if folder == path or path in folder.parents:
            raise ValueError(
                f"{what} {folder} is inside this agent's state folder {path}; "
                "choose a path outside it"
            )
        try:
            st = os.stat(folder, follow_symlinks=False)
        except OSError:
            return
        if (st.st_dev, st.st_ino) == ident:
            raise ValueError(f"{what} {folder} is this agent's state folder {path}; choose another")

    # ---- withdraw, probe, drill ---------------------------------------------------------
    def _target_login(self, target: Target, secret: bytes, *, control: bool) -> ProbeReport:
        result = probe_mod.probe_target(
            _probe_target(target, secret),
            timeout=self.probe_timeout,
            allow_loopback=self.allow_loopback,
            control=control,
        )
        return result.to_json()

    def withdraw(self, payload: WithdrawRequest) -> WithdrawAnswer:
        """Per withdrawn pair: try its last credential once (must be refused), then delete it."""
        results: list[WithdrawOutcome] = []
        for item in payload["consumer"]:
            pair = item["pair"]
            res: WithdrawOutcome = {"pair": pair, "removed": False, "probe": None}
            path = self._held_file(pair, item["file"])
            secret, error = files.read_credential(path) if path is not None else (None, None)
            if error:
                res["error"] = error  # not ours to delete: a FIFO, a link, another's folder
            if secret is not None and path is not None:
                res["probe"] = probed = self._target_login(item["target"], secret, control=False)
                del secret
                if probed["verdict"] != Verdict.REFUSED:
                    # not proven revoked: keep the file so the next push can try again
                    results.append(res)
                    continue
                try:
                    res["removed"] = files.remove_credential(path)
                except HostFileError as exc:
                    res["error"] = str(exc)
            self.holdings.update("consumer", {pair: None})
            results.append(res)
        return {"consumer": results}

    def _held_file(self, pair: str, named: str) -> Path | None:
        """The credential file this node wrote for ``pair``; None unless it matches ``named``."""
        held = self.holdings.get("consumer", pair)
        if held is None or named != held.get("file"):
            return None
        return Path(str(held["file"]))

    def probe(self, payload: ProbeRequest) -> ProbeAnswer:
        """Live logins with the credentials this node holds, a bounded number at a time."""
        items = payload["targets"]
        targets, order = [], []
        results: dict[str, ProbedPair] = {}
        with files.Ancestors() as ancestors:
            for item in items:
                pair = item["pair"]
                path = self._held_file(pair, item["file"])
                secret, error = (
                    files.read_credential(path, ancestors) if path is not None else (None, None)
                )
                if secret is None:
                    results[pair] = {
                        "pair": pair,
                        "digest": None,
                        "result": None,
                        "error": f"{self.identity.name}: {error}"
                        if error
                        else f"{self.identity.name} holds no credential for this pair "
                        f"(its file {item['file']} is missing or was not written by this agent)",
                    }
                    continue
                digest = crypto.secret_digest(secret)
                results[pair] = {"pair": pair, "digest": digest, "result": None}
                targets.append(_probe_target(item, secret))
                order.append(pair)
                del secret
        found = probe_mod.probe_many(
            targets,
            concurrency=payload.get("concurrency", 8),
            timeout=self.probe_timeout,
            allow_loopback=self.allow_loopback,
        )
        targets.clear()
        for pair, result in zip(order, found, strict=True):
            results[pair]["result"] = result.to_json()
        return {"results": [results[i["pair"]] for i in items]}

    def drill_hold(self, payload: DrillRequest) -> DrillHoldAnswer:
        """Log in with the current credential and keep it in memory for the drill's third login."""
        path = self._held_file(payload["pair"], payload["file"])
        secret, error = files.read_credential(path) if path is not None else (None, None)
        if secret is None:
            return {
                "result": None,
                "error": error or f"holds no credential for {payload['pair']}",
            }
        result = self._target_login(payload["target"], secret, control=True)
        with self._drill_lock:
            self._drills[payload["drill"]] = (secret, time.time() + DRILL_HOLD_S)
        return {"result": result, "digest": crypto.secret_digest(secret)}

    def drill_check(self, payload: DrillRequest) -> DrillCheckAnswer:
        """Log in with the new credential, then with the held old one; forget the old one."""
        with self._drill_lock:
            held = self._drills.pop(payload["drill"], None)
        path = self._held_file(payload["pair"], payload["file"])
        secret, _ = files.read_credential(path) if path is not None else (None, None)
        new = self._target_login(payload["target"], secret, control=False) if secret else None
        old = self._target_login(payload["target"], held[0], control=False) if held else None
        return {
            "new": new,
            "old": old,
            "digest": crypto.secret_digest(secret) if secret else None,
            "error": None if held else "the old credential was not held (agent restarted?)",
        }


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


def own_state(state_dir: Path) -> tuple[Path, tuple[int, int]]:
    """The agent's state folder as an absolute path and its (device, inode)."""
    path = Path(os.path.abspath(state_dir))
    st = os.stat(path)
    return path, (st.st_dev, st.st_ino)


def _probe_target(item: Target, secret: bytes) -> probe_mod.ProbeTarget:
    """A probe target from the controller's item (kind, CA and TLS for a Redis)."""
    return probe_mod.ProbeTarget(
        host=item["host"],
        port=item["port"],
        user=item["login"],
        password=secret.decode("ascii", "replace"),
        dbname=item["dbname"] or "postgres",
        kind=item.get("kind", "postgres"),  # absent: PostgreSQL
        ca=item.get("ca") or None,
        tls=item.get("tls", True),
    )


def node_path(text: str, what: str) -> Path:
    """A path the controller names on this node: absolute and without '..', or ValueError."""
    if not text.startswith("/") or ".." in text.split("/") or "\x00" in text:
        raise ValueError(f"{what} {text!r} must be an absolute path without '..'")
    return Path(text)


MAX_REASON = 300


def command_report(name: str, returncode: int, stdout: bytes, logins: list[str]) -> ProvisionReport:
    """What a declared provisioner command reported, kept to login, outcome and a short reason.

    Without a JSON report an exit 0 counts as applied ("updated, unverified"); the probes are
    what prove it. Anything else in its output is dropped, since it is shown and stored.
    """
    consumers = logins
    try:
        report = json.loads(stdout)
        given = report["outcomes"] if isinstance(report, dict) else None
        if not isinstance(given, list):
            raise ValueError
        outcomes: list[LoginOutcome] = [
            {
                "login": str(o.get("login", "")),
                "outcome": str(o.get("outcome", "failed")),
                "reason": str(o.get("reason", ""))[:MAX_REASON],
            }
            for o in given
            if isinstance(o, dict)
        ]
        ok = bool(report.get("ok", returncode == 0))
    except (ValueError, KeyError, TypeError):
        outcome = OutcomeName.UPDATED if returncode == 0 else OutcomeName.FAILED
        reason = "no JSON report; exit 0 taken as applied (unverified)" if returncode == 0 else ""
        outcomes = [{"login": c, "outcome": outcome, "reason": reason} for c in consumers]
        ok = returncode == 0
    out: ProvisionReport = {"ok": ok and returncode == 0, "outcomes": outcomes}
    if returncode != 0:
        out["error"] = f"provisioner {name} exited {returncode}"
    return out


def manifest_text(body: dict[str, Any]) -> bytes:
    """The manifest as JSON, one consumer a line (readable, and encoded by the C encoder,
    which ``indent`` would turn off: 10x slower for 1,000 consumers)."""
    head = {k: v for k, v in body.items() if k != "consumers"}
    lines = [json.dumps(c, separators=(", ", ": ")) for c in body["consumers"]]
    inner = ",\n ".join(lines)
    text = json.dumps(head)[:-1] + ', "consumers": [' + ("\n " + inner + "\n" if lines else "")
    return (text + "]}\n").encode()


def _next_serial(folder: files.Folder, name: str) -> int:
    """The manifest's next serial: one more than the one written before (1 when unreadable)."""
    try:
        data = folder.read(name, limit=files.MAX_MANIFEST)
        return int(json.loads(data or b"{}")["serial"]) + 1
    except (HostFileError, OSError, ValueError, KeyError, TypeError):
        return 1


def _run_reload(argv: list[str]) -> str:
    """Run a consumer's reload command (no shell, bounded); a one-line outcome."""
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            timeout=RELOAD_TIMEOUT_S,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"failed: {type(exc).__name__}"
    return "ok" if done.returncode == 0 else f"failed: exit {done.returncode}"
