"""Talking to host agents: signed requests over a kept connection (:mod:`.channel`: TCP, TLS
or Unix socket), verified answers.

An answer counts only if it is signed by the node key the inventory holds for that node, quotes
the request's nonce and has its kind's shape (:mod:`meshtui.protocol.messages`, checked here, once);
anything else is an AgentError that names the node and the reason (for a shape, the field).
Every request carries the next number of the controller's :class:`~meshtui.protocol.wire.Sequence` (kept
in its state folder), which the agent uses to refuse replays, even after it restarts.
"""

from __future__ import annotations

import dataclasses
import functools
import secrets
import ssl
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from meshtui import crypto
from meshtui.controller.agents.channel import Answer, Channel, json_body, request_bytes
from meshtui.errors import AgentError, EnvelopeError, FencedOutError, MessageError
from meshtui.inventory.rows import NodeRow
from meshtui.protocol import messages, wire
from meshtui.protocol.fence import Fence
from meshtui.protocol.messages import Kind

Req = TypeVar("Req", bound=Mapping[str, object])
Ans = TypeVar("Ans", bound=Mapping[str, object])
T = TypeVar("T")

DEFAULT_TIMEOUT_S = 30.0
DELIVER_TIMEOUT_S = 360.0
"""Longer than the agent lets a provisioner run (300 s): never give up on a delivery that may
still apply, or the record and the node disagree."""
STATE_TIMEOUT_S = 10.0
MAX_AHEAD_US = 7 * 86_400 * 1_000_000
"""How far past this machine's clock a node's highest accepted request number may be and still
be believed (a controller numbers its requests from its clock, and every agent refuses a
request whose clock is 30 s off; only a hand-edited sequence gets further ahead)."""
PARALLEL = 8
"""Nodes asked at once by one :meth:`Agents.call_many` (besides the calling thread)."""
BUSY_RETRIES = (0.2, 0.5, 1.0, 2.0)
"""Waits before sending again when an agent answered 503 busy (it read nothing of the request)."""


FENCED = 409
"""The status of a node's signed refusal of a delivering request under a lower epoch."""

UNSIGNED_REFUSAL = "refused, unsigned"
"""How a 403 the node did not sign for this request begins: the agent could not authenticate
it (it does not accept this controller's key, or the request changed on the way). Its own
words are not shown: a refusal of a request nobody authenticated is never signed (an on-path
relay could otherwise make a delivered request look refused)."""

UNSIGNED_REFUSALS = {
    413: "the request is larger than the agent reads (16 MiB); deliver fewer pairs at once",
    503: "the agent is busy with other requests; try again",
    408: "the agent did not receive the whole request in time",
    400: "the agent could not read the request",
    403: (
        f"{UNSIGNED_REFUSAL}: the agent could not verify the request (it does not accept "
        "this controller: its policy's [[controllers]] do not name it with this key, or it "
        "pins another controller key; or the request changed on the way; meshtui doctor "
        "says which)"
    ),
}
"""What an unsigned refusal (before the agent knew who asked) means, by HTTP status."""

HeadSource = Callable[[], wire.SignedHead | None]
"""Where a client reads the audit head it shows the agent with each request (read per request)."""
FenceSource = Callable[[], Fence]
"""Where a client reads the controller's name and epoch each request carries (read per request:
a lease taken or lost changes the epoch)."""
SendCheck = Callable[[], None]
"""Called before each request is sent; raises to send nothing (a lease turn that ended)."""
FencedHook = Callable[[str, int, float | None], str | None]
"""Told of a node that refused a request for its epoch: the node, the highest epoch it holds
and when it first accepted it (the lease's holder raises its own epoch past it:
:meth:`meshtui.controller.turn.Turn.raise_past`); returns what the refusal should add (why
it was not raised past), or None."""


@functools.cache
def _tls() -> ssl.SSLContext:
    """One verifying TLS context for the process: building one reads the CA bundle (~60 ms),
    which would otherwise be read for every node's channel of every command."""
    return ssl.create_default_context()


def channel_to(name: str, agent: str) -> Channel:
    """The kept connections to node ``name``'s agent at ``agent`` (AgentError naming the node
    when the address cannot make a request line)."""
    try:
        return Channel(agent, _tls())
    except ValueError as exc:
        raise AgentError(name, str(exc)) from None


def exchange(name: str, channel: Channel, request: bytes, timeout: float) -> Answer:
    """``request`` written on ``channel`` and its answer read; a timeout or a connection's
    failure is an AgentError naming node ``name``."""
    try:
        return channel.exchange(request, timeout)
    except TimeoutError as exc:
        raise AgentError(name, f"agent at {channel.agent} did not answer in time") from exc
    except OSError as exc:
        raise AgentError(
            name, f"agent at {channel.agent} unreachable ({type(exc).__name__})"
        ) from exc


def read_anchor(node: NodeRow, *, timeout: float = STATE_TIMEOUT_S) -> wire.SignedHead | None:
    """The audit head a node keeps, asked without a key (see the agent's ``read_anchor``).

    The answer counts only when signed by the node key the inventory holds and quoting this
    call's fresh nonce; AgentError otherwise. The head inside is the node's claim of what the
    controller showed it: check its controller signature before believing it.
    """
    return read_anchor_answer(node, timeout=timeout).head


@dataclass(frozen=True)
class AnchorRead:
    """A node's whole answer to the anchor read: its kept head, the heads it kept before a
    restore, the highest request number it accepted and the controller key it pins."""

    node: str
    head: wire.SignedHead | None
    history: list[wire.SignedHead]
    accepted: int | None
    controller: str | None
    controllers: list[messages.AcceptedController] | None = None
    """The controllers it accepts (None: an agent that does not say)."""


def read_anchor_answer(node: NodeRow, *, timeout: float = STATE_TIMEOUT_S) -> AnchorRead:
    """:func:`read_anchor`'s whole answer (AgentError when it cannot be trusted)."""
    name = str(node["name"])
    nonce = secrets.token_hex(16)
    verify_key = crypto.unb64(node["verify_key"], "verify_key")
    channel = channel_to(name, str(node["agent"]))
    try:
        ask = request_bytes(channel.host, channel.target(f"/v1/anchor?nonce={nonce}"), None)
        resp = exchange(name, channel, ask, timeout)
    finally:
        channel.close()
    if resp.status_code == 404:
        raise AgentError(name, "the agent does not keep an audit head (update meshtui there)")
    try:
        msg = wire.open_envelope(
            resp.body, verify_key=verify_key, sender=name, to=wire.CONTROLLER, reply_to=nonce
        )
    except EnvelopeError as exc:
        raise AgentError(
            name, f"answer not trusted (HTTP {resp.status_code}): {exc} (is this the right agent?)"
        ) from exc
    if msg.kind != messages.ANCHOR.name:
        raise AgentError(name, f"answered {msg.kind!r} to a read of its audit head")
    try:
        answer = messages.ANCHOR.answer_of(msg.payload)  # the one check of the answer's shape
        head = answer["head"]
        accepted = answer.get("accepted")
        if accepted is not None:
            _believable(name, accepted)
        return AnchorRead(
            node=name,
            head=None if head is None else wire.SignedHead.from_json(head),
            history=[wire.SignedHead.from_json(h) for h in answer.get("history", [])],
            accepted=accepted,
            controller=answer.get("controller"),
            controllers=answer.get("controllers"),
        )
    except MessageError as exc:
        raise AgentError(name, f"answer refused: {exc}") from None
    except ValueError as exc:
        raise AgentError(name, f"its audit head is malformed: {exc}") from None


DOUBTED = "claims it accepted request number"
"""How an AgentError for a node's unbelievable high-water mark begins (catchup shows it)."""


def _believable(node: str, accepted: int) -> None:
    """AgentError unless ``accepted`` (a node's word, signed by its own key only) is a request
    number a controller could have made: the controller's sequence jumps past it (restore,
    push), so a node claiming 10**40 would renumber every other node past it for good."""
    ahead = accepted - int(time.time() * 1_000_000)
    if ahead > MAX_AHEAD_US:
        raise AgentError(
            node,
            f"{DOUBTED} {accepted}, {ahead // 86_400_000_000} days past "
            "this machine's clock; no controller numbered that, so its replay record "
            "(accepted.log) was changed on the node: not followed (check that node, then "
            "restore its record or re-initialise it)",
        )


BUILT_MAX = 64 * 1024
"""The largest envelope body (base64 characters) whose HTTP request is built ahead: one
rotated pair's consumer delivery is ~2 KB; a whole mesh's are not worth a second copy."""

SIGNED_FRESH_S = 5.0
"""A request signed ahead (:meth:`AgentClient.sign`) is sent as signed for this long; after
that it is signed again, well inside the clock limit the agent checks (``wire.MAX_SKEW_S``)."""


@dataclass(frozen=True)
class SignedRequest:
    """A request numbered and signed ahead of sending it (:meth:`AgentClient.sign`), with its
    HTTP request's bytes (``http``: encoded, head made) when it was built ahead, so sending it
    is only the write: a rotation's consumer delivery goes out inside its window."""

    kind: str
    payload: Mapping[str, object]
    envelope: dict[str, str]
    nonce: str
    seq: int
    signed_at: float
    http: bytes | None = None
    fence: Fence | None = None
    """The controller and epoch it was signed under."""

    def fits(self, kind: str, payload: Mapping[str, object], fence: Fence | None) -> bool:
        """True when this is ``payload`` of ``kind``, signed recently enough to send, under
        ``fence`` (the epoch now: a raise since, and it would carry one this holding left)."""
        fresh = time.monotonic() - self.signed_at < SIGNED_FRESH_S
        same = kind == self.kind and payload == self.payload and fence == self.fence
        return fresh and same


class AgentClient:
    """One node's agent, as the controller sees it."""

    def __init__(
        self,
        node: NodeRow,
        keys: crypto.PrivateKeys,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        sequence: wire.Sequence | None = None,
        head: HeadSource | None = None,
        fence: FenceSource | None = None,
        check: SendCheck | None = None,
        fenced: FencedHook | None = None,
    ) -> None:
        self.name: str = node["name"]
        self._sequence = sequence
        self._head = head
        self._fence = fence
        self._check = check
        self._fenced = fenced
        self.agent: str = node["agent"]
        self._verify_key = crypto.unb64(node["verify_key"], "verify_key")
        self._keys = keys
        self._timeout = timeout
        self._channel = channel_to(self.name, self.agent)

    def close(self) -> None:
        """Close the kept connection."""
        self._channel.close()

    def _request(self, signed: SignedRequest) -> bytes:
        """The HTTP request carrying ``signed``'s envelope (``POST /v1``)."""
        channel = self._channel
        return request_bytes(channel.host, channel.target("/v1"), json_body(signed.envelope))

    def sign(self, kind: Kind[Req, Ans], payload: Req, *, built: bool = False) -> SignedRequest:
        """Number and sign a request now, to send it later with :meth:`call` (``signed=``):
        the signing is then done before the moment the request is waited for. ``built``: its
        HTTP request is made now too (encoded, headers made), when the envelope is at most
        :data:`BUILT_MAX` (a second copy of it is held until it is sent)."""
        signed = self._signed(kind, payload)
        if not built or len(signed.envelope["body"]) > BUILT_MAX:
            return signed
        return dataclasses.replace(signed, http=self._request(signed))

    def _signed(self, kind: Kind[Req, Ans], payload: Req) -> SignedRequest:
        """The request numbered and signed now."""
        fence = self._fence() if self._fence is not None else None
        try:
            env, nonce = wire.envelope(
                kind.name,
                payload,
                sender=wire.CONTROLLER,
                to=self.name,
                keys=self._keys,
                sequence=self._sequence,
                head=self._head() if self._head is not None else None,
                fence=fence,
            )
        except OSError as exc:
            where = self._sequence.path if self._sequence else "the sequence file"
            raise AgentError(
                self.name, f"cannot number the request in {where}: {exc.strerror}"
            ) from exc
        seq = wire.seq_of(env)
        return SignedRequest(kind.name, payload, env, nonce, seq, time.monotonic(), fence=fence)

    def call(
        self,
        kind: Kind[Req, Ans],
        payload: Req,
        *,
        timeout: float | None = None,
        signed: SignedRequest | None = None,
    ) -> Ans:
        """Send one signed request; return the verified answer's payload, checked for its shape.

        ``signed``: this request as signed ahead; used when it is still fresh and the same
        payload, else the request is signed now.
        """
        fence = self._fence() if self._fence is not None else None
        ahead = signed is not None and signed.fits(kind.name, payload, fence)
        if signed is None or not ahead:
            signed = self._signed(kind, payload)
        wait = self._timeout if timeout is None else timeout
        resp = self._send(signed, wait)
        if ahead and resp.status_code == 403:
            # refused before anything was done: the agent may have restarted since its number
            # was recorded ahead (then it counts as used); numbered anew, sent once more
            signed = self._signed(kind, payload)
            resp = self._send(signed, wait)
        nonce = signed.nonce
        try:
            msg = wire.open_envelope(
                resp.body,
                verify_key=self._verify_key,
                sender=self.name,
                to=wire.CONTROLLER,
                reply_to=nonce,  # an answer, a refusal included, counts only for this request
            )
        except EnvelopeError as exc:
            if resp.status_code != 200 and "off this clock" not in str(exc):  # say clock skew
                # not the node's word about this request (unsigned, or signed for another):
                # its text is not shown as the node's reason
                why = UNSIGNED_REFUSALS.get(resp.status_code, f"{UNSIGNED_REFUSAL} by the agent")
                raise AgentError(self.name, f"{why} (HTTP {resp.status_code})") from exc
            raise AgentError(
                self.name, f"answer not trusted: {exc} (is this the right agent?)"
            ) from exc
        try:
            if resp.status_code != 200 or msg.kind == messages.ERROR.name:
                refusal = messages.ERROR.answer_of(msg.payload)
                if resp.status_code == FENCED:  # signed: the node's word, for this request
                    highest, said = refusal.get("highest"), refusal["error"]
                    if highest is not None and self._fenced is not None:
                        added = self._fenced(self.name, highest, refusal.get("at"))
                        said = f"{said}; {added}" if added else said
                    raise FencedOutError(self.name, said, highest)
                raise AgentError(self.name, refusal["error"])
            if msg.kind != kind.name:
                raise MessageError(f"the answer is a {msg.kind!r}, not a {kind.name!r}")
            return kind.answer_of(msg.payload)  # the one check of the answer's shape
        except MessageError as exc:
            raise AgentError(self.name, f"answer refused: {exc}") from None

    def _send(self, signed: SignedRequest, timeout: float) -> Answer:
        if self._check is not None:
            self._check()
        request = signed.http if signed.http is not None else self._request(signed)
        resp = self._post(request, timeout)
        for wait in BUSY_RETRIES:
            if resp.status_code != 503 or "retry-after" not in resp.headers:
                break
            time.sleep(wait)  # busy: it read nothing, so the same envelope is still unused
            resp = self._post(request, timeout)
        return resp

    def _post(self, request: bytes, timeout: float) -> Answer:
        return exchange(self.name, self._channel, request, timeout)


class Agents:
    """Clients for several nodes, opened on demand, used from one thread or a pool."""

    def __init__(
        self,
        nodes: Mapping[str, NodeRow],
        keys: crypto.PrivateKeys,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        sequence: wire.Sequence | None = None,
        head: HeadSource | None = None,
        fence: FenceSource | None = None,
        check: SendCheck | None = None,
        fenced: FencedHook | None = None,
    ) -> None:
        self._nodes, self._keys, self._timeout = nodes, keys, timeout
        self._sequence, self._head, self._fence = sequence, head, fence
        self._check, self._fenced = check, fenced
        self._clients: dict[str, AgentClient] = {}
        self._pool: ThreadPoolExecutor | None = None  # made by the first call to several nodes

    def __enter__(self) -> Agents:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        for c in self._clients.values():
            c.close()

    def client(self, node: str) -> AgentClient:
        """The client of one node."""
        if node not in self._clients:
            if node not in self._nodes:
                raise AgentError(node, "not a declared node")
            self._clients[node] = AgentClient(
                self._nodes[node],
                self._keys,
                timeout=self._timeout,
                sequence=self._sequence,
                head=self._head,
                fence=self._fence,
                check=self._check,
                fenced=self._fenced,
            )
        return self._clients[node]

    def call(self, node: str, kind: Kind[Req, Ans], payload: Req) -> Ans:
        """One request to one node."""
        return self.client(node).call(kind, payload)

    def call_many(
        self,
        kind: Kind[Req, Ans],
        payloads: Mapping[str, Req],
        *,
        timeout: float | None = None,
        signed: Mapping[str, SignedRequest] | None = None,
    ) -> dict[str, Ans | AgentError]:
        """The same kind of request to several nodes at once; each answer or its error.

        ``signed``: some of these requests as signed ahead, by node (:meth:`AgentClient.call`).
        """
        if len(payloads) == 1:  # one node: asked from this thread
            (node,) = payloads
            self.client(node)
            return {node: self._one(kind, payloads, timeout, signed, node)}
        return self.begin_many(kind, payloads, timeout=timeout, signed=signed)()

    def begin_many(
        self,
        kind: Kind[Req, Ans],
        payloads: Mapping[str, Req],
        *,
        timeout: float | None = None,
        signed: Mapping[str, SignedRequest] | None = None,
    ) -> Callable[[], dict[str, Ans | AgentError]]:
        """:meth:`call_many`, sent now on the pool's threads; the returned callable waits for
        the answers, so the caller can work while the nodes do."""
        for node in payloads:
            self.client(node)  # create clients in this thread
        futures = {
            node: self.start(functools.partial(self._one, kind, payloads, timeout, signed, node))
            for node in payloads
        }
        return lambda: {node: future.result() for node, future in futures.items()}

    def start(self, work: Callable[[], T]) -> Future[T]:
        """Run ``work`` on this set's threads (made as first needed, kept for the set's life,
        so no thread is made per call)."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=PARALLEL, thread_name_prefix="agents")
        return self._pool.submit(work)

    def _one(
        self,
        kind: Kind[Req, Ans],
        payloads: Mapping[str, Req],
        timeout: float | None,
        signed: Mapping[str, SignedRequest] | None,
        node: str,
    ) -> Ans | AgentError:
        try:
            ahead = signed.get(node) if signed is not None else None
            return self._clients[node].call(kind, payloads[node], timeout=timeout, signed=ahead)
        except AgentError as exc:
            return exc


Item = TypeVar("Item", bound=Mapping[str, object])
Answered = TypeVar("Answered")


def by_pair(
    answer: Answered | AgentError, items: Callable[[Answered], Iterable[Item]]
) -> dict[str, Item]:
    """A node's per-pair items (``items`` picks them from its answer) by their ``pair``; {} when
    the node did not answer (then :func:`missing_reason` says why, for every pair)."""
    if isinstance(answer, AgentError):
        return {}
    return {str(item["pair"]): item for item in items(answer)}


def missing_reason(answer: object, item: Mapping[str, object] | None, default: str) -> str:
    """Why a pair has no good result: the node's failure, else the item's error, else ``default``."""
    if isinstance(answer, AgentError):
        return answer.reason
    return str((item or {}).get("error") or default)
