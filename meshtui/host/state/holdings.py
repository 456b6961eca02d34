"""What this node holds, by pair and end: generation and digest, never the secret.

Persisted beside the node's keys (0600 JSON) so the agent can answer ``state`` after a restart
and the controller can find out who is behind even when a reply was lost.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import cast

import msgspec

from meshtui import crypto
from meshtui.credential_unit import held_password
from meshtui.atomic import write_private
from meshtui.folders import Ancestors
from meshtui.host import credential_files as files
from meshtui.host.state.record import read_record
from meshtui.protocol.messages import EndRecord, Holding
from meshtui.model import End

FILE = "holdings.json"
ADVICE = (
    "move it aside and start the agent again: the node then reports holding nothing, and the "
    "next meshtui push delivers every pair to it again (its files are rewritten, not lost)"
)


Held = EndRecord
"""What this node records per pair end (the one shape lives with the messages)."""


class _Record(msgspec.Struct, forbid_unknown_fields=True):
    """holdings.json: per end, per pair, what is held."""

    consumer: dict[str, Held] = {}
    provider: dict[str, Held] = {}


def _fault(raw: bytes, exc: msgspec.ValidationError) -> str:
    """What is wrong, naming the end and the pair when one pair's entry is at fault."""
    try:
        loose = msgspec.json.decode(raw, type=dict[str, dict[str, object]])
    except msgspec.DecodeError:
        return str(exc)
    for end, pairs in loose.items():
        for pair, held in pairs.items():
            try:
                msgspec.convert(held, type=Held)
            except msgspec.ValidationError as inner:
                return f"{end} {pair}: {inner}"
    return str(exc)


_ENCODER = msgspec.json.Encoder(order="sorted")
"""holdings.json's text: keys sorted, as ``json.dumps(sort_keys=True)`` wrote it, compact."""


class Holdings:
    """A small persistent map ``(end, pair) -> {generation, digest, ...}``."""

    def __init__(self, state_dir: Path) -> None:
        self._path = state_dir / FILE
        self._lock = threading.Lock()
        self._unwritten = False
        found = self._load()
        self._data: dict[End, dict[str, Held]] = {
            End.CONSUMER: found.consumer,
            End.PROVIDER: found.provider,
        }

    def _load(self) -> _Record:
        """The record on disk (empty when there is none); HostFileError naming the file, and
        the field when its shape is wrong, rather than a node that forgets what it holds."""
        found = read_record(
            self._path, _Record, what="a holdings record", advice=ADVICE, fault=_fault
        )
        return found if found is not None else _Record()

    def get(self, end: End, pair: str) -> Held | None:
        """What this node holds for one end of a pair."""
        with self._lock:
            held = self._data[end].get(pair)
            return Held(**held) if held else None

    def update(self, end: End, changes: dict[str, Held | None], *, later: bool = False) -> None:
        """Set (or with None, forget) several pairs of one end, then persist once; ``later``:
        at the next :meth:`persist` instead (the agent's, once its answer is sent)."""
        with self._lock:
            for pair, held in changes.items():
                if held is None:
                    self._data[end].pop(pair, None)
                else:
                    self._data[end][pair] = held
            self._unwritten = True
            if not later:
                self._write()

    @property
    def unwritten(self) -> bool:
        """Whether an update is not in the file yet (see :meth:`persist`)."""
        return self._unwritten

    def persist(self) -> None:
        """Write the record when an update left it unwritten (once for however many)."""
        with self._lock:
            if self._unwritten:
                self._write()

    def _write(self) -> None:
        # a cache of what the files hold: losing the last update to a crash only makes the
        # controller re-deliver, so it is not worth an fsync inside a rotation's window; one C
        # encode of the whole record (json.dumps took 5 ms for 1,000 pairs)
        write_private(self._path, _ENCODER.encode(self._data), durable=False)
        self._unwritten = False

    def examined(self, pair: str, ancestors: Ancestors | None = None) -> files.HeldFile | None:
        """A consumer end's credential file as it is now (:func:`examine`); None when not held."""
        held = self.get(End.CONSUMER, pair)
        if held is None:
            return None
        return examine(cast(Holding, {"end": End.CONSUMER, "pair": pair, **held}), ancestors)

    def listing(self) -> list[Holding]:
        """Every holding as ``{end, pair, generation, digest, ...}`` (each a fresh dict)."""
        with self._lock:
            return [
                cast(Holding, {"end": end, "pair": pair, **held})
                for end, pairs in self._data.items()
                for pair, held in sorted(pairs.items())
            ]


def examine_all(held: list[Holding], ancestors: Ancestors | None = None) -> None:
    """:func:`examine` every holding of a ``state`` answer (a manifest's stat taken once for
    all the provider holdings it serves)."""
    manifests: dict[str, list[str]] = {}
    for h in held:
        examine(h, ancestors, manifests)


def examine(
    h: Holding, ancestors: Ancestors | None = None, manifests: dict[str, list[str]] | None = None
) -> files.HeldFile | None:
    """Look at a holding's files as they are now, never through a link, and say so in ``h``:
    ``present`` (its file holds the digest), ``error`` (why it cannot be read), ``unlike`` (how
    its or its connection file's mode, owner or group differ from what was written), and the
    connection file's digest dropped when its text changed. The credential file as read, with
    all of ``unlike`` (its password alone, when it is a unit holding the login too). A provider's secret file (0600, the agent's) is looked at the same way
    (None: a provider holding recorded before its file was), and its manifest's mode and
    owner (``manifests``: what was found of each manifest already, by path)."""
    if h["end"] != End.CONSUMER:
        if "file" not in h:
            return None
        found = files.read_held(Path(h["file"]), files.PRIVATE_FILE, ancestors)
        h["present"] = found.data is not None and crypto.secret_digest(found.data) == h["digest"]
        if found.error:
            h["error"] = found.error
        unlike = [f"{h['file']} {u}" for u in found.unlike] if found.data is not None else []
        if "manifest" in h:  # the manifest beside: the agent's 0600 file too
            seen = manifests if manifests is not None else {}
            if (manifest := h["manifest"]) not in seen:
                found_there = files.access_unlike(Path(manifest), files.PRIVATE_FILE, ancestors)
                seen[manifest] = [f"{manifest} {u}" for u in found_there]
            unlike += seen[manifest]
        if unlike:
            h["unlike"] = unlike
        return files.HeldFile(None, found.error, tuple(h.get("unlike", ())))
    want = files.held_access(h.get("owner"), h.get("group"), h.get("mode"))
    access = want if isinstance(want, files.FileAccess) else None
    path = h.get("file", "")
    found = files.read_held(Path(path), access, ancestors)
    password = held_password(h.get("unit"), found.data) if found.data is not None else None
    h["present"] = password is not None and crypto.secret_digest(password) == h["digest"]
    if found.error:
        h["error"] = found.error
    unlike = [f"{path} {u}" for u in found.unlike] if found.data is not None else []
    if isinstance(want, str) and found.data is not None:
        unlike.append(f"{path}: {want}")
    if "connection" in h:  # its connection file: gone or changed, push rewrites it
        conn = files.read_held(Path(h["connection"]), access, ancestors)
        if conn.data is None or crypto.secret_digest(conn.data) != h.get("connection_digest"):
            h.pop("connection_digest", None)
        else:
            unlike += [f"{h['connection']} {u}" for u in conn.unlike]
    if unlike:
        h["unlike"] = unlike
    return files.HeldFile(password, found.error, tuple(unlike))
