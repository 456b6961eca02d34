"""The controller's one front door: the CLI and the dashboard call this and nothing below it.

It owns the state folder (inventory, controller keys) and enforces read-only at the place where
actions run: a read-only controller opens the inventory ``mode=ro``, refuses every action, and
never loads its key: :meth:`Controller.contact` is the one gate to the agents (nothing reaches
one without a request signed by that key), and read-only refuses there, naming the nodes.
The one exception is :meth:`Controller.verify_anchors`, which reads the audit head each node
keeps without a key (an unsigned read that changes nothing; the answer is signed by the node
and the head inside by the controller), so a read-only ``audit --verify`` can check it.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from meshtui import crypto
from meshtui.controller import config
from meshtui.controller.freshness import (
    InventoryStamp,
    change_feed,
    inventory_stamp,
    shared_stamp,
)
from meshtui.controller.keys import KEY_STEM, Keyring, keyring, write_keys_once
from meshtui.controller.read import detail as detail_mod
from meshtui.controller.read import schedule as schedule_mod
from meshtui.controller.read import status as status_mod
from meshtui.controller.read.heartbeat import Heartbeat
from meshtui.controller.read.schedule import PairDue
from meshtui.controller.records.restored import load_proof
from meshtui.controller.reports import (
    SECRET_LABEL,
    AuditEvent,
    ChainReport,
    DrillReport,
    HostView,
    Leadership,
    PairDetail,
    ProbeOutcome,
    Progress,
    PushReport,
    RotationPlan,
    RotationReport,
    SecretsRotated,
    Summary,
    no_progress,
)
from meshtui.errors import (
    DigestKeyError,
    ForeignStateFolderError,
    InputError,
    InventoryError,
    MeshtuiError,
    ReadOnlyContactError,
    ReadOnlyError,
    RotationBusyError,
    UnknownPairError,
)
from meshtui.folders import trusted_path, user_name
from meshtui.inventory import Inventory, pg_pool
from meshtui.inventory.pg_feed import ChangeFeed
from meshtui.model import PairStatus, RotationState, Sessions, State, node_of
from meshtui.protocol import wire
from meshtui.protocol.fence import Fence

if TYPE_CHECKING:  # httpx stays out of the import of core (see controller.client)
    from meshtui.controller.agents.client import Agents
    from meshtui.controller.plan.declare import DeclareResult
    from meshtui.controller.read.doctor import DoctorReport
    from meshtui.controller.records.anchors import AnchorCheck
    from meshtui.controller.reports import Draining, Rotating, SecretDrillReport, SecretStatus
    from meshtui.controller.turn import Turn
    from meshtui.inventory.lease import Leases
    from meshtui.inventory.rows import EventRow, NodeRow

__all__ = ["INVENTORY", "KEY_STEM", "SEQUENCE_FILE", "Controller", "init_keys"]

SEQUENCE_FILE = "sequence"
"""The last number of the controller's requests (see :class:`meshtui.protocol.wire.Sequence`)."""
INVENTORY = "inventory.db"
"""The inventory file's name in a state folder."""


def own_folder(state_dir: Path) -> None:
    """ForeignStateFolderError unless ``state_dir`` (when it exists) is this user's and nobody
    else may write it: root running ``push`` in the ``meshtui`` user's folder opened
    ``deliver.lock`` (and SQLite its journal) through a link that user put there. No link or
    folder on the way to it may be another user's either (:func:`trusted_path`)."""
    trusted_path(state_dir)
    try:
        st = os.stat(state_dir)
    except FileNotFoundError:
        return
    me = os.geteuid()
    if st.st_uid != me or st.st_mode & 0o022:
        raise ForeignStateFolderError(
            str(Path(state_dir).absolute()),
            user_name(st.st_uid),
            user_name(me),
            writable=st.st_uid == me,
        )


def open_inventory(state_dir: Path, *, read_only: bool = False) -> Inventory:
    """The state folder's inventory: the SQLite file in it, or the PostgreSQL database its
    settings (or :data:`~meshtui.controller.config.ENV`) name."""
    postgres = config.inventory_postgres(state_dir)
    return Inventory.open(state_dir / INVENTORY, read_only=read_only, postgres=postgres)


def share_inventory_connections(share: bool) -> None:
    """``share``: this process opens the inventory again and again from several threads (the
    dashboard): a PostgreSQL inventory's sessions come from one checked pool from now on
    (:mod:`meshtui.inventory.pg_pool`); False closes the pools. Nothing changes for SQLite."""
    if share:
        pg_pool.share()
    else:
        pg_pool.close()


def has_inventory(state_dir: Path) -> bool:
    """True when the state folder has an inventory to open (on PostgreSQL: one is named)."""
    return (state_dir / INVENTORY).exists() or config.inventory_postgres(state_dir) is not None


def init_postgres(state_dir: Path, conninfo: Path, name: str | None) -> Path:
    """Put ``state_dir``'s inventory on the PostgreSQL database ``conninfo`` names: the file
    checked, the settings written, the schema created (or migrated, or a newer one refused).
    A state folder holding a SQLite inventory is refused: its history would be left behind."""
    from meshtui.inventory.pg_connection import read_conninfo

    conninfo = Path(conninfo).absolute()
    read_conninfo(conninfo)  # private, this user's, a conninfo: refused before anything is written
    trusted_path(state_dir, create=0o700)
    own_folder(state_dir)
    if (state_dir / INVENTORY).exists():
        raise InventoryError(
            f"{state_dir / INVENTORY}: this state folder's inventory is a SQLite file; "
            "init --postgres makes a new one, it does not move this one (nothing was changed)"
        )
    old = config.load(state_dir)
    saved = config.save(
        state_dir, config.ControllerConfig(name=name or old.name, postgres=conninfo)
    )
    try:
        Inventory.open(state_dir / INVENTORY, postgres=conninfo).close()
    except BaseException:
        config.save(state_dir, old)  # the folder keeps pointing where it did
        raise
    return saved


MOVED = f"{INVENTORY}.moved"
"""The SQLite file's name once its inventory moved to PostgreSQL (kept, no longer read)."""


def move_to_postgres(state_dir: Path, conninfo: Path) -> Path:
    """Move the state folder's SQLite inventory into the empty PostgreSQL database ``conninfo``
    names, then point the folder's settings there and set the file aside (:data:`MOVED`).

    The copy is one PostgreSQL transaction: interrupted, the target is as empty as it was and
    the folder still reads its SQLite file. Interrupted after the copy's commit, a second run
    finds the same inventory there and only finishes the switch. Stop ``watch`` first: a
    process holding the SQLite inventory open goes on writing it. The settings' path."""
    from meshtui.inventory.move import to_postgres
    from meshtui.inventory.pg_connection import read_conninfo

    conninfo = Path(conninfo).absolute()
    read_conninfo(conninfo)
    own_folder(state_dir)
    source = state_dir / INVENTORY
    if config.inventory_postgres(state_dir) is not None:
        raise InventoryError(f"{state_dir}: its inventory is on PostgreSQL already")
    if not source.exists():
        raise InventoryError(f"{source}: no SQLite inventory to move")
    to_postgres(source, conninfo)
    saved = config.save(state_dir, replace(config.load(state_dir), postgres=conninfo))
    os.replace(source, state_dir / MOVED)
    return saved


def init_keys(state_dir: Path) -> tuple[Path, bool]:
    """Write the controller's keys once; the .pub path and whether they were made now.

    New keys with an inventory already there (its old key lost): the audit head is re-signed
    with the new key, on record (an ``init`` event naming its fingerprint).
    """
    trusted_path(state_dir, create=0o700)  # made here, so no link planted meanwhile is followed
    own_folder(state_dir)
    pub, made = write_keys_once(state_dir)
    if made is not None and has_inventory(state_dir):
        with open_inventory(state_dir) as inv:
            inv.signer = made.sign
            inv.record("init", [], {"fingerprint": made.public().fingerprint()}, "ok")
    return pub, made is not None


class Controller:
    """Decides: inventory, minting, sealing, planning, rotation. Never touches a machine itself."""

    def __init__(self, state_dir: Path, inventory: Inventory) -> None:
        self.state_dir = state_dir
        self.inventory = inventory
        self._keys: crypto.PrivateKeys | None = None
        self.sequence = wire.Sequence(state_dir / SEQUENCE_FILE)  # numbers every agent request
        self.fence = Fence(config.load(state_dir).name)
        """This controller's name and epoch on every request (epoch 0 until a lease sets it)."""
        self.turn: Turn | None = None  # the lease turn it delivers under (PostgreSQL)
        self.faults: dict[str, Callable[[], None]] = {}  # fault-injection seam for tests
        self._leases: tuple[str, Leases] | None = None  # (conninfo, its kept connection)
        self._leases_lock = threading.Lock()

    @classmethod
    def open(cls, state_dir: Path | str, *, read_only: bool = False) -> Controller:
        """Open the controller on a state folder (the inventory is created when writable)."""
        state_dir = Path(state_dir)
        own_folder(state_dir)
        ctl = cls(state_dir, open_inventory(state_dir, read_only=read_only))
        proof = load_proof(state_dir)  # None unless restored (controller/restore.py)
        if not read_only and (state_dir / f"{KEY_STEM}.key").exists():
            keys = ctl.keys()
            ctl.inventory.signer = keys.sign  # every audit head is signed by the controller
            if proof is not None and not proof.verifies(keys.public().verify):
                proof = None  # a restore under a key since replaced: no node could take it
        ctl.inventory.restore_proof = proof
        ctl.inventory.controller = ctl.fence.controller  # each event names who appended it
        return ctl

    @staticmethod
    def inventory_stamp(state_dir: Path | str) -> InventoryStamp | None:
        """A token that changes whenever the inventory is written (None: there is none yet).

        Cheap (two stats, no connection; on PostgreSQL one small query on a kept connection,
        InventoryError when the server cannot answer): a reader compares it with the one it
        loaded under."""
        postgres = config.inventory_postgres(Path(state_dir))
        if postgres is not None:
            return shared_stamp(Path(state_dir) / INVENTORY, postgres)
        return inventory_stamp(Path(state_dir) / INVENTORY)

    @staticmethod
    def change_feed(state_dir: Path | str) -> ChangeFeed | None:
        """What wakes a reader of ``state_dir``'s inventory at every commit to it, any
        controller's (a shared inventory on PostgreSQL); None for a SQLite inventory, whose
        readers compare :meth:`inventory_stamp` now and then."""
        return change_feed(config.inventory_postgres(Path(state_dir)))

    @property
    def read_only(self) -> bool:
        """True when every action and every contact with an agent is refused."""
        return self.inventory.read_only

    def close(self) -> None:
        """Close the inventory, and the lease connection when one was kept."""
        with self._leases_lock:
            kept, self._leases = self._leases, None
        if kept is not None:
            kept[1].close()
        self.inventory.close()

    def leases(self, conninfo_file: Path) -> Leases:
        """The connection to the lease table of the PostgreSQL ``conninfo_file`` names, kept
        from one delivering action to the next (a new one per action cost several times the
        rotation's own writes); read and checked at each call, and opened anew when the file
        names another server or the server ended it."""
        from meshtui.inventory import pg_connection
        from meshtui.inventory.lease import Leases

        text = pg_connection.read_conninfo(conninfo_file)
        with self._leases_lock:
            kept = self._leases
            if kept is not None and kept[0] == text:
                return kept[1]
            made = Leases.from_text(conninfo_file, text)
            self._leases = (text, made)
        if kept is not None:
            kept[1].close()
        return made

    def __enter__(self) -> Controller:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def contact(
        self, action: str, nodes: Iterable[str] | Callable[[], Iterable[str]]
    ) -> crypto.PrivateKeys:
        """The one gate to the agents: the key that signs every request to one (loaded once).

        Every path that reaches an agent needs this key (the client signs with it), so a
        read-only controller refuses here, before the key file is opened: ReadOnlyContactError
        names ``action`` and ``nodes`` (a callable is only asked when refusing).
        """
        if self.read_only:
            named = nodes() if callable(nodes) else nodes
            raise ReadOnlyContactError(action, sorted(set(named)))
        if self._keys is None:
            self._keys = crypto.load_private(self.state_dir / f"{KEY_STEM}.key")
        return self._keys

    def keys(self) -> crypto.PrivateKeys:
        """The controller's signing keys, through the gate (refused when read-only)."""
        return self.contact("this call", [])

    def agents(
        self, *, timeout: float | None = None, nodes: Mapping[str, NodeRow] | None = None
    ) -> Agents:
        """Signed clients for the nodes (all by default), built in this one place: the key comes
        through the gate, every request carries the next sequence number and the audit head."""
        from meshtui.controller.agents.client import DEFAULT_TIMEOUT_S, Agents

        return Agents(
            self.inventory.nodes() if nodes is None else nodes,
            self.keys(),
            timeout=DEFAULT_TIMEOUT_S if timeout is None else timeout,
            sequence=self.sequence,
            head=self.inventory.signed_head,
            fence=lambda: self.fence,
            check=self._still_holds,
            fenced=self._fenced,
        )

    def _still_holds(self) -> None:
        """Before each request: LeaseLostError once the turn it delivers under has ended."""
        if self.turn is not None:
            self.turn.check()

    def _fenced(self, node: str, highest: int, at: float | None) -> str | None:
        """A node holds an epoch at or past this holding's: raise the holding's epoch past it
        when the lease is still this process's (the next requests carry it), or lose the turn;
        or say why not (:meth:`meshtui.controller.turn.Turn.why_not_past`)."""
        if self.turn is None:
            return None
        why = self.turn.why_not_past(node, highest, at)
        if why is None and self.turn.raise_past(node, highest):
            self.fence = Fence(self.fence.controller, self.turn.epoch)
        return why

    def _ends(self, ids: Iterable[str], *, consumers_only: bool = False) -> list[str]:
        """The nodes holding an end of the live pairs among ``ids`` (for refusals)."""
        out = set()
        for p in self.inventory.pairs(list(ids)):
            if p["withdrawn_at"]:
                continue
            out.add(node_of(p["consumer"]))
            if not consumers_only:
                out.add(node_of(p["provider"]))
        return sorted(out)

    def _writable(self, action: str) -> None:
        if self.read_only:
            raise ReadOnlyError(action)

    # ---- reads --------------------------------------------------------------------------
    def status(
        self, ids: Iterable[str] | None = None, *, limit: int | None = None, keep: bool = False
    ) -> list[PairStatus]:
        """Every pair (or the named ones) with its state and reason, by id; ``limit``: only the
        first that many (the dashboard's first screenful); ``keep``: a reader that will read
        every pair again keeps what it made, to make next only what changed (status.statuses);
        otherwise every pair is read through the state folder's status image (a one-shot
        reader, such as ``meshtui status``, makes only what changed since it was written)."""
        if ids is not None:
            ids = self.resolve_pairs(ids)
        return status_mod.statuses(
            self.inventory, ids, limit=limit, keep=keep, image=self.state_dir
        )

    def draining(self, ids: Iterable[str] | None = None) -> dict[str, Draining]:
        """Each pair (of ``ids``, or every one) whose sessions on an old credential are left to
        drain: how many remain at the last count, and when they end at the latest."""
        return status_mod.draining(self.inventory, ids)

    def rotations(self, rows: Sequence[PairStatus]) -> dict[str, Rotating]:
        """Each pair of ``rows`` that overlaps: its grace, and for one that alternates between
        two logins the login its consumer's file names now (``status`` says it)."""
        return status_mod.rotations(self.inventory, rows)

    def summary(
        self, rows: list[PairStatus] | None = None, secrets: Sequence[SecretStatus] = ()
    ) -> Summary:
        """Counts by state (the pairs', and ``secrets``' apart), alarms, and when the last push
        ran."""
        rows = self.status() if rows is None else rows
        count = {s: sum(1 for r in rows if r.state is s) for s in State}
        by_state = [(str(s), sum(1 for x in secrets if x.state == s)) for s in State]
        last_push = self.inventory.last_event("push")
        return Summary(
            pairs=len(rows),
            working=count[State.WORKING],
            stale=count[State.STALE],
            revoked=count[State.REVOKED],
            unknown=count[State.UNKNOWN],
            alarms=sum(1 for r in rows if r.alarm),
            withdrawn=sum(1 for r in rows if r.withdrawn),
            last_push=last_push["at"] if last_push else None,
            secrets=tuple((s, n) for s, n in by_state if n),
        )

    def schedule(self, *, declared_only: bool = False) -> list[PairDue]:
        """Every pair's policy and when it is due for rotation (``declared_only``: only the
        pairs whose policy was declared, not the default one)."""
        return schedule_mod.schedule(self.inventory, declared_only=declared_only)

    @staticmethod
    def leadership(state_dir: Path | str) -> Leadership:
        """Who leads the controllers of ``state_dir``'s inventory (the leader lease's ``watch``
        turn), read in the database's clock; on SQLite, whether the config meant several
        machines (:func:`meshtui.controller.read.leadership.leadership`). Needs no open
        inventory: the dashboard asks it from a thread of its own."""
        postgres = config.inventory_postgres(Path(state_dir))
        if postgres is None:  # start-up: psycopg stays out of a SQLite reader
            return Leadership(shared=False, alone=config.load(Path(state_dir)).alone)
        from meshtui.controller.read.leadership import leadership

        return leadership(postgres)

    def watch_heartbeat(self) -> Heartbeat | None:
        """What the last ``meshtui watch`` on this state folder wrote, if any."""
        return Heartbeat.read(self.state_dir)

    def resolve_pairs(self, ids: Iterable[str]) -> list[str]:
        """Check that every named pair exists; UnknownPairError names the first that does not."""
        ids = list(ids)
        known = {r["id"] for r in self.inventory.pairs(ids)}
        out = []
        for pid in ids:
            if pid not in known:
                raise UnknownPairError(f"no pair {pid!r} in the inventory (see meshtui status)")
            out.append(pid)
        return out

    def pairs_of_provider(self, provider: str) -> list[str]:
        """The live pairs whose provider is ``node/module``."""
        ids = self.inventory.live_pair_ids(provider)
        if not ids:
            raise UnknownPairError(f"no live pairs have provider {provider!r}")
        return ids

    def live_pairs(self) -> list[str]:
        """Every pair that is not withdrawn."""
        return self.inventory.live_pair_ids()

    def pair_detail(self, pid: str) -> PairDetail:
        """Generations, deliveries, probes, drills and holders of one pair."""
        (resolved,) = self.resolve_pairs([pid])
        return detail_mod.pair_detail(self.inventory, resolved)

    def hosts(self, *, check: bool = False) -> list[HostView]:
        """Every node: fingerprint, what it holds, who is behind; ``check`` asks each agent."""
        answers: dict[str, tuple[bool, str]] = {}
        if check:
            from meshtui.controller.plan.resolve import resolve_nodes

            nodes = list(self.inventory.nodes())
            self.contact("checking the agents", nodes)
            for res in resolve_nodes(self, nodes):
                answers[res.node] = (res.ok, res.reason)
        rows = self.status()
        by_node: dict[str, list[PairStatus]] = {}
        for r in rows:
            if not r.withdrawn:
                by_node.setdefault(r.consumer_node, []).append(r)
                by_node.setdefault(r.provider_node, []).append(r)
        out = []
        for name, n in self.inventory.nodes().items():
            keys = crypto.PublicKeys(
                verify=crypto.unb64(n["verify_key"]), seal=crypto.unb64(n["seal_key"])
            )
            mine = by_node.get(name, [])
            behind = sorted(
                {
                    r.pair
                    for r in mine
                    if (r.consumer_node == name and r.consumer_generation != r.generation)
                    or (r.provider_node == name and r.provider_generation != r.generation)
                }
            )
            ok, why = answers.get(name, (None, "not asked"))
            out.append(
                HostView(
                    name=name,
                    address=n["address"],
                    agent=n["agent"],
                    fingerprint=keys.fingerprint(),
                    declared=bool(n["declared"]),
                    reachable=ok,
                    reason=why,
                    holds=len(mine),
                    behind=behind,
                )
            )
        return out

    def events(self, limit: int | None = None) -> list[AuditEvent]:
        """Audit events (the newest ``limit``, or all), oldest first."""
        return [_audit_event(row) for row in self.inventory.events(limit)]

    def verify_chain(self) -> ChainReport:
        """Check the audit chain, and the controller's signature on its head when keys exist."""
        keys = self.keyring()
        check = self.inventory.verify_chain(keys.key_of if keys.keys else None)
        return ChainReport(
            ok=check.ok, events=check.events, bad_seq=check.bad_seq, problem=check.problem
        )

    def verify_anchors(self) -> AnchorCheck:
        """Ask every declared node for the audit head it keeps; fails when the chain lacks it.

        Allowed read-only: the read is unsigned (needs no key, changes nothing on the node) and
        its answer is checked with the node's public key and controller.pub only.
        """
        from meshtui.controller.records.anchors import check_anchors

        keys = self.keyring()
        nodes = {n: row for n, row in self.inventory.nodes().items() if row["declared"]}
        return check_anchors(self.inventory, nodes, keys.key_of if keys.keys else None)

    def keyring(self) -> Keyring:
        """The verify keys of this controller and of the others it knows (an audit head is
        checked with the key of the controller that appended it)."""
        return keyring(self.state_dir, self.fence.controller)

    def doctor(self, progress: Progress = no_progress) -> DoctorReport:
        """The preflight: every node's key, folders, users, reloads, admin files, ports, clocks."""
        from meshtui.controller.read.doctor import doctor

        self.contact("doctor", lambda: list(self.inventory.nodes()))
        return doctor(self, progress)

    # ---- actions ------------------------------------------------------------------------
    def declare(self, path: Path | str) -> DeclareResult:
        """Load a declaration into the inventory."""
        self._writable("declare")
        from meshtui.controller.plan import declaration  # start-up: only declare reads TOML
        from meshtui.controller.plan.declare import declare

        decl = declaration.load(path)
        from meshtui.controller.lock import delivering

        with delivering(self, "declare"):  # never while a rotation delivers
            interrupted = self.inventory.open_rotations()
            if interrupted:
                raise RotationBusyError(
                    f"rotation {interrupted[0]['id']} was interrupted; run meshtui push to "
                    "finish or roll it back, then declare again"
                )
            return declare(self.inventory, decl)

    def push(self, progress: Progress = no_progress) -> PushReport:
        """Bring every end to the generation the inventory says it must hold."""
        self.contact("push", lambda: list(self.inventory.nodes()))
        self._writable("push")
        from meshtui.controller.act import own_secrets
        from meshtui.controller.act.digest_keys import OWN_SECRETS
        from meshtui.controller.act.push import push
        from meshtui.controller.act.secret_versions import read_versions
        from meshtui.controller.lock import delivering

        report = push(self, progress)
        with delivering(self, "push (own secrets)"):
            try:
                versions = read_versions(self)
                secrets = own_secrets.converge(self)
            except DigestKeyError as exc:  # the pairs were pushed: said beside them, not lost
                report.behind[OWN_SECRETS] = str(exc)
                return report
        report.ahead.update({f"{SECRET_LABEL}{k}": v for k, v in versions.ahead.items()})
        report.behind.update({f"{SECRET_LABEL}{k}": v for k, v in versions.outside.items()})
        for i, line in enumerate(secrets.done, 1):
            progress(line, i, len(secrets.done))
        report.behind.update({f"{SECRET_LABEL}{k}": v for k, v in secrets.behind.items()})
        report.repaired.update({f"{SECRET_LABEL}{k}": v for k, v in secrets.repaired.items()})
        return report

    def secrets(self) -> list[SecretStatus]:
        """Every module's own secrets: the versions the vault and each file hold (no value)."""
        from meshtui.controller.read import secret_states

        return secret_states.status(self.inventory)

    def secret_put(self, module: str, name: str, value: bytes, supplied_by: str) -> int:
        """Seal an operator's value for a supplied secret to its vault's node (the plaintext
        is dropped here), then deliver it; returns its version."""
        self._writable("secret put")
        self.contact("secret put", lambda: list(self.inventory.nodes()))
        from meshtui.controller.act import own_secrets
        from meshtui.controller.lock import delivering

        with delivering(self, "secret put"):
            version = own_secrets.put(self, module, name, value, supplied_by)
            del value
            own_secrets.converge(self)
        return version

    def share_digest_key(self, names: list[str] | None = None, *, anew: bool = False) -> list[str]:
        """Seal the mesh's digest key to the controllers ``names`` (default: every controller
        this one knows that has no copy); the names it was sealed to. Refused, naming what to
        run, when this controller holds no copy itself. ``anew``: a new key replaces the old
        one first (:func:`~meshtui.controller.act.digest_keys.make_anew`)."""
        self._writable("secret share-key")
        from meshtui.controller.act import digest_keys
        from meshtui.controller.lock import delivering

        with delivering(self, "secret share-key"):  # one writer of the key at a time
            key = digest_keys.make_anew(self) if anew else digest_keys.open_key(self, make=True)
            return digest_keys.share(self, key, names)

    def secret_rotate(self, module: str, name: str) -> int:
        """Mint the next version of a minted secret and deliver it (vault, then file)."""
        self._writable("secret rotate")
        self.contact("secret rotate", lambda: list(self.inventory.nodes()))
        from meshtui.controller.act import own_secrets
        from meshtui.controller.lock import delivering

        with delivering(self, "secret rotate"):
            version = own_secrets.rotate(self, module, name)
            own_secrets.converge(self)
        return version

    def rotate_secrets(
        self, ids: Iterable[str], progress: Progress = no_progress
    ) -> SecretsRotated:
        """Rotate every minted own secret of the modules of the vault pairs ``ids`` (and each
        secret ``ids`` names by its label, ``secret MODULE NAME``), one by one as
        :meth:`secret_rotate` does (the dashboard's action on a vault pair, or a secret's row)."""
        ids = list(ids)
        labels = {i for i in ids if i.startswith("secret ")}
        pairs = [i for i in ids if i not in labels]
        ids = self.resolve_pairs(pairs) if pairs else []
        self._writable("rotate secrets")
        self.contact("rotate secrets", lambda: list(self.inventory.nodes()))
        chosen = [
            s
            for s in self.secrets()
            if (s.pair in ids or s.label in labels) and s.origin == "minted"
        ]
        for i, s in enumerate(chosen):
            progress(f"{s.module} secret {s.name}: rotating", i, len(chosen))
            self.secret_rotate(s.module, s.name)
        after = {(s.module, s.name): s for s in self.secrets()}
        done = [after[(s.module, s.name)] for s in chosen]
        for i, s in enumerate(done, 1):
            progress(f"{s.module} secret {s.name}: version {s.version}, {s.state}", i, len(done))
        return SecretsRotated(done)

    def secret_drill(self, module: str, name: str) -> SecretDrillReport:
        """Rotate a minted secret and prove from the module's node that the new version is in
        its file and is the vault's current version, and the old one in neither."""
        self._writable("secret drill")
        self.contact("secret drill", lambda: list(self.inventory.nodes()))
        from meshtui.controller.act import own_secrets
        from meshtui.controller.lock import delivering

        with delivering(self, "secret drill"):
            return own_secrets.drill(self, module, name)

    def plan_rotation(self, ids: Iterable[str]) -> RotationPlan:
        """Resolve every node a rotation of ``ids`` would touch (asks each agent)."""
        from meshtui.controller.act.rotate import plan

        ids = self.resolve_pairs(ids)
        self.contact("planning a rotation", lambda: self._ends(ids))
        return plan(self, ids)

    def rotate(
        self,
        ids: Iterable[str],
        progress: Progress = no_progress,
        *,
        revoke_old: bool = False,
        probe_after: bool = False,
        sessions: Sessions | None = None,
    ) -> RotationReport:
        """All-or-nothing rotation of ``ids``; ``revoke_old``: break-glass, the old credential
        revoked at every provider even when a consumer cannot take the new one (locked out).
        ``sessions``: what becomes of the sessions opened with the old credential (None: each
        pair's declared choice, else ended; docs/sessions.md).
        ``probe_after`` (an operator's rotation): then a probe of the pairs it moved, stored and
        in the report, so they read working or stale at once, not unknown; a probe that cannot
        run is said in the reason, never undoes it."""
        from meshtui.controller.act.overlap import rotate_declared

        ids = self.resolve_pairs(ids)
        self.contact("rotate", lambda: self._ends(ids))
        self._writable("rotate")
        report = rotate_declared(self, ids, progress, revoke_old=revoke_old, sessions=sessions)
        if not probe_after or report.outcome == RotationState.ROLLED_BACK or not report.pairs:
            return report
        try:
            probes = self.probe([p.pair for p in report.pairs], progress)
        except MeshtuiError as exc:
            why = f"the probe after it could not run: {exc}"
            return replace(report, reason=f"{report.reason}; {why}" if report.reason else why)
        return replace(report, probes=probes)

    def probe(
        self, ids: Iterable[str] | None = None, progress: Progress = no_progress
    ) -> list[ProbeOutcome]:
        """Live logins from each consumer's node; results stored (so not in read-only)."""
        from meshtui.controller.act.probe import probe

        chosen = self.resolve_pairs(ids) if ids is not None else self.live_pairs()
        self.contact("probe", lambda: self._ends(chosen, consumers_only=True))
        self._writable("probe")
        return probe(self, chosen, progress)

    def drill(
        self,
        ids: Iterable[str],
        progress: Progress = no_progress,
        sessions: Sessions | None = None,
    ) -> list[DrillReport]:
        """Rotation checked by three logins, per pair; ``sessions`` as :meth:`rotate`'s, and
        the old credential's sessions counted before and after."""
        from meshtui.controller.act.drill import drill

        ids = self.resolve_pairs(ids)
        self.contact("drill", lambda: self._ends(ids))
        self._writable("drill")
        return drill(self, ids, progress, sessions)

    @staticmethod
    def write_export(path: Path, body: str) -> None:
        """Write an export (:meth:`export_events`) to a new 0600 file, never over one that is
        there (:func:`meshtui.controller.records.export.write_export`); OSError naming the path."""
        from meshtui.controller.records.export import write_export

        write_export(path, body)

    @staticmethod
    def parse_listen(text: str, *, allow_remote: bool = False) -> tuple[str, int]:
        """``HOST:PORT`` for the watch's metrics endpoint; InputError for a bad value or an
        unasked-for remote bind (:func:`meshtui.controller.unattended.metrics.parse_listen`)."""
        from meshtui.controller.unattended.metrics import parse_listen

        return parse_listen(text, allow_remote=allow_remote)

    def watch(
        self,
        *,
        stop: threading.Event,
        notify: Sequence[str] | None = None,
        notify_timeout: float,
        listen: tuple[str, int] | None = None,
        tick: float,
        revoke_old_overdue: bool = False,
        drift_every: float = 300.0,
    ) -> int:
        """The unattended loop (:class:`meshtui.controller.unattended.watch.Watch`) until ``stop`` is set:
        with ``notify`` (an argv) run on each alert, and metrics served at ``listen``. Refused
        read-only; InputError when the metrics endpoint cannot listen. Its exit status.
        ``revoke_old_overdue``: an overdue pair is rotated break-glass (docs/rotation.md).
        ``drift_every``: seconds between pushes made only to look at what the servers hold."""
        from meshtui.controller.turn import watch_turn
        from meshtui.controller.unattended.metrics import Metrics
        from meshtui.controller.unattended.notify import Notifier
        from meshtui.controller.unattended.watch import Watch, log_line

        if self.read_only:
            raise ReadOnlyError("watch")
        notifier = Notifier(list(notify), log_line, timeout=notify_timeout) if notify else None
        metrics = Metrics() if listen else None
        try:
            loop = Watch(
                self,
                notify=notifier,
                metrics=metrics,
                tick=tick,
                revoke_old_overdue=revoke_old_overdue,
                drift_every=drift_every,
                lead=watch_turn(self.state_dir),
            )
            loop.stop = stop
            loop.sleep = stop.wait
            if metrics is not None and listen is not None:
                loop.measure_first()  # the first scrape is whole, never an empty page
                try:
                    host, port = metrics.serve(*listen)
                except OSError as exc:
                    where = f"{listen[0]}:{listen[1]}"
                    raise InputError(f"--metrics {where}: cannot listen: {exc.strerror}") from exc
                log_line(f"metrics at http://{host}:{port}/metrics")
            return loop.run()
        finally:
            if notifier is not None:
                notifier.close()
            if metrics is not None:
                metrics.close()

    def export_events(self, fmt: str) -> str:
        """The audit log as JSON or CSV text."""
        import csv
        import io

        rows = self.inventory.events()  # already JSON-shaped: no report built per event
        if fmt == "json":
            return json.dumps(rows, indent=2)
        buf = io.StringIO()
        writer = csv.DictWriter(
            buf,
            fieldnames=[
                "seq",
                "at",
                "operator",
                "ssh_client",
                "kind",
                "pairs",
                "detail",
                "outcome",
                "prev",
                "hash",
                "controller",
            ],
            lineterminator="\n",  # a lone \r would reach the terminal as the text \x0d
        )
        writer.writeheader()
        for r in rows:
            writer.writerow({**r, "pairs": " ".join(r["pairs"]), "detail": json.dumps(r["detail"])})
        return buf.getvalue()


def _audit_event(row: EventRow) -> AuditEvent:
    """One decoded audit row as the report the CLI and the dashboard read."""
    return AuditEvent(
        row["seq"],
        row["at"],
        row["operator"],
        row["ssh_client"],
        row["kind"],
        row["pairs"],
        row["detail"],
        row["outcome"],
        row["prev"],
        row["hash"],
    )
