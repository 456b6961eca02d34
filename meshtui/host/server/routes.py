"""The host agent without HTTP: verify a request, route it to its work, sign the answer.

Deliveries (files, manifest, provisioner) are :mod:`meshtui.host.receive.delivery`'s; this module keeps
the envelope, the routes, and the read-side work: state, withdraw, probe and drill.

Each request is a signed envelope from a controller this node accepts, verified with that
controller's key (:mod:`meshtui.host.policy.controller_keys`: the policy's ``[[controllers]]``,
else the pinned key); each answer is signed with this node's key. Secrets exist only while a request is handled (and, for a drill, in memory
for a bounded time); they are never logged, returned or put in an exception.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from meshtui import crypto, folders
from meshtui.credential_unit import held_password
from meshtui.errors import HostFileError
from meshtui.host import checks as checks_mod
from meshtui.host import credential_files as files
from meshtui.host import log
from meshtui.host import probe_runner as probe_mod
from meshtui.host.module_secrets import OwnSecrets
from meshtui.host.policy import node_policy as policy_mod
from meshtui.host.policy.controller_keys import Controllers
from meshtui.host.receive.delivery import Deliveries
from meshtui.host.receive.run_provisioner import Provisioner, builtin_provisioner, inspect_provider
from meshtui.host.server.answers import Asked, Refused, Step, answering
from meshtui.host.state.anchor import AuditAnchor, is_nonce
from meshtui.host.state.guard import Accepted, Change, Record
from meshtui.host.state.holdings import Holdings, examine_all
from meshtui.host.state.identity import Identity
from meshtui.kinds import registry
from meshtui.model import End, Verdict
from meshtui.protocol import messages, wire
from meshtui.protocol.messages import (
    AnchorAnswer,
    CheckAnswer,
    CheckRequest,
    DrillCheckAnswer,
    DrillHoldAnswer,
    DrillRequest,
    Inspection,
    InspectSpec,
    ProbeAnswer,
    ProbedPair,
    ProbeReport,
    ProbeRequest,
    StateAnswer,
    StateRequest,
    Target,
    WithdrawAnswer,
    WithdrawOutcome,
    WithdrawRequest,
)

DRILL_HOLD_S = 300.0

Envelope = bytes | bytearray | Mapping[str, object]
"""A request as it came (the body's bytes), or as made in this process (tests, benchmarks)."""


Req = TypeVar("Req", bound=Mapping[str, object])
Ans = TypeVar("Ans", bound=Mapping[str, object])


class Accept(Protocol):
    """A checked request, ready to run: ``accept(payload, record)()`` records the request
    durably (:mod:`meshtui.host.state.guard`), then answers."""

    def accept(
        self, payload: messages.Payload, record: Record
    ) -> Callable[[], Mapping[str, object]]: ...


class Route(Generic[Req, Ans]):
    """One kind and its handler: the request is checked against the kind's shape, then run."""

    def __init__(self, kind: messages.Kind[Req, Ans], handler: Callable[[Req], Ans]) -> None:
        self.kind, self.handler = kind, handler

    def accept(self, payload: messages.Payload, record: Record) -> Callable[[], Ans]:
        """MessageError (naming the field) unless ``payload`` is this kind's request."""
        request = self.kind.request_of(payload)

        def work() -> Ans:
            record(())  # durably accepted before it is acted on
            return self.handler(request)

        return work


class RecordedRoute(Route[Req, Ans]):
    """A kind whose handler records the request itself, once, with what it accepts (a
    delivery: the generations, checked and recorded under its lock)."""

    def __init__(
        self, kind: messages.Kind[Req, Ans], handler: Callable[[Req, Record], Ans]
    ) -> None:
        super().__init__(kind, lambda request: handler(request, lambda *_: None))
        self.recorded = handler

    def accept(self, payload: messages.Payload, record: Record) -> Callable[[], Ans]:
        request = self.kind.request_of(payload)
        return lambda: self.recorded(request, record)


class Agent:
    """One node's agent: identity, holdings, replay protection, drill memory.

    Replay protection survives restarts: the controller's sequence numbers and each pair end's
    generation are recorded on disk before a request is acted on (:mod:`meshtui.host.state.guard`).
    """

    def __init__(
        self,
        identity: Identity,
        *,
        allow_loopback: bool = False,
        provisioner: Provisioner = builtin_provisioner,
        probe_timeout: float = 5.0,
        policy: policy_mod.Policy | None = None,
    ) -> None:
        """``policy``: what this node allows; read from its state folder when not given
        (PolicyFileError, and the agent does not start, when it is missing or unsafe)."""
        self.identity = identity
        self.policy = policy or policy_mod.load(identity.state_dir, identity.name)
        self.controllers = Controllers(
            identity.name,
            self.policy.path,
            identity.controller.verify,
            {c.name: c.verify for c in self.policy.controllers},
        )
        self.allow_loopback = allow_loopback
        self.probe_timeout = probe_timeout
        self.holdings = Holdings(identity.state_dir)
        self.accepted = Accepted(identity.state_dir, identity.name, self.holdings.listing())
        self.deliveries = Deliveries(
            identity, self.holdings, self.accepted, provisioner, self.policy
        )
        self.anchor = AuditAnchor(
            identity.state_dir,
            self.controllers.key_of,
            self.accepted.head,
            self.accepted.history,
        )
        self._drills: dict[str, tuple[bytes, float]] = {}
        self.own_secrets = OwnSecrets(identity, self.policy, self.holdings)
        self._drill_lock = threading.Lock()
        self._routes: dict[str, Accept] = {
            r.kind.name: r
            for r in (
                Route(messages.STATE, self.state),
                RecordedRoute(messages.DELIVER, self.deliveries.deliver),
                RecordedRoute(messages.PREPARE, self.deliveries.prepare),
                Route(messages.WITHDRAW, self.withdraw),
                Route(messages.PROBE, self.probe),
                Route(messages.DRILL_HOLD, self.drill_hold),
                Route(messages.DRILL_CHECK, self.drill_check),
                Route(messages.CHECK, self.check),
                Route(messages.SECRET_STORE, self.own_secrets.store),
                Route(messages.SECRET_FETCH, self.own_secrets.fetch),
                Route(messages.SECRET_CHECK, self.own_secrets.check),
            )
        }

    # ---- envelope -----------------------------------------------------------------------
    def handle(self, envelope: Envelope) -> tuple[int, dict[str, str]]:
        """Verify a request, do it, and sign the answer. Returns (HTTP status, envelope)."""
        status, answer, after = self.answer(envelope)
        if after is not None:
            after()
        return status, answer

    def answer(self, envelope: Envelope) -> tuple[int, dict[str, str], Callable[[], None] | None]:
        """:meth:`handle`, leaving to the returned callable what need not delay the answer
        (the readable copy of the audit head: the guard's durable line already holds it; a
        provider's holdings, a cache; the digest of the manifest just written, for the next
        delta), to be called once the answer is sent; None when nothing is left to do."""
        kept: list[bool] = []
        started, kinds = time.monotonic(), list[str]()
        status, answer = self._answer(envelope, kept, kinds)
        log.request(kinds[0] if kinds else "?", status, answer, time.monotonic() - started)
        later = kept or self.holdings.unwritten or self.deliveries.serials.unsettled
        return status, answer, self._after_answer if later else None

    def _after_answer(self) -> None:
        with contextlib.suppress(OSError):  # a failed copy loses nothing: the guard holds it
            self.anchor.copy()
        with contextlib.suppress(OSError):  # a cache: the next update writes it whole again
            self.holdings.persist()
        self.deliveries.serials.settle()  # the next delta's base digest, off its path

    def _answer(
        self, envelope: Envelope, kept: list[bool], kinds: list[str]
    ) -> tuple[int, dict[str, str]]:
        me = self.identity.name
        try:
            with answering(Step.OPEN, Asked(me)):
                msg = wire.open_envelope(
                    envelope,
                    verify_key=self.controllers.key_of,
                    sender=wire.CONTROLLER,
                    to=me,
                )
            recorded: list[int] = []
            asked = Asked(me, msg.kind, msg.nonce, recorded)
            # a delivering request's epoch is fenced: below the highest accepted, refused
            epoch = msg.epoch if msg.kind in wire.DELIVERING else None
            with answering(Step.TAKE, asked):
                # durably recorded below, before anything is done
                self.accepted.take(msg.seq, msg.controller, epoch)
            kinds.append(msg.kind)
            route = self._routes.get(msg.kind)
            if route is None:
                return 400, self._reply("error", {"error": f"unknown kind {msg.kind!r}"}, msg.nonce)
            head = msg.head if msg.head is not None and self.anchor.wants(msg.head) else None

            def record(changes: Sequence[Change], ahead: Sequence[int] = ()) -> None:
                # the audit head goes in the same durable line, before the request is acted on
                self.accepted.record(
                    msg.seq,
                    changes,
                    head.to_json() if head else None,
                    ahead,
                    controller=msg.controller,
                    epoch=epoch or 0,
                )
                recorded.append(msg.seq)

            with answering(Step.CHECK, asked):
                work = route.accept(msg.payload, record)  # the one check of the request's shape
            try:
                with answering(Step.WORK, asked):
                    payload = work()
            finally:
                self._forget_expired_drills()
                if head is not None and recorded:
                    # the head is durable in the guard's line; its readable copy is written after
                    # the answer is sent (outside a rotation's window), and a failed copy loses
                    # nothing
                    self.anchor.take(head)
                    kept.append(True)
        except Refused as refused:
            error: dict[str, object] = {"error": refused.error}
            if refused.nonce is None:
                return refused.status, {"error": refused.error}
            error.update(refused.fields)  # signed: the node's word the controller acts on
            return refused.status, self._reply("error", error, refused.nonce)
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
        payload: AnchorAnswer = {
            "node": self.identity.name,
            "head": head.to_json() if head else None,
            "history": [h.to_json() for h in self.anchor.history],
            "accepted": self.accepted.high_water(),
            "controller": self.identity.controller.fingerprint(),
            "controllers": [
                {"name": name, "fingerprint": fp} for name, fp in self.controllers.listing()
            ],
        }
        return 200, self._reply(messages.ANCHOR.name, payload, nonce)

    def check(self, payload: CheckRequest) -> CheckAnswer:
        """The node's side of ``meshtui doctor`` (reads and connects only; nothing is written)."""
        return checks_mod.run(self.identity.name, payload, self.policy)

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
        holds, from the provisioner's read-only inspection (:func:`inspect_provider`); with
        ``holdings`` False (a rotation resolving it), only whether each admin file works.
        """
        who: StateAnswer = {
            "node": self.identity.name,
            "fingerprint": self.identity.keys.public().fingerprint(),
        }
        if payload.get("secrets"):  # its modules' own secret files, as they are
            who["secrets"] = self.own_secrets.examined()
        if payload.get("holdings") is False:  # only who this is (a rotation resolving it)
            if "inspect" in payload:  # and whether its providers' admin files still work
                who["inspected"] = [self._inspect(spec) for spec in payload["inspect"]]
            return who
        held = self.holdings.listing()  # the agent's own record
        with folders.Ancestors() as ancestors:
            examine_all(held, ancestors)  # each holding's files as they are, not as recorded
        out: StateAnswer = {**who, "holdings": held}
        if "inspect" in payload:  # a provider: what its server holds, read-only
            out["inspected"] = [self._inspect(spec) for spec in payload["inspect"]]
        return out

    def _inspect(self, spec: InspectSpec) -> Inspection:
        """:func:`inspect_provider`, when this node's policy allows its manifest and admin file."""
        refused = self.policy.inspect_refusal(
            spec["provider"], spec["provision"], spec["receives"], spec["admin"]
        )
        if refused is None:
            return inspect_provider(spec)
        return {
            "provider": spec["provider"],
            "provision": spec["provision"],
            "ok": False,
            "logins": [],
            "error": str(refused),
        }

    # ---- withdraw, probe, drill ---------------------------------------------------------
    def _target_login(
        self, pair: str, target: Target, secret: bytes, *, control: bool
    ) -> ProbeReport:
        refused = self.policy.send_refusal(pair, target)
        if refused is not None:  # a server its policy does not list: the credential stays here
            return probe_mod.not_run(f"not run: {refused}").to_json()
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
            path, secret, error = self._held_password(pair, item["file"])
            if error:
                res["error"] = error  # not ours to delete: a FIFO, a link, another's folder
            if secret is not None and path is not None:
                res["probe"] = probed = self._target_login(
                    pair, item["target"], secret, control=False
                )
                del secret
                if probed["verdict"] != Verdict.REFUSED:
                    # not proven revoked: keep the file so the next push can try again
                    results.append(res)
                    continue
                try:
                    res["removed"] = files.remove_credential(path)
                except HostFileError as exc:
                    res["error"] = str(exc)
            held = self.holdings.get(End.CONSUMER, pair)
            if held is not None and "connection" in held and "connection_digest" in held:
                # and the connection file it wrote beside (only while it holds what was written)
                files.remove_written(Path(held["connection"]), held["connection_digest"])
            self.holdings.update(End.CONSUMER, {pair: None})
            results.append(res)
        return {"consumer": results}

    def _held_password(self, pair: str, named: str) -> tuple[Path | None, bytes | None, str | None]:
        """The credential file this node wrote for ``pair`` (None unless it matches
        ``named``), the password it holds (a unit's password line) and why it cannot be read."""
        path = self._held_file(pair, named)
        if path is None:
            return None, None, None
        data, error = files.read_credential(path)
        held = self.holdings.get(End.CONSUMER, pair)
        shape = held.get("unit") if held is not None else None
        return path, held_password(shape, data) if data is not None else None, error

    def _held_file(self, pair: str, named: str) -> Path | None:
        """The credential file this node wrote for ``pair``; None unless it matches ``named``."""
        held = self.holdings.get(End.CONSUMER, pair)
        if held is None or named != held.get("file"):
            return None
        return Path(str(held["file"]))

    def probe(self, payload: ProbeRequest) -> ProbeAnswer:
        """Live logins with the credentials this node holds, a bounded number at a time."""
        items = payload["targets"]
        targets, order = [], []
        results: dict[str, ProbedPair] = {}
        with folders.Ancestors() as ancestors:
            for item in items:
                pair = item["pair"]
                path = self._held_file(pair, item["file"])
                refused = self.policy.send_refusal(pair, item)
                holding = (
                    self.holdings.examined(pair, ancestors)
                    if path is not None and refused is None
                    else None
                )
                secret, error = (
                    (holding.data, holding.error)
                    if holding
                    else (None, str(refused) if refused else None)
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
                if holding is not None and holding.unlike:
                    results[pair]["unlike"] = list(holding.unlike)
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
        _, secret, error = self._held_password(payload["pair"], payload["file"])
        if secret is None:
            return {
                "result": None,
                "error": error or f"holds no credential for {payload['pair']}",
            }
        result = self._target_login(payload["pair"], payload["target"], secret, control=True)
        with self._drill_lock:
            self._drills[payload["drill"]] = (secret, time.time() + DRILL_HOLD_S)
        return {"result": result, "digest": crypto.secret_digest(secret)}

    def drill_check(self, payload: DrillRequest) -> DrillCheckAnswer:
        """Log in with the new credential, then with the held old one; forget the old one."""
        with self._drill_lock:
            held = self._drills.pop(payload["drill"], None)
        _, secret, _ = self._held_password(payload["pair"], payload["file"])
        pair, target = payload["pair"], payload["target"]
        new = self._target_login(pair, target, secret, control=False) if secret else None
        old = self._target_login(pair, target, held[0], control=False) if held else None
        return {
            "new": new,
            "old": old,
            "digest": crypto.secret_digest(secret) if secret else None,
            "error": None if held else "the old credential was not held (agent restarted?)",
        }


def _probe_target(item: Target, secret: bytes) -> probe_mod.ProbeTarget:
    """A probe target from the controller's item (kind, CA and TLS for a Redis)."""
    return probe_mod.ProbeTarget(
        host=item["host"],
        port=item["port"],
        user=item["login"],
        password=secret.decode("ascii", "replace"),
        dbname=item["dbname"],
        kind=registry.name_of(item.get("kind")),  # an unknown one is probed as not run
        ca=item.get("ca") or None,
        tls=item.get("tls", True),
    )
