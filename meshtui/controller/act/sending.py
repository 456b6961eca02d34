"""Sending what each node must hold: providers first (signed, numbered, a delta resent
whole when its base is not the node's), then consumers; each answer is gathered into a
:class:`~meshtui.controller.act.recording.Delivered`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from meshtui.controller.act.recording import PIN_FAILED, Delivered, EndRow, SessionsSettled
from meshtui.controller.agents.client import (
    DELIVER_TIMEOUT_S,
    Agents,
    SignedRequest,
    by_pair,
    missing_reason,
)
from meshtui.errors import AgentError
from meshtui.inventory import Inventory
from meshtui.inventory.rows import (
    Provision,
)
from meshtui.kinds import registry
from meshtui.model import APPLIED, SESSIONS_UNSETTLED, End, Sessions
from meshtui.protocol import messages
from meshtui.protocol.messages import (
    ConsumerItem,
    DeliverAnswer,
    DeliverRequest,
    LoginOutcome,
    ProviderOutcome,
    ProviderSet,
)

BATCH = 1000
"""How many pairs' payloads a large delivery builds and sends at once (:func:`node_batches`):
building every payload of 10,000 pairs before sending the first held them all, signed, at once
(rotate all at 10,000 pairs: ~35 MiB of payloads and bodies on a 60 MiB process)."""


def batches(sizes: Mapping[str, int], limit: int | None = None) -> list[list[str]]:
    """Nodes (by name, with how many pairs each is sent) in sorted batches of at most ``limit``
    pairs (:data:`BATCH` by default), a node never split: one with more is a batch alone."""
    limit = BATCH if limit is None else limit
    out: list[list[str]] = []
    batch: list[str] = []
    size = 0
    for name in sorted(sizes):
        if batch and size + sizes[name] > limit:
            out.append(batch)
            batch, size = [], 0
        batch.append(name)
        size += sizes[name]
    if batch:
        out.append(batch)
    return out


def node_batches(
    pairs: Iterable[str], node: Callable[[str], str], limit: int | None = None
) -> list[list[str]]:
    """``pairs`` in :func:`batches` of whole nodes, the node of each pair ``node(pair)``;
    pairs sorted, so a large delivery is sent in a known order."""
    by_node: dict[str, list[str]] = {}
    for pid in sorted(pairs):
        by_node.setdefault(node(pid), []).append(pid)
    sizes = {name: len(its) for name, its in by_node.items()}
    return [[pid for name in names for pid in by_node[name]] for names in batches(sizes, limit)]


def settled(choice: Sessions, outcome: LoginOutcome) -> SessionsSettled:
    """What a provider's answer says of a rotated login's old sessions (asked ``choice``): a
    declared provisioner command, or a failure to end them, leaves them unsettled."""
    count = outcome.get("sessions")
    if count is not None:
        left = outcome.get("sessions_left", count)
        ended = bool(outcome.get("sessions_ended"))
        return SessionsSettled(count, ended, left, mark=outcome.get("sessions_mark"))
    said = outcome["reason"]
    note = said[said.index(SESSIONS_UNSETTLED) :] if SESSIONS_UNSETTLED in said else ""
    verb = "ended" if choice == Sessions.END else "counted"
    return SessionsSettled(
        None,
        False,
        note=note
        or f"its sessions on the old credential were not {verb} (the provider's provisioner "
        "does not say; a declared command is not asked)",
    )


def send_providers(
    agents: Agents,
    inv: Inventory,
    sets: Mapping[str, list[ProviderSet]],
    result: Delivered,
    *,
    record: bool = True,
    whole: Callable[[str, str], ProviderSet] | None = None,
    expected: Mapping[Provision, str] | None = None,
    signed: Mapping[str, SignedRequest] | None = None,
    answering: Callable[[], Mapping[str, DeliverAnswer | AgentError]] | None = None,
) -> None:
    """Deliver manifests to provider nodes (in parallel) and record each pair's provider end.

    A delta the node refuses (its manifest is not the delta's base) is sent again whole, from
    ``whole(provider, provision)``, in the same call. Each provision's new base is recorded
    when every consumer of its manifest applied: a whole one's from what was sent, a delta's
    from ``expected`` (:attr:`Planner.expected_bases`). ``answering``: the answers' waiter of
    :func:`begin_providers` (the sets already on their way), instead of sending them here.
    """
    if not sets:
        return
    if answering is not None:
        answers = answering()
    else:
        answers = agents.call_many(
            messages.DELIVER,
            {n: DeliverRequest(provider=s) for n, s in sets.items()},
            timeout=DELIVER_TIMEOUT_S,
            signed=signed,
        )
    if whole is not None:
        sets, answers = _resend_whole(agents, sets, answers, whole)
    rows: list[EndRow] = []
    for node, sent in sets.items():
        answer = answers[node]
        for spec in sent:
            got = _match_provider(answer, spec)
            outcomes = {o["login"]: o for o in got["outcomes"]} if got else {}
            key = (spec["provider"], spec["provision"])
            applied = got is not None and all(
                (o := outcomes.get(c["as"])) is not None and o["outcome"] in APPLIED
                for c in spec["consumers"]
            )
            if not applied:
                result.bases[key] = None
            elif "base" in spec:
                result.bases[key] = (expected or {}).get(key)
            else:
                result.bases[key] = messages.consumer_set_digest(
                    messages.ConsumerLine(
                        c["as"], c["node"], c["module"], c["at"], c["values"], c["digest"]
                    )
                    for c in spec["consumers"]
                )
            pin = outcomes.get(registry.kind_of(spec.get("kind")).finish_name)  # its pin line
            unpinned = (
                f"{PIN_FAILED}: {pin['reason']}"
                if pin is not None and pin["outcome"] not in APPLIED
                else None
            )
            for c in spec["consumers"]:
                pid = c["pair"]
                o = outcomes.get(c["as"])
                if got is not None and o is not None and o["outcome"] in APPLIED:
                    result.provider_ok[pid] = True
                    result.applied_at[pid] = float(got.get("applied_at", 0.0))
                    if c["as"] in spec.get("sessions", {}):
                        choice = spec["sessions"][c["as"]]
                        done = result.sessions[pid] = settled(choice, o)
                        if done.count is None and choice == Sessions.END:  # the intruder's in
                            result.fail(pid, f"provider {spec['provider']}: {done.note}")
                    if unpinned is not None:  # the password is set; the login is not confined
                        result.fail(pid, f"provider {spec['provider']}: {unpinned}")
                    rows.append((pid, End.PROVIDER, c["generation"], c["digest"], unpinned))
                    continue
                said = f"{o['outcome']} {o['reason']}".strip() if o else "no outcome"
                default = "agent did not answer for this manifest" if got is None else None
                reason = missing_reason(answer, got, default or f"provisioner: {said}")
                result.provider_ok[pid] = False
                result.fail(pid, f"provider {spec['provider']}: {reason}")
                rows.append((pid, End.PROVIDER, None, None, reason))
    result.pending.extend(rows)
    if record:
        result.flush(inv)


def begin_providers(
    agents: Agents,
    sets: Mapping[str, list[ProviderSet]],
    *,
    signed: Mapping[str, SignedRequest] | None = None,
) -> Callable[[], dict[str, DeliverAnswer | AgentError]]:
    """Send ``sets`` to their provider nodes now, on the client's threads; the returned
    callable waits for the answers (give it to :func:`send_providers` as ``answering``), so the
    caller can build the next batch while these nodes apply."""
    payloads = {n: DeliverRequest(provider=s) for n, s in sets.items()}
    return agents.begin_many(messages.DELIVER, payloads, timeout=DELIVER_TIMEOUT_S, signed=signed)


def sign_providers(
    agents: Agents, sets: Mapping[str, list[ProviderSet]]
) -> dict[str, SignedRequest]:
    """Each provider node's delivery of ``sets``, numbered and signed now, to be sent by
    :func:`send_providers` (``signed=``); a node whose request cannot be signed is left out
    (signed again when sent, where the error is reported)."""
    out: dict[str, SignedRequest] = {}
    for node, sent in sets.items():
        try:
            out[node] = agents.client(node).sign(messages.DELIVER, DeliverRequest(provider=sent))
        except AgentError:
            continue
    return out


def _resend_whole(
    agents: Agents,
    sets: Mapping[str, list[ProviderSet]],
    answers: Mapping[str, DeliverAnswer | AgentError],
    whole: Callable[[str, str], ProviderSet],
) -> tuple[dict[str, list[ProviderSet]], dict[str, DeliverAnswer | AgentError]]:
    """Each refused delta's manifest sent whole; the sets and answers as finally delivered."""
    sets_out = {node: list(sent) for node, sent in sets.items()}
    answers_out = dict(answers)
    again: dict[str, list[ProviderSet]] = {}
    for node, sent in sets.items():
        for spec in sent:
            got = _match_provider(answers[node], spec)
            if "base" in spec and got is not None and "base_refused" in got:
                again.setdefault(node, []).append(whole(spec["provider"], spec["provision"]))
    if not again:
        return sets_out, answers_out
    resent = agents.call_many(
        messages.DELIVER,
        {n: DeliverRequest(provider=s) for n, s in again.items()},
        timeout=DELIVER_TIMEOUT_S,
    )
    for node, specs in again.items():
        keys = {(s["provider"], s["provision"]) for s in specs}
        first = answers[node]
        kept = [s for s in sets_out[node] if (s["provider"], s["provision"]) not in keys]
        sets_out[node] = kept + specs
        answer = resent[node]
        if isinstance(answer, AgentError) or isinstance(first, AgentError):
            answers_out[node] = answer
            continue
        outcomes = [
            o for o in first["provider"] if (o["provider"], o["provision"]) not in keys
        ] + answer["provider"]
        answers_out[node] = {"provider": outcomes, "consumer": first["consumer"]}
    return sets_out, answers_out


def _match_provider(
    answer: DeliverAnswer | AgentError, spec: ProviderSet
) -> ProviderOutcome | None:
    if isinstance(answer, AgentError):
        return None
    for got in answer["provider"]:
        if got["provider"] == spec["provider"] and got["provision"] == spec["provision"]:
            return got
    return None


def send_consumers(
    agents: Agents,
    inv: Inventory,
    items: Mapping[str, list[ConsumerItem]],
    result: Delivered,
    *,
    record: bool = True,
    signed: Mapping[str, SignedRequest] | None = None,
) -> None:
    """Deliver credentials to consumer nodes (in parallel) and record each pair's consumer end.

    ``signed``: these deliveries as signed ahead, by node (:mod:`meshtui.controller.act.ahead`).
    """
    if not items:
        return
    answers = agents.call_many(
        messages.DELIVER,
        {n: DeliverRequest(consumer=i) for n, i in items.items()},
        timeout=DELIVER_TIMEOUT_S,
        signed=signed,
    )
    rows: list[EndRow] = []
    for node, sent in items.items():
        answer = answers[node]
        got = by_pair(answer, lambda a: a["consumer"])
        for item in sent:
            pid = item["pair"]
            g = got.get(pid)
            if g is not None and g["ok"]:
                result.consumer_ok[pid] = True
                result.written_at[pid] = float(g.get("written_at", 0.0))
                reload = g.get("reload")
                err = f"reload {reload}" if reload and reload != "ok" else None
                if err is not None:  # the file holds it, but the app did not take it up
                    result.fail(pid, f"consumer {node}: {err}")
                rows.append((pid, End.CONSUMER, item["generation"], item["digest"], err))
            else:
                reason = missing_reason(answer, g, "agent did not answer for this pair")
                result.consumer_ok[pid] = False
                result.fail(pid, f"consumer {node}: {reason}")
                rows.append((pid, End.CONSUMER, None, None, reason))
    result.pending.extend(rows)
    if record:
        result.flush(inv)
