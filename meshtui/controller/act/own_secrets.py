"""A module's own secrets (not a pair's): mint, supply, store in the vault, deliver, and say
where each stands.

The declared secrets are in each module's stored spec (``secrets``); their state is the
inventory's ``own_secrets`` table: the version the mesh wants held and its digest, the value
sealed to the vault's node until the vault stored it (then the blob is dropped), and which
version the vault and the module's file hold. A value is never stored in plain: minted here, it
is sealed to the vault node at once and dropped; supplied by an operator, likewise.

:func:`converge` brings every secret forward in two steps, each all-or-nothing per secret:

1. **store**: the vault's node unseals it and writes it into the module's KV path (``secret-
   store``); only once it answered with KV's version is the sealed blob dropped;
2. **deliver**: the module's node reads exactly that KV version with the module's own AppRole
   credential and writes its file (``secret-fetch``); only once its digest came back is the file
   recorded as holding it.

A rotation (:func:`rotate`) mints a new version; until both steps are done for it, the module's
file keeps the old value and the vault keeps the old version too (KV keeps every version, and a
module's node reads the version meshtui names, never "the latest"), so a step that fails leaves
the old secret working and the next push finishes the new one. Both steps run through one
loop (:func:`_run`: group, send, settle, record and audit per group).

:func:`due` says which minted secrets the watch rotates (their vault pair's ``rotate_every``,
counted from when the version was minted); :func:`drill` rotates one and proves from the
module's node (``secret-check``) that the new value is in its file and is the vault's current
version, and the old one in neither. Where each stands (:func:`status`) is read in
secret_states.py, which imports none of this.
"""

from __future__ import annotations

import secrets as random
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypedDict

from meshtui import crypto
from meshtui.controller.act.digest_keys import MeshKey, open_key, share
from meshtui.controller.plan.planner import offer_of
from meshtui.controller.read.schedule import PairDue, epoch, spread_offset
from meshtui.controller.read.secret_states import OUTSIDE, Declared, declared
from meshtui.controller.reports import SecretDrillCheck, SecretDrillReport
from meshtui.errors import InputError, MeshtuiError
from meshtui.freeform import JsonObject
from meshtui.inventory import Inventory, now
from meshtui.inventory.rows import ModuleRow, NodeRow, OwnSecretRow, PairRow
from meshtui.model import ALPHABETS, VAULT_PROVISION, node_of
from meshtui.protocol.messages import (
    SECRET_CHECK,
    SECRET_FETCH,
    SECRET_STORE,
    STATE,
    HeldSecret,
    SecretChecked,
    SecretCheckItem,
    SecretFetched,
    SecretFetchItem,
    SecretFetchRequest,
    SecretStored,
    SecretStoreItem,
    SecretStoreRequest,
    StateRequest,
)

TIMEOUT_S = 30.0

if TYPE_CHECKING:
    from meshtui.controller.reach import Reach


@dataclass(frozen=True)
class SecretsReport:
    """What one :func:`converge` did: each secret's step and the ones still behind."""

    done: list[str]
    behind: dict[str, str]
    repaired: dict[str, str] = field(default_factory=dict)
    """Secrets whose file was found not as written (changed, gone, another mode, owner or
    group) and was written again, by label, with what was found: said, never silent."""

    @property
    def ok(self) -> bool:
        return not self.behind

    def to_json(self) -> JsonObject:
        return asdict(self)


def mint_text(length: int, alphabet: str) -> bytes:
    """A fresh random secret: ``length`` characters of the named alphabet."""
    chars = ALPHABETS[alphabet]
    return "".join(random.choice(chars) for _ in range(length)).encode("ascii")


class SealedKey(TypedDict, total=False):
    """The ``digest_key`` field every request about an own secret may carry."""

    digest_key: str


def sealed_digest_key(mesh: MeshKey, row: OwnSecretRow, node: NodeRow) -> SealedKey:
    """The ``digest_key`` field of a request about ``row``'s secret when its digest is keyed:
    its key sealed to ``node``, for that request alone (none for a digest made before they
    were keyed, which the node compares in its own form)."""
    if not (row["digest"] or "").startswith(crypto.KEYED_PREFIX):
        return {}
    key = mesh.of(row, row["module"], row["name"])
    return {"digest_key": crypto.b64(crypto.seal(key, crypto.unb64(node["seal_key"], "seal key")))}


def mesh_key(ctl: Reach) -> MeshKey:
    """This controller's copy of the mesh's digest key (made when no controller holds one
    yet), after sealing it to every controller it knows that has none: what every writing
    action on own secrets digests with."""
    key = open_key(ctl, make=True)
    share(ctl, key)
    return key


def _sealed(value: bytes, vault_node: NodeRow, key: bytes) -> tuple[bytes, str]:
    """``value`` sealed to the vault's node, and its keyed digest."""
    return crypto.seal(
        value, crypto.unb64(vault_node["seal_key"], "seal key")
    ), crypto.keyed_digest(value, key)


def _row(d: Declared, old: OwnSecretRow | None, **fields: Any) -> OwnSecretRow:
    base: OwnSecretRow = (
        old.copy()
        if old is not None
        else {
            "module": d.module,
            "name": d.spec.name,
            "version": 0,
            "digest": None,
            "sealed": None,
            "vault_version": None,
            "kv_version": None,
            "file_version": None,
            "supplied_by": None,
            "supplied_at": None,
            "error": None,
            "updated_at": now(),
            "digest_key": None,
        }
    )
    base.update(fields)  # type: ignore[typeddict-item]
    base["updated_at"] = now()
    return base


def _new_version(
    inv: Inventory,
    mesh: MeshKey,
    d: Declared,
    value: bytes,
    *,
    event: str,
    supplied_by: str | None = None,
) -> int:
    """Seal ``value`` to the vault's node as the secret's next version (the plaintext is the
    caller's to drop); audited. Returns the version."""
    if d.pair is None:
        raise InputError(
            f"{d.module} has no vault pair (it must require {VAULT_PROVISION!r}); declare it"
        )
    nodes = inv.nodes()
    vault_node = nodes[node_of(d.pair["provider"])]
    old = inv.own_secrets().get(d.key)
    sealed, digest = _sealed(value, vault_node, mesh.of(old, d.module, d.spec.name))
    version = (old["version"] if old else 0) + 1
    # supplied_at: when this version was sealed, by an operator (supplied_by) or minted here;
    # the watch's rotation policy counts a minted secret's age from it
    supplied = {"supplied_by": supplied_by, "supplied_at": now()}
    row = _row(d, old, version=version, digest=digest, sealed=sealed, error=None, **supplied)
    with inv.transaction(event) as tx:
        tx.put_own_secrets([row])
        detail: dict[str, object] = {
            "module": d.module, "name": d.spec.name, "version": version, "digest": digest,
        }  # fmt: skip
        if supplied_by:
            detail["supplied_by"] = supplied_by
        tx.audit(event, [d.pair["id"]], detail, "ok")
    return version


def _mint_missing(inv: Inventory, mesh: MeshKey, found: Sequence[Declared]) -> list[str]:
    rows = inv.own_secrets()
    done = []
    for d in found:
        old = rows.get(d.key)
        if d.spec.supplied or d.pair is None or (old is not None and old["version"] > 0):
            continue
        value = mint_text(d.spec.length, d.spec.alphabet)
        version = _new_version(inv, mesh, d, value, event="secret-mint")
        del value
        done.append(f"{d.module} {d.spec.name}: minted version {version}")
    return done


def rotate(ctl: Reach, module: str, name: str) -> int:
    """Mint the next version of a minted secret (delivered by the :func:`converge` after)."""
    d = _find(ctl.inventory, module, name)
    if d.spec.supplied:
        raise InputError(
            f"{module} secret {name} is supplied by an operator: put a new value with "
            f"meshtui secret put {module} {name}"
        )
    value = mint_text(d.spec.length, d.spec.alphabet)
    version = _new_version(ctl.inventory, mesh_key(ctl), d, value, event="secret-rotate")
    del value
    return version


def put(ctl: Reach, module: str, name: str, value: bytes, supplied_by: str) -> int:
    """Seal an operator's value for a supplied secret as its next version, at once."""
    d = _find(ctl.inventory, module, name)
    if not d.spec.supplied:
        raise InputError(
            f"{module} secret {name} is minted by the mesh, not supplied: rotate it with "
            f"meshtui secret rotate {module} {name}"
        )
    if not value or b"\x00" in value or len(value) > 65536:
        raise InputError(f"{module} secret {name}: the value is empty, too long or holds a NUL")
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{module} secret {name}: the value is not UTF-8 text") from None
    return _new_version(
        ctl.inventory, mesh_key(ctl), d, value, event="secret-put", supplied_by=supplied_by
    )


def _find(inv: Inventory, module: str, name: str) -> Declared:
    found = declared(inv)
    for d in found:
        if d.key == (module, name):
            return d
    names = sorted(f"{d.module} {d.spec.name}" for d in found)
    raise InputError(
        f"{module} declares no secret {name!r}; declared: {', '.join(names) or 'none'} "
        "(add it to the module's secrets and declare again); nothing was sealed"
    )


@dataclass(frozen=True)
class SecretDue:
    """A minted secret the policy says to rotate now: its module, name, vault pair and times."""

    module: str
    name: str
    pair: str
    vault: str
    since: float  # when its current version was minted (epoch seconds)
    due_at: float

    @property
    def label(self) -> str:
        return f"{self.module} {self.name}"


def due(inv: Inventory, plan: Sequence[PairDue], at: float) -> list[SecretDue]:
    """The minted secrets due for rotation at ``at``: a minted secret rotates on its module's
    vault pair's ``rotate_every`` (on the ``secret`` requirement, the vault module or
    ``[policy]``), counted from when its current version was minted, spread like a pair's.
    One still on its way (the file not holding the wanted version yet) is left to push; a
    supplied one is the operator's to put."""
    every = {d.pair: d.policy.rotate_every for d in plan if not d.withdrawn}
    rows = inv.own_secrets()
    out: list[SecretDue] = []
    for d in declared(inv):
        row = rows.get(d.key)
        if d.spec.supplied or d.pair is None or row is None or not row["version"]:
            continue
        rotate = every.get(d.pair["id"])
        if rotate is None or row["file_version"] != row["version"]:
            continue
        since = epoch(row["supplied_at"] or row["updated_at"])
        due_at = since + rotate + spread_offset(_label(d), rotate)
        if at >= due_at:
            out.append(
                SecretDue(d.module, d.spec.name, d.pair["id"], d.pair["provider"], since, due_at)
            )
    return out


def converge(ctl: Reach) -> SecretsReport:
    """Mint what is missing, store in the vault what is not there yet, deliver what the
    module's file does not hold (see the module docstring)."""
    inv: Inventory = ctl.inventory
    found = declared(inv)
    behind: dict[str, str] = {}
    if not found:
        return SecretsReport([], behind)
    mesh = mesh_key(ctl)
    done = _mint_missing(inv, mesh, found)
    nodes, modules = inv.nodes(), inv.modules()
    with ctl.agents(timeout=TIMEOUT_S) as agents:
        found_off = look_at_files(inv, agents, found)
        done += _run(inv, agents, found, behind, _Store(nodes, modules, mesh))
        done += _run(inv, agents, found, behind, _Deliver(nodes, modules, mesh))
    rows = inv.own_secrets() if found_off else {}  # read again only after a file was off
    repaired = {
        _label(d): f"written again: {found_off[d.key]}"
        for d in found
        if d.key in found_off
        and (row := rows.get(d.key)) is not None
        and row["file_version"] == row["version"]
    }
    for d in found:
        if d.pair is None:
            behind[f"{d.module} {d.spec.name}"] = f"{d.module} has no live vault pair"
        # a supplied secret nobody supplied yet waits for an operator, not for a push: status
        # says so (stale, with the command), push does not fail on it
    return SecretsReport(done, behind, repaired)


def file_problem(held: HeldSecret) -> str | None:
    """Why a module's own secret file, as its node reports it, is not what the agent wrote
    there (gone, changed, unreadable, another mode, owner or group); None when it is."""
    if held.get("error"):
        return held.get("error")
    if not held["present"]:
        return f"{held['file']} does not hold version {held['version']} (changed, or gone)"
    if held.get("unlike"):
        return "; ".join(f"{held['file']} {u}" for u in held["unlike"])
    return None


def held_files(agents: Any, nodes: Sequence[str]) -> dict[str, list[HeldSecret]]:
    """Each answering node's own secret files as they are now (``state`` with ``secrets``)."""
    answers = agents.call_many(
        STATE, {n: StateRequest(holdings=False, secrets=True) for n in nodes}, timeout=TIMEOUT_S
    )
    return {
        node: answer.get("secrets", [])
        for node, answer in answers.items()
        if not isinstance(answer, MeshtuiError)
    }


def look_at_files(
    inv: Inventory, agents: Any, found: Sequence[Declared]
) -> dict[tuple[str, str], str]:
    """Ask each module's node what its own secret files hold now: one recorded as holding its
    version but not as written (changed, gone, another mode, owner or group) is recorded as
    not holding it, with why, so the deliver step writes it again (status says why meanwhile).
    Returns what was found, by secret."""
    rows = inv.own_secrets()
    held = {
        d.key: d
        for d in found
        if d.pair is not None
        and (row := rows.get(d.key)) is not None
        and row["version"]
        and row["file_version"] == row["version"]
    }
    if not held:
        return {}
    updates: list[OwnSecretRow] = []
    off: dict[tuple[str, str], str] = {}
    for files in held_files(agents, sorted({node_of(d.module) for d in held.values()})).values():
        for h in files:
            d = held.get((h["module"], h["name"]))
            if d is None or h["file"] != d.spec.file or h["version"] != rows[d.key]["version"]:
                continue
            why = file_problem(h)
            if why:
                updates.append(_row(d, rows[d.key], file_version=None, error=f"file: {why}"))
                off[d.key] = why
    if updates:
        with inv.transaction("secret-file") as tx:
            tx.put_own_secrets(updates)
            tx.audit(
                "secret-file",
                [],
                {"not as written": sorted(f"{u['module']} {u['name']}" for u in updates)},
                "behind",
            )
    return off


class _Step(Protocol):
    """One of :func:`converge`'s two steps: which secrets it takes and to whom (grouped, one
    request per group), the request sent, and what each answer makes of the secret's row."""

    event: str

    def pick(self, d: Declared, pair: PairRow, row: OwnSecretRow) -> tuple[str, Any] | None:
        """The group (the vault module, or the module's node) and the item, or None: not due."""

    def send(self, agents: Any, group: str, items: list[Any]) -> dict[tuple[str, str], Any]:
        """Ask the group's node; its answers by (module, name)."""

    def settle(
        self, d: Declared, row: OwnSecretRow, item: Any, got: Any | None
    ) -> tuple[OwnSecretRow, str | None, str | None]:
        """The row after the answer, what was done (or None) and why it is behind (or None)."""

    def unanswered(self, group: str, exc: MeshtuiError) -> str:
        """Why every secret of a group whose node did not answer is behind."""

    def audited(self, group: str) -> dict[str, object]:
        """The group's line in the audit event's detail."""


def _run(
    inv: Inventory, agents: Any, found: Sequence[Declared], behind: dict[str, str], step: _Step
) -> list[str]:
    """One step for every secret it picks: grouped, one request per group, the answers
    recorded (and audited) per group in one transaction."""
    rows = inv.own_secrets()
    groups: dict[str, list[tuple[Declared, Any]]] = {}
    for d in found:
        row = rows.get(d.key)
        if d.pair is None or row is None:
            continue
        picked = step.pick(d, d.pair, row)
        if picked is not None:
            groups.setdefault(picked[0], []).append((d, picked[1]))
    done: list[str] = []
    for group, items in groups.items():
        try:
            answers = step.send(agents, group, [i for _, i in items])
        except MeshtuiError as exc:
            for d, _ in items:
                behind[_label(d)] = step.unanswered(group, exc)
            continue
        updates: list[OwnSecretRow] = []
        for d, item in items:
            update, did, why = step.settle(d, rows[d.key], item, answers.get(d.key))
            updates.append(update)
            if did:
                done.append(did)
            if why:
                behind[_label(d)] = why
        with inv.transaction(step.event) as tx:
            tx.put_own_secrets(updates)
            tx.audit(
                step.event,
                [d.pair["id"] for d, _ in items if d.pair is not None],
                {
                    **step.audited(group),
                    "secrets": [_label(d) for d, _ in items],
                    "versions": {_label(d): item["version"] for d, item in items},
                },
                "ok" if all(u["error"] is None for u in updates) else "failed",
            )
    return done


def _label(d: Declared) -> str:
    return f"{d.module} {d.spec.name}"


class _Sealing:
    """What both steps build their items from: the nodes (the keys a digest's key is sealed
    to), the modules, and the mesh's digest key (each secret's digest key comes from it)."""

    def __init__(
        self, nodes: Mapping[str, NodeRow], modules: Mapping[str, ModuleRow], mesh: MeshKey
    ) -> None:
        self.nodes, self.modules, self.mesh = nodes, modules, mesh


class _Store(_Sealing):
    """Step 1: the vault's node writes each sealed secret into KV (``secret-store``); only once
    it answered with KV's version is the sealed blob dropped."""

    event = "secret-store"

    def pick(
        self, d: Declared, pair: PairRow, row: OwnSecretRow
    ) -> tuple[str, SecretStoreItem] | None:
        if row["sealed"] is None:
            return None
        item: SecretStoreItem = {
            "module": d.module,
            "login": pair["login"],
            "name": d.spec.name,
            "version": row["version"],
            "digest": str(row["digest"]),
            "sealed": crypto.b64(row["sealed"]),
            **sealed_digest_key(self.mesh, row, self.nodes[node_of(pair["provider"])]),
        }  # fmt: skip
        return pair["provider"], item

    def send(
        self, agents: Any, group: str, items: list[SecretStoreItem]
    ) -> dict[tuple[str, str], SecretStored]:
        spec = self.modules[group]["spec"]
        offer = next((o for o in spec.provides if o.name == VAULT_PROVISION), None)
        request: SecretStoreRequest = {
            "vault": group,
            "kind": (offer.kind or "") if offer is not None else "",
            "receives": spec.receives.get(VAULT_PROVISION, ""),
            "grants": spec.grants.get(VAULT_PROVISION, ""),
            "admin": spec.admin or "",
            "items": items,
        }
        answer = agents.call(node_of(group), SECRET_STORE, request)
        return {(s["module"], s["name"]): s for s in answer["stored"]}

    def settle(
        self, d: Declared, row: OwnSecretRow, item: SecretStoreItem, got: SecretStored | None
    ) -> tuple[OwnSecretRow, str | None, str | None]:
        if (
            got is None
            or got["error"]
            or got["kv_version"] is None
            or got["version"] != item["version"]
        ):
            why = (got["error"] if got else None) or "the vault's node said nothing of it"
            return _row(d, row, error=f"store: {why}"), None, f"not in the vault yet: {why}"
        stored = _row(
            d, row, sealed=None, vault_version=item["version"], kv_version=got["kv_version"],
            error=None,
        )  # fmt: skip
        vault = d.pair["provider"] if d.pair is not None else "its vault"
        return stored, f"{_label(d)}: version {item['version']} stored in {vault}", None

    def unanswered(self, group: str, exc: MeshtuiError) -> str:
        return f"the vault's node {node_of(group)} did not answer: {exc}"

    def audited(self, group: str) -> dict[str, object]:
        return {"vault": group}


class _Deliver(_Sealing):
    """Step 2: the module's node reads exactly the stored KV version with the module's own
    AppRole credential and writes its file (``secret-fetch``); only once its digest came back
    is the file recorded as holding it."""

    event = "secret-deliver"

    def pick(
        self, d: Declared, pair: PairRow, row: OwnSecretRow
    ) -> tuple[str, SecretFetchItem] | None:
        if (
            row["vault_version"] != row["version"]
            or row["kv_version"] is None
            or row["file_version"] == row["version"]
        ):
            return None
        spec = d.spec
        item: SecretFetchItem = {
            "module": d.module,
            "name": spec.name,
            "version": row["version"],
            "kv_version": row["kv_version"],
            "digest": str(row["digest"]),
            **_reach(pair, self.nodes, self.modules),
            "file": spec.file,
            "owner": spec.owner,
            "group": spec.group,
            "mode": spec.mode,
            "reload": list(spec.reload),
            **sealed_digest_key(self.mesh, row, self.nodes[node_of(d.module)]),
        }  # fmt: skip
        return node_of(d.module), item

    def send(
        self, agents: Any, group: str, items: list[SecretFetchItem]
    ) -> dict[tuple[str, str], SecretFetched]:
        request: SecretFetchRequest = {"items": items}
        answer = agents.call(group, SECRET_FETCH, request)
        return {(f["module"], f["name"]): f for f in answer["fetched"]}

    def settle(
        self, d: Declared, row: OwnSecretRow, item: SecretFetchItem, got: SecretFetched | None
    ) -> tuple[OwnSecretRow, str | None, str | None]:
        if got is None or got["error"] or got["digest"] != item["digest"]:
            why = (got["error"] if got else None) or "the module's node said nothing of it"
            return (
                _row(d, row, error=f"deliver: {why}"),
                None,
                f"the file does not hold version {item['version']} yet: {why}",
            )
        reload = got.get("reload")
        error = f"reload {reload}" if reload and reload != "ok" else None
        return (
            _row(d, row, file_version=item["version"], error=error),
            f"{_label(d)}: version {item['version']} written to {item['file']}",
            f"written, but its {error}" if error else None,
        )

    def unanswered(self, group: str, exc: MeshtuiError) -> str:
        return f"node {group} did not answer: {exc}"

    def audited(self, group: str) -> dict[str, object]:
        return {"node": group}


class _Reach(TypedDict):
    """How a module's node reaches its vault as the module: its login, the pair credential's
    file, the vault's address, port, CA and kind."""

    login: str
    credential: str
    host: str
    port: int
    ca: str | None
    kind: str


def _reach(pair: PairRow, nodes: Mapping[str, NodeRow], modules: Mapping[str, ModuleRow]) -> _Reach:
    offer = offer_of(pair, modules)
    return {
        "login": pair["login"],
        "credential": pair["file"],
        "host": nodes[node_of(pair["provider"])]["address"],
        "port": pair["port"],
        "ca": offer.ca if offer is not None else None,
        "kind": str(offer.kind or "") if offer is not None else "",
    }


def drill(ctl: Reach, module: str, name: str) -> SecretDrillReport:
    """Rotate a minted secret and prove it from the module's node: before, its file and the
    vault's current version hold the version the inventory says; after, both hold the new one
    and neither the old. Always a report (failures are in it); audited as ``secret-drill``."""
    inv: Inventory = ctl.inventory
    d = _find(inv, module, name)
    if d.spec.supplied:
        raise InputError(
            f"{module} secret {name} is supplied by an operator: a drill rotates, and only a "
            "minted secret is rotated by the mesh"
        )
    if d.pair is None:
        raise InputError(f"{module} has no live vault pair; declare its {VAULT_PROVISION!r}")
    mesh = mesh_key(ctl)
    row = inv.own_secrets().get(d.key)
    if row is None or not row["version"] or row["file_version"] != row["version"]:
        raise InputError(
            f"{module} secret {name} is not in place yet (see meshtui secret status); "
            "run meshtui push, then drill it"
        )
    moved = row["error"] or ""
    if moved.startswith(OUTSIDE):
        raise InputError(
            f"{module} secret {name}: {moved.removeprefix(OUTSIDE)}; nothing was rotated"
        )
    old_version, old_digest = row["version"], str(row["digest"])
    nodes = inv.nodes()
    node = node_of(module)
    item: SecretCheckItem = {
        "module": module,
        "name": name,
        **_reach(d.pair, nodes, inv.modules()),
        "file": d.spec.file,
        **sealed_digest_key(mesh, row, nodes[node]),
    }
    checks: list[SecretDrillCheck] = []
    new_version: int | None = None
    reason = ""

    def look() -> SecretChecked:
        with ctl.agents(timeout=TIMEOUT_S) as agents:
            answer = agents.call(node, SECRET_CHECK, {"items": [item]})
        checked: list[SecretChecked] = answer["checked"]
        return checked[0]

    try:
        before = look()
        held = before["file_digest"] == before["vault_digest"] == old_digest
        checks.append(
            SecretDrillCheck(
                "old in the file and the vault's current version before",
                held,
                before["error"] or f"version {old_version}, KV version {before['kv_version']}",
            )
        )
        if held:
            new_version = rotate(ctl, module, name)
            converge(ctl)
            new_row = inv.own_secrets()[d.key]
            new_digest = str(new_row["digest"])
            item = {**item, **sealed_digest_key(mesh, new_row, nodes[node])}
            after = look()
            seen = after["error"] or f"KV version {after['kv_version']}"
            checks += [
                SecretDrillCheck("new in the file after", after["file_digest"] == new_digest, seen),
                SecretDrillCheck(
                    "new is the vault's current version after",
                    after["vault_digest"] == new_digest,
                    seen,
                ),
                SecretDrillCheck(
                    "old gone from the file and the vault's current version",
                    old_digest not in (after["file_digest"], after["vault_digest"]),
                    seen,
                ),
            ]
    except MeshtuiError as exc:
        reason = f"node {node} did not answer: {exc}"
    ok = len(checks) == 4 and all(c.ok for c in checks)
    if ok:
        reason = "new in the file and the vault, old in neither"
    elif not reason:
        failed = next(c for c in checks if not c.ok)
        reason = f"{failed.name}: failed ({failed.seen})"
        if len(checks) == 1:
            reason += "; nothing was rotated"
    with inv.transaction("secret-drill") as tx:
        tx.audit(
            "secret-drill",
            [d.pair["id"]],
            {
                "module": module,
                "name": name,
                "old_version": old_version,
                "new_version": new_version,
                "checks": {c.name: c.ok for c in checks},
            },
            "ok" if ok else "failed",
        )
    return SecretDrillReport(module, name, ok, old_version, new_version, checks, reason)
