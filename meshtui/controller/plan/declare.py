"""Turn a declaration into inventory rows: new pairs minted and sealed, gone pairs withdrawn.

Unchanged pairs keep their generation and their sealed blobs, so declaring the same file twice
writes nothing. A pair is never deleted: one that leaves the declaration becomes withdrawn.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NoReturn

from meshtui import crypto
from meshtui.contracts.adapter import alternate_login
from meshtui.controller.reports import NOT_AS_DECLARED
from meshtui.errors import DeclarationError
from meshtui.freeform import JsonObject
from meshtui.inventory import Inventory, Transaction, now
from meshtui.inventory.rows import (
    ClaimRecord,
    ConnectionSpec,
    GenerationRow,
    ModuleRecord,
    ModuleSpec,
    NeedSpec,
    NodeRow,
    OfferSpec,
    OwnSecretSpec,
    PairFields,
    PairRecord,
    PolicyRecord,
    decode_spec,
    encode_spec,
)
from meshtui.kinds import registry
from meshtui.kinds.kind import Kind, owns_nothing
from meshtui.model import (
    OVERLAP,
    Declaration,
    End,
    Node,
    Offer,
    OwnSecret,
    Pair,
    Requirement,
)
from meshtui.protocol.manifest import ALTERNATES

_sorted_json = json.JSONEncoder(sort_keys=True).encode
"""``json.dumps(x, sort_keys=True)`` without building an encoder per call (10,000 pairs)."""


@dataclass
class DeclareResult:
    """What a declaration changed, pair ids by kind."""

    new: list[str] = field(default_factory=list)
    reissued: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    withdrawn: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    nodes_changed: list[str] = field(default_factory=list)

    @property
    def touched(self) -> bool:
        """True when the inventory was written."""
        return bool(
            self.new or self.reissued or self.changed or self.withdrawn or self.nodes_changed
        )

    def to_json(self) -> JsonObject:
        """The ``declare --json`` object."""
        return {
            k: getattr(self, k)
            for k in ("new", "reissued", "changed", "withdrawn", "unchanged", "nodes_changed")
        }


def seal_generation(pair: str, generation: int, consumer: Node, provider: Node) -> GenerationRow:
    """Mint a credential, seal it to both ends, digest it, and drop the plaintext."""
    secret = crypto.mint().encode("ascii")
    row = GenerationRow(
        pair=pair,
        generation=generation,
        consumer_sealed=crypto.seal(secret, consumer.seal_key),
        provider_sealed=crypto.seal(secret, provider.seal_key),
        digest=crypto.secret_digest(secret),
        created_at=now(),
        discarded_at=None,
    )
    del secret
    return row


def _pair_row(p: Pair) -> PairFields:
    return PairFields(
        id=p.id,
        provision=p.provision,
        consumer=p.consumer,
        provider=p.provider,
        login=p.login,
        file=p.file,
        port=p.port,
        values=_sorted_json(dict(p.values)),
        reload=json.dumps(list(p.reload)),
        file_owner=p.owner,
        file_group=p.group,
        file_mode=p.mode,
    )


def _policy_row(p: Pair) -> PolicyRecord:
    """The pair's effective policy, as the inventory stores it for status and watch."""
    return PolicyRecord(
        pair=p.id,
        rotate_every=p.policy.rotate_every,
        probe_every=p.policy.probe_every,
        rotate_source=str(p.policy.rotate_source),
        probe_source=str(p.policy.probe_source),
        rotation=p.rotation.rotation,
        grace=p.rotation.grace,
    )


def _node_row(n: Node, stamp: str) -> NodeRow:
    return NodeRow(
        name=n.name,
        address=n.address,
        agent=n.agent,
        seal_key=crypto.b64(n.seal_key),
        verify_key=crypto.b64(n.verify_key),
        declared=1,
        updated_at=stamp,
    )


NODE_KEYS = ("name", "address", "agent", "seal_key", "verify_key")
"""The node columns the declaration sets (a change in any of them is a changed node)."""


END_WORDS = {"file_owner": "owner", "file_group": "group", "file_mode": "mode"}
"""A pair column's word in the reason of an end the declaration moved."""


def _differs(old: Mapping[str, object], new: Mapping[str, object], keys: Iterable[str]) -> bool:
    return any(old[k] != new[k] for k in keys)


def _moved(old: Mapping[str, object], new: Mapping[str, object]) -> list[str]:
    """What of a pair's row the declaration changed, in the words an end's reason uses."""
    return [END_WORDS.get(k, k) for k in new if old[k] != new[k]]


def _offer_spec(o: Offer) -> OfferSpec:
    """A provides entry as stored; the default kind's is {name, port} (``ca`` and ``tls`` are
    another kind's), ``sessions`` and ``drain`` only when declared."""
    sessions = None if o.sessions is None else o.sessions.value
    if registry.stored_name(o.kind) is None:
        return OfferSpec(name=o.name, port=o.port, sessions=sessions, drain=o.drain)
    return OfferSpec(
        name=o.name,
        port=o.port,
        kind=o.kind,
        ca=o.ca,
        tls=o.tls,
        sessions=sessions,
        drain=o.drain,
    )


def _secret_spec(o: OwnSecret) -> OwnSecretSpec:
    """One of a module's own secrets as stored in its spec."""
    return OwnSecretSpec(
        name=o.name,
        file=o.file,
        supplied=o.supplied,
        length=o.length,
        alphabet=o.alphabet,
        reload=list(o.reload),
        owner=o.owner,
        group=o.group,
        mode=o.mode,
        max_age=o.max_age,
    )


def _need_spec(r: Requirement) -> NeedSpec:
    """A requires entry as stored; ``sessions`` and ``drain`` only when declared."""
    c = r.connection
    connection = None if c is None else ConnectionSpec(file=c.file, format=c.format, ca=c.ca)
    sessions = None if r.sessions is None else r.sessions.value
    return NeedSpec(
        name=r.name,
        file=r.file,
        connection=connection,
        sessions=sessions,
        drain=r.drain,
        format=r.format,
    )


def _module_spec(decl: Declaration, module_id: str) -> str:
    m = decl.modules[module_id]
    spec = ModuleSpec(
        provides=[_offer_spec(o) for o in m.provides],
        receives=dict(m.receives),
        grants=dict(m.grants),
        admin=m.admin,
        provisioner=list(m.provisioner),
        requires=[_need_spec(r) for r in m.requires],
        pin=m.pin,
        secrets=[_secret_spec(o) for o in m.secrets],
    )
    return encode_spec(spec)


WRITE_CHUNK = 500
"""Pairs' rows and sealed generations are written to the (one) transaction this many at a time
as they are made, not all held until the end: at 10,000 new pairs that held ~13 MiB at the
controller's peak (tracemalloc). Every chunk belongs to a pair that is new, reissued or changed,
so a declare that writes one always writes the rest too, in the same transaction."""


def declare(inv: Inventory, decl: Declaration) -> DeclareResult:
    """Bring the inventory in line with ``decl`` in one transaction; returns what changed.

    What is there is read inside the same write transaction as what is written, so a
    rotation or another declare running meanwhile is waited for, never overwritten.
    """
    with inv.transaction("declare") as tx:
        return _declare(inv, tx, decl)


def _declare(inv: Inventory, tx: Transaction, decl: Declaration) -> DeclareResult:
    result = DeclareResult()
    old_nodes = inv.nodes()
    # specs compared as stored (canonical JSON, encode_spec), not decoded
    old_modules = inv.module_records()
    old_pairs = inv.pair_records()
    stamp = now()

    node_rows: list[NodeRow] = []
    rekeyed = set()
    for node in decl.nodes.values():
        nrow = _node_row(node, stamp)
        old = old_nodes.get(node.name)
        if old is None or _differs(old, nrow, NODE_KEYS) or not old["declared"]:
            result.nodes_changed.append(node.name)
            if old is not None and old["seal_key"] != nrow["seal_key"]:
                rekeyed.add(node.name)
        node_rows.append(nrow)
    gone_nodes = [n for n, r in old_nodes.items() if n not in decl.nodes and r["declared"]]
    result.nodes_changed += gone_nodes

    module_rows: list[ModuleRecord] = []
    for mid in decl.modules:
        spec = _module_spec(decl, mid)
        old_m = old_modules.get(mid)
        if old_m is None or old_m["spec"] != spec or not old_m["declared"]:
            module_rows.append(
                ModuleRecord(
                    id=mid,
                    node=decl.modules[mid].node,
                    name=decl.modules[mid].name,
                    spec=spec,
                    declared=1,
                )
            )
    gone_modules = [m for m, r in old_modules.items() if m not in decl.modules and r["declared"]]

    claim_rows = _claims(inv, decl, old_modules, old_pairs, stamp)
    _refuse_way_back(inv, decl, old_pairs)
    pair_rows: list[PairRecord] = []
    gen_rows: list[GenerationRow] = []
    # what a live pair's ends hold that the declaration changed: the next push delivers it
    behind: dict[str, tuple[list[str], tuple[End, ...]]] = {}
    moved_modules = {r["id"] for r in module_rows if r["id"] in old_modules}
    moved_nodes = {
        r["name"]
        for r in node_rows
        if r["name"] in old_nodes and old_nodes[r["name"]]["address"] != r["address"]
    }
    for p in decl.pairs:
        row = _pair_row(p)
        old_p = old_pairs.get(p.id)
        consumer, provider = decl.nodes[p.consumer_node], decl.nodes[p.provider_node]
        if old_p is None:
            result.new.append(p.id)
            gen_rows.append(seal_generation(p.id, 1, consumer, provider))
            pair_rows.append(
                PairRecord(
                    **row, generation=1, created_at=stamp, rotated_at=None, withdrawn_at=None
                )
            )
        elif old_p["withdrawn_at"] or {p.consumer_node, p.provider_node} & rekeyed:
            # back after withdrawal (its login was removed) or a node's keys changed: the old
            # blobs cannot serve, so the pair gets a fresh generation, delivered by the next push
            result.reissued.append(p.id)
            gen = old_p["generation"] + 1
            gen_rows.append(seal_generation(p.id, gen, consumer, provider))
            pair_rows.append(
                PairRecord(
                    **row,
                    generation=gen,
                    created_at=old_p["created_at"],
                    rotated_at=stamp,
                    withdrawn_at=None,
                )
            )
        elif _differs(old_p, row, row):
            result.changed.append(p.id)
            pair_rows.append({**old_p, **row})
            behind[p.id] = (_moved(old_p, row), (End.PROVIDER, End.CONSUMER))
        else:
            result.unchanged.append(p.id)
            if p.provider in moved_modules:
                behind[p.id] = (["the provider's declaration"], (End.PROVIDER,))
            elif p.consumer_node in moved_nodes:
                behind[p.id] = (["the consumer node's address"], (End.PROVIDER,))
        if len(pair_rows) >= WRITE_CHUNK:  # only a new, reissued or changed pair adds one
            tx.add_generations(gen_rows)
            tx.put_pairs(pair_rows)
            gen_rows.clear()
            pair_rows.clear()
    old_policies = inv.policy_records()
    policy_rows = [
        row for row in (_policy_row(p) for p in decl.pairs) if old_policies.get(row["pair"]) != row
    ]
    moved = set(result.new) | set(result.reissued) | set(result.changed)
    repoliced = {r["pair"] for r in policy_rows} - moved
    result.changed += sorted(repoliced)
    result.unchanged = [pid for pid in result.unchanged if pid not in repoliced]
    declared_ids = {p.id for p in decl.pairs}
    for pid, old_p in old_pairs.items():
        if pid not in declared_ids and not old_p["withdrawn_at"]:
            result.withdrawn.append(pid)

    if not result.touched and not module_rows and not gone_modules:
        return result
    tx.put_claims(claim_rows)
    tx.put_nodes(node_rows)
    tx.undeclare_nodes(gone_nodes, stamp)
    tx.put_modules(module_rows)
    tx.undeclare_modules(gone_modules)
    tx.add_generations(gen_rows)
    tx.put_pairs(pair_rows)
    tx.put_policies(policy_rows)
    tx.withdraw_pairs(result.withdrawn, stamp)
    tx.redeliver(
        [
            (pid, end.value, f"{NOT_AS_DECLARED} ({', '.join(what)} changed); push delivers it")
            for pid, (what, ends) in behind.items()
            for end in ends
        ]
    )
    tx.audit(
        "declare",
        result.new + result.reissued + result.changed + result.withdrawn,
        {
            "source": decl.source,
            "new": len(result.new),
            "reissued": len(result.reissued),
            "changed": len(result.changed),
            "withdrawn": len(result.withdrawn),
            "nodes": sorted(result.nodes_changed),
        },
        "ok",
    )
    return result


def _offer_kinds(specs: Iterable[tuple[str, str]]) -> dict[tuple[str, str], Kind]:
    """Each (provider module, provision) to its kind, from modules' stored specs."""
    kinds: dict[tuple[str, str], Kind] = {}
    for mid, spec in specs:
        for offer in decode_spec(mid, spec).provides:
            kinds[(mid, offer.name)] = registry.kind_of(offer.kind)
    return kinds


def _claims(
    inv: Inventory,
    decl: Declaration,
    old_modules: Mapping[str, ModuleRecord],
    old_pairs: Mapping[str, PairRecord],
    stamp: str,
) -> list[ClaimRecord]:
    """The claims (buckets) to record; DeclarationError for a consumer that would get what
    another module held — withdrawn, or moved elsewhere, its data still there — unless its
    entry takes that claim over by name.

    The record is the inventory's; claims made before it was kept are read from the pairs (a
    current pair's claim is its, else the last withdrawn one's) and recorded with the rest.
    """
    recorded = {key: row["module"] for key, row in inv.claims().items()}
    providers = {r["provider"] for r in old_pairs.values()}
    old_kinds = _offer_kinds((m, old_modules[m]["spec"]) for m in providers if m in old_modules)
    owning = [
        (old, kind)
        for old in old_pairs.values()
        if (kind := old_kinds.get((old["provider"], old["provision"]))) is not None
        and kind.owns is not owns_nothing
    ]
    owning.sort(key=lambda o: (not o[0]["withdrawn_at"], o[0]["withdrawn_at"] or ""))
    implied: dict[tuple[str, str], str] = {}
    for old, kind in owning:  # the withdrawn by time, then the current: the last one holds
        for claim in kind.owns(old["login"], json.loads(old["values"])):
            implied[(old["provider"], claim)] = old["consumer"]
    holders = {**implied, **recorded}
    rows = [
        ClaimRecord(provider=key[0], claim=key[1], module=module, since=stamp)
        for key, module in implied.items()
        if key not in recorded
    ]
    kinds = {
        (m.id, o.name): registry.kind_of(o.kind) for m in decl.modules.values() for o in m.provides
    }
    for p in decl.pairs:
        kind = kinds[(p.provider, p.provision)]
        taken = kind.takes_over(p.login, p.values)
        for claim in kind.owns(p.login, p.values):
            holder = holders.get((p.provider, claim))
            if holder == p.consumer:
                continue
            if holder is not None and claim not in taken:
                _refuse_inherited(decl, p, claim, holder)
            rows.append(
                ClaimRecord(provider=p.provider, claim=claim, module=p.consumer, since=stamp)
            )
    return rows


def _refuse_way_back(inv: Inventory, decl: Declaration, old_pairs: Mapping[str, object]) -> None:
    """DeclarationError for a pair that alternated between two logins (an overlap on
    PostgreSQL or SeaweedFS) declared a swap again: its consumer holds one of the two logins, which a swap
    of the pair's own login would leave accepting the old credential. The error names the
    pair, its logins, and the key that made it a swap (its requirement's ``rotation``, else
    its offer's)."""
    back = [p for p in decl.pairs if p.id in old_pairs and p.rotation.rotation != OVERLAP]
    was = inv.rotation_modes([p.id for p in back]) if back else {}
    for p in back:
        offers = decl.modules[p.provider].provides
        at, offer = next((i, o) for i, o in enumerate(offers) if o.name == p.provision)
        kind = registry.kind_of(offer.kind)
        if was[p.id].rotation != OVERLAP or not registry.can_alternate(kind):
            continue
        index, need = next(
            (i, r)
            for i, r in enumerate(decl.modules[p.consumer].requires)
            if r.name == p.provision and r.source in (None, p.provider)
        )
        key = (
            f'modules."{p.consumer}".requires[{index}].rotation'
            if need.rotation is not None or offer.rotation is None
            else f'modules."{p.provider}".provides[{at}].rotation'
        )
        logins = ", ".join(alternate_login(p.login, alt) for alt in ALTERNATES)
        word = kind.alternate_word or kind.login_word
        raise DeclarationError(
            decl.source,
            key,
            f"pair {p.id} rotates by overlap on two alternating {word}s of {p.login} "
            f"({logins}); a {kind.title} pair cannot go back to swap: a swap of {p.login} "
            f"would leave the {word} its consumer holds accepting the old credential",
            'keep rotation = "overlap" for this pair (set it on its requirement); to have one '
            "credential again, withdraw the pair (what it owns is kept, as a removed login's "
            "is) and declare it anew",
        )


def _refuse_inherited(decl: Declaration, p: Pair, claim: str, holder: str) -> NoReturn:
    """DeclarationError: ``p``'s consumer would inherit ``claim``, ``holder``'s, and its data."""
    index = next(
        i
        for i, r in enumerate(decl.modules[p.consumer].requires)
        if r.name == p.provision and r.source in (None, p.provider)
    )
    moved = any(q.consumer == holder and q.provider == p.provider for q in decl.pairs)
    state = "now names another" if moved else "withdrawn"
    raise DeclarationError(
        decl.source,
        f'modules."{p.consumer}".requires[{index}].values',
        f"{claim} at {p.provider} was {holder}'s ({state}) and still holds what it left "
        f"there: {p.consumer} would get rights on it, objects and all",
        f"if {p.consumer} is to take it over, name it in takes_over in these values, "
        f'e.g. takes_over = "NAME"; otherwise choose another for {p.consumer}',
    )


def nodes_from_inventory(rows: Mapping[str, NodeRow]) -> dict[str, Node]:
    """Model nodes from inventory rows (keys decoded)."""
    return {
        name: Node(
            name=name,
            address=r["address"],
            agent=r["agent"],
            seal_key=crypto.unb64(r["seal_key"]),
            verify_key=crypto.unb64(r["verify_key"]),
        )
        for name, r in rows.items()
    }
