"""Building what each node must hold (the :class:`Planner`); sending it is
:mod:`meshtui.controller.act.sending`'s job, recording which generation each end holds
:mod:`meshtui.controller.act.recording`'s.

A provider receives the whole manifest of one (provider module, provision): every live consumer
at its target generation, sealed to the provider. A consumer receives its own credential, sealed
to it. The answers are recorded per pair and per end, so the inventory always knows who is behind.

An agent never goes back to an older generation on its own: an item whose generation is below
one this inventory minted for the pair (a rotation's rollback, or a push converging an end the
rollback could not reach) says so in its signed ``rollback`` note, naming the abandoned
generations and their rotations.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import NamedTuple, TypeVar

from meshtui import crypto
from meshtui.contracts.adapter import alternate_login
from meshtui.controller.plan.alternation import alternate, alternating
from meshtui.controller.plan.connection_file import render
from meshtui.credential_unit import PASSWORD, unit_fields
from meshtui.errors import InventoryError
from meshtui.inventory import Inventory
from meshtui.inventory.rows import (
    GenerationRow,
    HeldSealed,
    ModuleRow,
    NeedSpec,
    NodeRow,
    OfferSpec,
    PairRow,
    Provision,
)
from meshtui.kinds import registry
from meshtui.kinds.kind import Connection, ConnectionFacts
from meshtui.model import End, Sessions, node_of
from meshtui.protocol import messages
from meshtui.protocol.messages import (
    ConnectionItem,
    ConsumerItem,
    ManifestEntry,
    ProviderSet,
    Rollback,
    Target,
    UnitItem,
)

Targets = Mapping[str, int]
"""pair id -> the generation its ends should receive (default: the pair's generation)."""

Item = TypeVar("Item", ConsumerItem, ManifestEntry)


def _provision(pair: PairRow) -> Provision:
    return (pair["provider"], pair["provision"])


def offer_of(pair: PairRow, modules: Mapping[str, ModuleRow] | None) -> OfferSpec | None:
    """The provider's ``provides`` entry for ``pair`` as stored (None when unknown)."""
    module = (modules or {}).get(pair["provider"])
    for offer in module["spec"].provides if module else []:
        if offer.name == pair["provision"]:
            return offer
    return None


def target_of(
    pair: PairRow,
    nodes: Mapping[str, NodeRow],
    modules: Mapping[str, ModuleRow] | None = None,
    login: str | None = None,
) -> Target:
    """Where a probe of ``pair`` logs in: the provider node's private address, port and kind;
    ``login``: an alternating pair's alternate (:meth:`Planner.target`), else its login."""
    offer = offer_of(pair, modules)
    kind = registry.kind_of(offer.kind if offer is not None else None)
    target: Target = {
        "host": nodes[node_of(pair["provider"])]["address"],
        "port": pair["port"],
        "login": pair["login"] if login is None else login,
        "dbname": kind.dbname(pair["login"], pair["values"]),
    }
    if offer is not None and registry.stored_name(kind.name) is not None:
        target["kind"], target["ca"] = kind.name, offer.ca
        target["tls"] = offer.tls
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
        rows: Iterable[PairRow] | None = None,
    ) -> None:
        """``fresh``: generations minted in memory and not yet stored (a rotation plans its
        deliveries while its nodes are being resolved, before it journals them). ``rows``: the
        focus's pairs as the caller just read them (a rotation holds them already: rotate all
        at 10,000 pairs read them twice, 12 MiB each)."""
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
            given = {p["id"]: p for p in rows or ()}
            if rows is None or given.keys() != set(self._focus):
                given = {p["id"]: p for p in inv.pairs(self._focus)}
            self.pairs = given
            self.modules = inv.module_specs(  # consumers too: their requires name connection
                {p["provider"] for p in self.pairs.values()}  # files; decoded when asked for
                | {p["consumer"] for p in self.pairs.values()}
            )
            self.minted = inv.minted(self.pairs)
            self._read_providers = set()
        self.expected_bases: dict[Provision, str] = {}
        """Per delta built: the base its provision's manifest holds once the delta applied."""
        self._rotation_of: dict[tuple[str, int], int] | None = None  # read when first needed
        self._alternating: set[str] = set()  # of the pairs in _asked: those that alternate
        self._asked: set[str] = set()
        self._sealed: dict[tuple[str, int], HeldSealed] | None = None
        self._sealed_read: set[str] = set()  # a focused planner's pairs whose blobs were read
        self.sessions: Mapping[str, Sessions] = {}
        """A rotation's pairs, each with what becomes of its sessions on the old credential
        once its provider holds the new one: asked of the provider in every set built."""
        self.drained: Mapping[str, str] = {}
        """Pairs whose sessions left to drain are checked (counted, or ended when the drain is
        over), each with the mark its provider gave when they began to drain."""
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
        if row is None and (stored := self.inv.generation(pair, generation)) is not None:
            row = (stored["digest"], stored["consumer_sealed"], stored["provider_sealed"])
        if row is None or row[1] is None or row[2] is None:
            raise InventoryError(f"{pair}: generation {generation} is not held sealed any more")
        return Sealed(row[0], row[1], row[2])

    def alternate(self, pid: str, generation: int) -> str:
        """The alternate login (``"a"``/``"b"``) that holds ``generation`` of ``pid`` when the
        pair alternates (:mod:`meshtui.controller.plan.alternation`), else ""."""
        if pid not in self._asked:
            unknown = [p for q, p in self.pairs.items() if q not in self._asked]
            self._alternating |= alternating(self.inv, unknown, self.modules)
            self._asked |= {p["id"] for p in unknown}
        return alternate(generation) if pid in self._alternating else ""

    def target(self, pid: str, generation: int | None = None) -> Target:
        """Where a probe of ``pid`` logs in with ``generation`` (default: the pair's): for an
        alternating pair, as that generation's alternate login."""
        p = self.pairs[pid]
        alt = self.alternate(pid, p["generation"] if generation is None else generation)
        login = alternate_login(p["login"], alt) if alt else None
        return target_of(p, self.nodes, self.modules, login)

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
        alt = self.alternate(p["id"], gen)
        if alt:
            entry["alt"] = alt
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
            (o.kind for o in spec.provides if o.name == provision),
            None,
        )
        delivery: ProviderSet = {
            "provider": provider,
            "provision": provision,
            "receives": spec.receives[provision],
            "grants": spec.grants[provision],
            "admin": spec.admin,
            "provisioner": spec.provisioner,
            "pin": spec.pin,
            "consumers": consumers,
        }
        if kind is not None and registry.stored_name(kind) is not None:
            delivery["kind"] = kind
        asked = {c["as"]: self.sessions[c["pair"]] for c in consumers if c["pair"] in self.sessions}
        if asked:
            delivery["sessions"] = asked
        marks = {c["as"]: self.drained[c["pair"]] for c in consumers if c["pair"] in self.drained}
        if marks:
            delivery["drained"] = marks
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

    def whole_set(self, targets: Targets) -> Callable[[str, str], ProviderSet]:
        """``whole(provider, provision)``: that provision's manifest whole, for a delta its
        node refused (:func:`~meshtui.controller.act.sending.send_providers` sends it again)."""

        def whole(provider: str, provision: str) -> ProviderSet:
            (spec,) = self.provider_sets([(provider, provision)], targets)[node_of(provider)]
            return spec

        return whole

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
            connection = self.connection(pid, gen)
            if connection is not None:
                out[node][-1]["connection"] = connection
            unit = self.unit(pid, gen)
            if unit is not None:
                out[node][-1]["unit"] = unit
        return out

    def _connection_of(
        self, pid: str, generation: int | None
    ) -> tuple[NeedSpec, Connection] | None:
        """A pair's ``requires`` entry and its kind's connection facts for the login the
        consumer holds with ``generation`` (default the pair's); None when its kind writes
        none."""
        p = self.pairs[pid]
        consumer = self.modules.get(p["consumer"])
        need = next(
            (
                n
                for n in (consumer["spec"].requires if consumer else [])
                if n.name == p["provision"] and n.file == p["file"]
            ),
            None,
        )
        if need is None:
            return None
        target = self.target(pid, generation)
        kind = registry.kind_of(target.get("kind"))
        if kind.connection is None:
            return None
        facts = ConnectionFacts(
            login=target["login"],
            host=target["host"],
            port=target["port"],
            values=p["values"],
            ca=(need.connection.ca if need.connection else None) or target.get("ca"),
            tls=bool(target.get("tls", kind.tls)),
            password_file=p["file"],
            owner=p["login"],
        )
        return need, kind.connection(facts)

    def connection(self, pid: str, generation: int | None = None) -> ConnectionItem | None:
        """The connection file a pair's ``requires`` entry declares, with its text (the
        provider's kind says what it holds; the login the consumer holds with ``generation``,
        default the pair's), or None when it declares none."""
        found = self._connection_of(pid, generation)
        if found is None or found[0].connection is None:
            return None
        spec = found[0].connection
        text = render(found[1], spec.format).decode("utf-8")
        return ConnectionItem(file=spec.file, text=text)

    def unit(self, pid: str, generation: int | None = None) -> UnitItem | None:
        """The lines but the password of a pair's credential file when its ``requires`` entry
        declares a format holding the login too (:mod:`meshtui.credential_unit`), for the
        login the consumer holds with ``generation``; None for a password alone."""
        found = self._connection_of(pid, generation)
        if found is None or found[0].format == PASSWORD:
            return None
        shape = found[0].format
        return UnitItem(format=shape, fields=unit_fields(shape, found[1]))
