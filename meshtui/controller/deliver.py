"""Building what each node must hold, sending it, and recording which generation each end holds.

A provider receives the whole manifest of one (provider module, provision): every live consumer
at its target generation, sealed to the provider. A consumer receives its own credential, sealed
to it. The answers are recorded per pair and per end, so the inventory always knows who is behind.

An agent never goes back to an older generation on its own: an item whose generation is below
one this inventory minted for the pair (a rotation's rollback, or a push converging an end the
rollback could not reach) says so in its signed ``rollback`` note, naming the abandoned
generations and their rotations.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, TypeVar

from meshtui import crypto, messages
from meshtui.connection import render
from meshtui.controller.client import (
    DELIVER_TIMEOUT_S,
    Agents,
    SignedRequest,
    by_pair,
    missing_reason,
)
from meshtui.controller.status import NOT_AS_DECLARED
from meshtui.errors import AgentError, InventoryError
from meshtui.inventory import Inventory, Transaction, now
from meshtui.inventory.rows import (
    DeliveryRow,
    GenerationRow,
    ModuleRow,
    NodeRow,
    OfferSpec,
    PairRow,
    ProbeRecord,
    Provision,
)
from meshtui.kinds import registry
from meshtui.kinds.kind import ConnectionFacts
from meshtui.messages import (
    ConnectionItem,
    ConsumerItem,
    DeliverAnswer,
    DeliverRequest,
    Holding,
    ManifestEntry,
    ProbeReport,
    ProviderOutcome,
    ProviderSet,
    Rollback,
    Target,
)
from meshtui.model import APPLIED, End, node_of

RELOAD_FAILED = "reload failed"
"""How a consumer end whose file was written but whose reload command failed is recorded."""
PIN_FAILED = "pin failed"
"""How a provider end whose login was applied but not confined in pg_hba.conf is recorded."""
KEPT_FAILURES = (RELOAD_FAILED, PIN_FAILED, NOT_AS_DECLARED)
"""An end's failure that holding the right credential does not clear: push delivers again."""

FEW = 32
"""Up to this many pairs, recording answers reads those pairs' rows one by one."""

NOTHING = 0
"""The generation recorded for an end that holds nothing (its file is gone)."""

EndRow = tuple[str, End, int | None, str | None, str | None]
"""(pair, end, generation held or None to keep, digest, error) for the deliveries table."""

Targets = Mapping[str, int]
"""pair id -> the generation its ends should receive (default: the pair's generation)."""

Item = TypeVar("Item", ConsumerItem, ManifestEntry)


@dataclass
class Delivered:
    """What one delivery round achieved, per pair and end."""

    provider_ok: dict[str, bool] = field(default_factory=dict)
    consumer_ok: dict[str, bool] = field(default_factory=dict)
    applied_at: dict[str, float] = field(default_factory=dict)
    written_at: dict[str, float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)  # pair -> first error
    pending: list[EndRow] = field(default_factory=list)  # answers not yet recorded
    bases: dict[Provision, str | None] = field(default_factory=dict)
    """Per provision delivered: the consumer set its manifest now holds (None: not known)."""

    def flush(self, inv: Inventory) -> None:
        """Record the answers gathered so far in the deliveries table (and the bases)."""
        rows, self.pending = self.pending, []
        bases, self.bases = self.bases, {}
        record_end(inv, rows, bases)

    def staged(self, inv: Inventory) -> Callable[[Transaction], None] | None:
        """:meth:`flush` as a write into a transaction the caller opens (a rotation's end
        records its answers in the same commit); None when there is nothing to write."""
        rows, self.pending = self.pending, []
        bases, self.bases = self.bases, {}
        return end_writes(inv, rows, bases)

    def window_ms(self, pair: str) -> float | None:
        """Provider applied -> consumer holds it, in milliseconds."""
        if pair in self.applied_at and pair in self.written_at:
            return max(0.0, (self.written_at[pair] - self.applied_at[pair]) * 1000.0)
        return None

    def fail(self, pair: str, reason: str) -> None:
        """Remember the first error of a pair."""
        self.errors.setdefault(pair, reason)


def _provision(pair: PairRow) -> Provision:
    return (pair["provider"], pair["provision"])


def offer_of(pair: PairRow, modules: Mapping[str, ModuleRow] | None) -> OfferSpec | None:
    """The provider's ``provides`` entry for ``pair`` as stored (None when unknown)."""
    module = (modules or {}).get(pair["provider"])
    for offer in module["spec"]["provides"] if module else []:
        if offer["name"] == pair["provision"]:
            return offer
    return None


def target_of(
    pair: PairRow, nodes: Mapping[str, NodeRow], modules: Mapping[str, ModuleRow] | None = None
) -> Target:
    """Where a probe of ``pair`` logs in: the provider node's private address, port and kind."""
    offer = offer_of(pair, modules)
    kind = registry.kind_of(offer.get("kind") if offer is not None else None)
    target: Target = {
        "host": nodes[node_of(pair["provider"])]["address"],
        "port": pair["port"],
        "login": pair["login"],
        "dbname": kind.dbname(pair["values"]),
    }
    if offer is not None and registry.stored_name(kind.name) is not None:
        target["kind"], target["ca"] = kind.name, offer.get("ca")
        target["tls"] = bool(offer.get("tls", True))
    return target


class Sealed(NamedTuple):
    """A generation still held sealed: its digest and the blob for each end."""

    digest: str
    consumer: bytes
    provider: bytes


class Planner:
    """Reads the inventory once and builds delivery payloads for any set of pairs and targets.

    With ``focus`` (pair ids) it reads only what delivering those pairs needs: their providers'
    pairs and modules, and those pairs' generations, so rotating one pair among 10,000 reads
    one provider's share of the inventory, not all of it. Without, it reads the whole mesh.
    """

    def __init__(
        self,
        inv: Inventory,
        focus: Iterable[str] | None = None,
        fresh: Iterable[GenerationRow] = (),
    ) -> None:
        """``fresh``: generations minted in memory and not yet stored (a rotation plans its
        deliveries while its nodes are being resolved, before it journals them)."""
        self.inv = inv
        self.nodes = inv.nodes()
        self._focus = None if focus is None else sorted(set(focus))
        self.pairs: dict[str, PairRow]
        self.modules: Mapping[str, ModuleRow]
        self._read_providers: set[str] | None = None  # a focused planner's whole providers
        if self._focus is None:
            self.modules = inv.module_specs()  # decoded when asked for: 17.7 MiB at 10,000
            self.pairs = {p["id"]: p for p in inv.pairs()}
            self.minted = inv.minted()
        else:
            self.pairs = {p["id"]: p for p in inv.pairs(self._focus)}
            self.modules = inv.modules(  # consumers too: their requires name connection files
                {p["provider"] for p in self.pairs.values()}
                | {p["consumer"] for p in self.pairs.values()}
            )
            self.minted = inv.minted(self.pairs)
            self._read_providers = set()
        self.expected_bases: dict[Provision, str] = {}
        """Per delta built: the base its provision's manifest holds once the delta applied."""
        self._rotation_of: dict[tuple[str, int], int] | None = None  # read when first needed
        self._sealed: dict[tuple[str, int], GenerationRow] | None = None
        self._sealed_read: set[str] = set()  # a focused planner's pairs whose blobs were read
        self._fresh = {(g["pair"], g["generation"]): g for g in fresh}
        for pair, generation in self._fresh:
            self.minted.setdefault(pair, []).append(generation)

    def _read_provider(self, provider: str) -> None:
        """A focused planner reads a provider's other pairs only when a whole manifest of it
        is built (a delta needs only the pairs it changes)."""
        if self._read_providers is None or provider in self._read_providers:
            return
        rows = [p for p in self.inv.pairs(providers=[provider]) if p["id"] not in self.pairs]
        self.pairs.update((p["id"], p) for p in rows)
        self.minted.update(self.inv.minted(p["id"] for p in rows))
        self._read_providers.add(provider)

    @property
    def rotation_of(self) -> dict[tuple[str, int], int]:
        """(pair, generation) -> the rotation that minted it; read only when a rollback note
        is written (the rotations table grows with history, a delivery must not)."""
        if self._rotation_of is None:
            self._rotation_of = {}
            for r in self.inv.rotations(limit=None):
                for i in r["items"]:
                    self._rotation_of[(str(i["pair"]), int(i["to"]))] = int(r["id"])
        return self._rotation_of

    def rollback(self, pair: str, generation: int) -> Rollback | None:
        """The signed note that delivering ``generation`` abandons newer minted ones, or None.

        Generation numbers are never reused, so every minted generation above the target is one
        a rotation gave up; an end that accepted one of them may go back only on this word.
        """
        abandoned = [g for g in self.minted.get(pair, []) if g > generation]
        if not abandoned:
            return None
        rotations = {self.rotation_of.get((pair, g)) for g in abandoned}
        return {"from": abandoned, "rotations": sorted(r for r in rotations if r is not None)}

    def _with_rollback(self, item: Item) -> Item:
        note = self.rollback(item["pair"], item["generation"])
        if note is not None:
            item["rollback"] = note
        return item

    def sealed(self, pair: str, generation: int) -> Sealed:
        """One generation's sealed blobs; InventoryError when they were discarded."""
        fresh = self._fresh.get((pair, generation))
        if fresh is not None and fresh["consumer_sealed"] and fresh["provider_sealed"]:
            return Sealed(fresh["digest"], fresh["consumer_sealed"], fresh["provider_sealed"])
        if self._sealed is None:  # one read for every payload this planner builds
            self._sealed = self.inv.held_generations(self._focus)
            self._sealed_read.update(self._focus or ())
        row = self._sealed.get((pair, generation))
        unread = (
            [] if self._focus is None else [p for p in self.pairs if p not in self._sealed_read]
        )
        if row is None and unread:
            # a whole manifest of a focused planner: its providers' other pairs, in one read
            self._sealed.update(self.inv.held_generations(unread))
            self._sealed_read.update(unread)
            row = self._sealed.get((pair, generation))
        row = row or self.inv.generation(pair, generation)
        if row is None or row["consumer_sealed"] is None or row["provider_sealed"] is None:
            raise InventoryError(f"{pair}: generation {generation} is not held sealed any more")
        return Sealed(row["digest"], row["consumer_sealed"], row["provider_sealed"])

    def _entry(self, p: PairRow, gen: int) -> ManifestEntry:
        row = self.sealed(p["id"], gen)
        cnode = node_of(p["consumer"])
        entry: ManifestEntry = {
            "pair": p["id"],
            "as": p["login"],
            "node": cnode,
            "module": p["consumer"].split("/", 1)[1],
            "at": self.nodes[cnode]["address"],
            "values": p["values"],
            "generation": gen,
            "digest": row.digest,
            "sealed": crypto.b64(row.provider),
        }
        return self._with_rollback(entry)

    def _live(self, provider: str, provision: str) -> list[PairRow]:
        self._read_provider(provider)
        return [
            p
            for p in self.pairs.values()
            if p["provider"] == provider and p["provision"] == provision and not p["withdrawn_at"]
        ]

    def _set(self, provider: str, provision: str, consumers: list[ManifestEntry]) -> ProviderSet:
        spec = self.modules[provider]["spec"]
        kind = next(
            (o.get("kind") for o in spec.get("provides", []) if o.get("name") == provision),
            None,
        )
        delivery: ProviderSet = {
            "provider": provider,
            "provision": provision,
            "receives": spec["receives"][provision],
            "grants": spec["grants"][provision],
            "admin": spec.get("admin"),
            "provisioner": spec.get("provisioner"),
            "pin": bool(spec.get("pin", False)),
            "consumers": consumers,
        }
        if kind is not None and registry.stored_name(kind) is not None:
            delivery["kind"] = kind
        return delivery

    def provider_sets(
        self, providers: Iterable[tuple[str, str]], targets: Targets
    ) -> dict[str, list[ProviderSet]]:
        """Manifest deliveries by provider node, for (provider module, provision) keys."""
        out: dict[str, list[ProviderSet]] = {}
        for provider, provision in sorted(set(providers)):
            consumers = [
                self._entry(p, targets.get(p["id"], p["generation"]))
                for p in self._live(provider, provision)
            ]
            out.setdefault(node_of(provider), []).append(self._set(provider, provision, consumers))
        return out

    def provider_deltas(
        self, providers: Iterable[tuple[str, str]], targets: Targets
    ) -> dict[str, list[ProviderSet]]:
        """:meth:`provider_sets` as deltas: only the pairs in ``targets``, with the base they
        apply to, the consumer set the inventory kept for the provision as last delivered
        (:meth:`Inventory.bases`). A provision without a kept base (never delivered whole,
        its last delivery failed, or declare changed a line since), or whose changed pairs'
        provider ends are not on record, is sent whole. Reads the changed pairs only."""
        keys = sorted(set(providers))
        bases = self.inv.bases(keys)
        changed = {key: [pid for pid in sorted(targets) if _provision(self.pairs[pid]) == key]
                   for key in keys}  # fmt: skip
        delivered = self.inv.deliveries(pairs=[pid for ids in changed.values() for pid in ids])
        out: dict[str, list[ProviderSet]] = {}
        for provider, provision in keys:
            base = bases.get((provider, provision))
            pairs = [self.pairs[pid] for pid in changed[(provider, provision)]]
            held = [delivered.get((p["id"], End.PROVIDER.value)) for p in pairs]
            if (
                base is None
                or any(p["withdrawn_at"] for p in pairs)
                or any(r is None or r["error"] or not r["digest"] for r in held)
            ):
                out.setdefault(node_of(provider), []).extend(
                    self.provider_sets([(provider, provision)], targets)[node_of(provider)]
                )
                continue
            entries = [self._entry(p, targets[p["id"]]) for p in pairs]
            spec = self._set(provider, provision, entries)
            spec["base"] = {"digest": base}
            before = [
                self._line(p, str(r["digest"])) for p, r in zip(pairs, held, strict=True) if r
            ]
            after = [self._line(p, e["digest"]) for p, e in zip(pairs, entries, strict=True)]
            self.expected_bases[(provider, provision)] = messages.rebased_digest(
                base, before, after
            )
            out.setdefault(node_of(provider), []).append(spec)
        return out

    def _line(self, p: PairRow, digest: str) -> messages.ConsumerLine:
        node = node_of(p["consumer"])
        module = p["consumer"].split("/", 1)[1]
        return messages.ConsumerLine(
            p["login"], node, module, self.nodes[node]["address"], p["values"], digest
        )

    def consumer_items(
        self, pairs: Iterable[str], targets: Targets
    ) -> dict[str, list[ConsumerItem]]:
        """Credential deliveries by consumer node."""
        out: dict[str, list[ConsumerItem]] = {}
        for pid in sorted(set(pairs)):
            p = self.pairs[pid]
            gen = targets.get(pid, p["generation"])
            row = self.sealed(pid, gen)
            node = node_of(p["consumer"])
            out.setdefault(node, []).append(
                self._with_rollback(
                    ConsumerItem(
                        pair=pid,
                        node=node,
                        generation=gen,
                        digest=row.digest,
                        file=p["file"],
                        owner=p["file_owner"],
                        group=p["file_group"],
                        mode=p["file_mode"],
                        reload=p["reload"],
                        sealed=crypto.b64(row.consumer),
                    )
                )
            )
            connection = self.connection(pid)
            if connection is not None:
                out[node][-1]["connection"] = connection
        return out

    def connection(self, pid: str) -> ConnectionItem | None:
        """The connection file a pair's ``requires`` entry declares, with its text (the
        provider's kind says what it holds), or None when it declares none."""
        p = self.pairs[pid]
        consumer = self.modules.get(p["consumer"])
        need = next(
            (
                n
                for n in (consumer["spec"]["requires"] if consumer else [])
                if n["name"] == p["provision"] and n["file"] == p["file"]
            ),
            None,
        )
        if need is None or "connection" not in need:
            return None
        spec = need["connection"]
        target = target_of(p, self.nodes, self.modules)
        kind = registry.kind_of(target.get("kind"))
        if kind.connection is None:
            return None
        facts = ConnectionFacts(
            login=p["login"],
            host=target["host"],
            port=target["port"],
            values=p["values"],
            ca=spec.get("ca") or target.get("ca"),
            tls=bool(target.get("tls", kind.tls)),
            password_file=p["file"],
        )
        text = render(kind.connection(facts), spec["format"]).decode("utf-8")
        return ConnectionItem(file=spec["file"], text=text)


def record_end(
    inv: Inventory, rows: Iterable[EndRow], bases: Mapping[Provision, str | None] | None = None
) -> None:
    """Record (pair, end, generation held, digest, error); a None generation keeps the old one.
    ``bases``: what each delivered provision's manifest now holds (see :class:`Delivered`),
    kept in the same transaction (a provider end recorded without one drops its base)."""
    write = end_writes(inv, rows, bases)
    if write is not None:
        with inv.transaction("record deliveries") as tx:
            write(tx)


def end_writes(
    inv: Inventory, rows: Iterable[EndRow], bases: Mapping[Provision, str | None] | None = None
) -> Callable[[Transaction], None] | None:
    """:func:`record_end`'s reads done now, its writes left for a transaction; None when
    there is nothing to write."""
    stamp = now()
    rows = list(rows)
    pairs = sorted({r[0] for r in rows})
    if len(pairs) <= FEW:  # a rotation of a few pairs reads their rows, not the mesh's
        current: dict[tuple[str, str], DeliveryRow] = {}
        for pid in pairs:
            current.update(inv.deliveries(pid))
    else:
        current = inv.deliveries()
    out: list[DeliveryRow] = []
    same: list[tuple[str, str]] = []  # (pair, end): only the attempt is new
    for pair, end, gen, digest, error in rows:
        old = current.get((pair, end.value))
        old_gen = old["generation"] if old else None
        old_since = old["since"] if old else None
        changed = gen is not None and gen != old_gen
        row = DeliveryRow(
            pair=pair,
            end=end.value,
            generation=gen if gen is not None else old_gen,
            digest=digest if gen is not None else (old["digest"] if old else None),
            since=stamp if changed or not old_since else old_since,
            attempted_at=stamp,
            error=error,
        )
        if old and all(row[k] == old[k] for k in ("generation", "digest", "since", "error")):
            same.append((pair, end.value))
        else:
            out.append(row)
    if not (out or same or bases):
        return None

    def write(tx: Transaction) -> None:
        tx.put_deliveries(out)
        tx.touch_deliveries(same, stamp)  # the other consumers of a re-sent manifest
        tx.put_bases(bases or {})

    return write


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
) -> None:
    """Deliver manifests to provider nodes (in parallel) and record each pair's provider end.

    A delta the node refuses (its manifest is not the delta's base) is sent again whole, from
    ``whole(provider, provision)``, in the same call. Each provision's new base is recorded
    when every consumer of its manifest applied: a whole one's from what was sent, a delta's
    from ``expected`` (:attr:`Planner.expected_bases`).
    """
    if not sets:
        return
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

    ``signed``: these deliveries as signed ahead, by node (:mod:`meshtui.controller.ahead`).
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


HELD_FILE: dict[str, Literal["file", "file_owner", "file_group", "file_mode"]] = {
    "file": "file",
    "owner": "file_owner",
    "group": "file_group",
    "mode": "file_mode",
}
"""A consumer holding's file keys (as the agent reports them) -> the pairs table's columns."""


def held_generations(inv: Inventory, holdings: Mapping[str, list[Holding]]) -> None:
    """Correct the deliveries table from agents' own ``state`` answers (by digest).

    A consumer file that is missing, unreadable (the agent names why), or no longer where or
    as the declaration wants it (file, owner, group, mode) counts as holding nothing, so the
    next push writes it again.
    """
    digests = inv.generation_by_digest()
    declared = inv.consumer_files()
    rows: list[EndRow] = []
    current = inv.deliveries()
    for _node, held in holdings.items():
        for h in held:
            gen = digests.get((h["pair"], h["digest"]))
            if gen is None:
                continue
            present = h.get("present", True)
            why = h.get("error") or "file missing or changed"
            want = declared.get(h["pair"])
            reported: Mapping[str, object] = h
            moved = [
                key
                for key, column in HELD_FILE.items()
                if h["end"] == End.CONSUMER.value
                and want is not None
                and key in reported
                and reported[key] != want[column]
            ]
            old = current.get((h["pair"], h["end"]))
            if present and moved:  # still on disk and working: held, but push writes it again
                why = f"{NOT_AS_DECLARED} ({', '.join(moved)} changed); push writes it again"
                if old is None or old["generation"] != gen or old["error"] != why:
                    rows.append((h["pair"], End(h["end"]), gen, h["digest"], why))
                continue
            old_gen, old_error = (old["generation"], old["error"]) if old else (None, None)
            if present and old_gen == gen and str(old_error or "").startswith(KEPT_FAILURES):
                continue  # holding it says nothing of the reload or the pin: push tries again
            if present and (old_gen != gen or old_error):
                rows.append((h["pair"], End(h["end"]), gen, h["digest"], None))
            elif not present and (old_gen or old_error != why):
                rows.append((h["pair"], End(h["end"]), NOTHING, None, why))
    record_end(inv, rows)


def as_json(data: Any) -> str:
    """Compact JSON for the journal and audit details."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def probe_row(
    pid: str, generation: int, probe: ProbeReport | str, at: str, *, withdrawn: bool
) -> ProbeRecord:
    """A probe result as the inventory stores it (verdict, reason, timing; never a secret).

    A probe that could not be made at all is given as the reason why (verdict ``unknown``).
    """
    if isinstance(probe, str):
        return ProbeRecord(
            pair=pid,
            at=at,
            generation=generation,
            verdict="unknown",
            reason=probe,
            latency_ms=None,
            used_password=None,
            loopback=0,
            client_addr=None,
            control=None,
            withdrawn=int(withdrawn),
        )
    login, control = probe["login"], probe["control"]
    return ProbeRecord(
        pair=pid,
        at=at,
        generation=generation,
        verdict=probe["verdict"],
        reason=probe["reason"],
        latency_ms=login["latency_ms"],
        used_password=login["used_password"],
        loopback=int(probe["loopback"]),
        client_addr=login["client_addr"],
        control=control["verdict"] if control else None,
        withdrawn=int(withdrawn),
    )
