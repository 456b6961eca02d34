"""Writing a provider's manifest and the secret files beside it, by folder descriptor.

The manifest is whole on every write (every live consumer of the provision, a serial one more
than the last) and written after every secret it names; secret files no longer named go. A
delta is merged into the manifest on disk first, when that is the set the delta applies to;
when the file is, byte for byte, what this agent wrote last, its lines, their text, their
places and their digest are taken from memory (:class:`Serials`) instead of being decoded and
encoded again, and the delta's lines replace theirs by place. Once the agent has answered, it
reads the file back and remembers its identity (its stat); while that stays the same, the next
delta does not read the file at all. What is left that grows with the provision is the whole
file's write and fsync (its text joined from the lines' kept text): the manifest stays one
file that every reader reads as before.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import msgspec

from meshtui import crypto, folders
from meshtui.atomic import PRIVATE
from meshtui.errors import HostFileError
from meshtui.host import credential_files as files
from meshtui.kinds import registry
from meshtui.protocol.manifest import VERSION, ManifestBody, ManifestLine, secret_name
from meshtui.protocol.messages import (
    ConsumerLine,
    ManifestEntry,
    ProviderSet,
    consumer_set_digest,
    rebased_digest,
)

_MANIFEST = msgspec.json.Decoder(ManifestBody)
"""The manifest this agent wrote, read back with its shape checked (a delta's base)."""

Unseal = Callable[[str, str, str], bytes]
"""``unseal(sealed_b64, digest, pair)``: the secret, or CryptoError naming the pair."""


def manifest_text(body: ManifestBody) -> bytes:
    """The manifest as JSON, one consumer a line (readable, and encoded by the C encoder,
    which ``indent`` would turn off: 10x slower for 1,000 consumers)."""
    return _joined(body, [line_text(c) for c in body["consumers"]])


def line_text(line: ManifestLine) -> str:
    """One consumer's line of :func:`manifest_text`."""
    return json.dumps(line, separators=(", ", ": "))


def _joined(body: ManifestBody, lines: list[str]) -> bytes:
    """:func:`manifest_text` from the consumers' lines, already encoded."""
    head = {k: v for k, v in body.items() if k != "consumers"}
    start = json.dumps(head)[:-1] + ', "consumers": ['
    if not lines:
        return (start + "]}\n").encode()
    # joined and encoded once each (a 10,000-line manifest is 2.5 MB; each copy counts)
    return "".join([start, "\n ", ",\n ".join(lines), "\n]}\n"]).encode()


@dataclass
class _Last:
    """The manifest this agent wrote last at one path: its bytes, its consumer lines with
    their encoded text and each login's place among them, and the digest of its consumer set
    (None until computed: once the answer is sent, or by the next delta if that comes first)."""

    data: bytes
    provider: str
    provision: str
    lines: list[ManifestLine]
    texts: list[str]
    places: dict[str, int]
    digest: str | None = None
    seen: Identity | None = None
    """The file's identity once it was read back as exactly ``data`` after its change time
    had passed (:meth:`Serials.settle`): while the file's stat is this, it is still ``data``."""


Identity = tuple[int, int, int, int, int]
"""A file's identity: device, inode, size, modification and change times (ns)."""

SETTLE_TRIES = 3
SETTLE_WAIT_S = 0.01
"""A manifest written within the filesystem's current clock tick is read back this much later,
on a timer thread (at most :data:`SETTLE_TRIES` times): the agent's next request waits for
none of it, and a delta that comes first reads the file as before."""


def identity(info: os.stat_result) -> Identity:
    """The identity of a file (its stat): any write to it, a ``touch`` that puts its times
    back included, changes its change time, which nobody can set; a file put in its place is
    another inode."""
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def _stamp_now(folder: folders.Folder) -> int | None:
    """The change time the folder's filesystem stamps on a change made now (a file made with
    no name, ``O_TMPFILE``, and let go: its own clock and granularity, which the wall clock
    is not); None where it cannot say."""
    try:
        fd = os.open(".", os.O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC, 0o600, dir_fd=folder.fd)
    except OSError:
        return None
    try:
        return os.fstat(fd).st_ctime_ns
    finally:
        os.close(fd)


class Serials:
    """Each manifest this agent wrote, kept in memory: its serial (read from the file after a
    start), and the last one's lines and consumer-set digest, so a delta on the manifest as
    this agent left it is merged without decoding, re-encoding or re-digesting every line."""

    def __init__(self) -> None:
        self._last: dict[str, int] = {}
        self._written: dict[str, _Last] = {}
        self._lock = threading.Lock()
        self._timers: list[threading.Timer] = []

    def next(self, folder: folders.Folder, manifest: Path) -> int:
        """One more than the serial this agent wrote last."""
        last = self._last.get(str(manifest))
        return last + 1 if last is not None else _serial_on_disk(folder, manifest.name) + 1

    def knows(self, manifest: Path) -> bool:
        """Whether this agent wrote ``manifest`` since it started (so it is one of its own)."""
        return str(manifest) in self._last

    def wrote(self, manifest: Path, serial: int) -> None:
        self._last[str(manifest)] = serial

    def unchanged(self, folder: folders.Folder, manifest: Path) -> _Last | None:
        """What this agent wrote last at ``manifest`` when the file there has the identity
        it had when it was read back as exactly that (not read again: its stat alone); else
        None (not yet read back, or touched since in any way: then it is read)."""
        last = self._written.get(str(manifest))
        if last is None or last.seen is None:
            return None
        try:
            info = os.stat(manifest.name, dir_fd=folder.fd, follow_symlinks=False)
        except OSError:
            return None
        return last if identity(info) == last.seen else None

    def kept(self, manifest: Path, data: bytes) -> _Last | None:
        """What this agent wrote last at ``manifest`` when ``data`` (read from it now) is
        exactly that, byte for byte; else None (edited, replaced, or never written here)."""
        last = self._written.get(str(manifest))
        return last if last is not None and last.data == data else None

    def keep(
        self,
        manifest: Path,
        body: ManifestBody,
        data: bytes,
        texts: list[str],
        digest: str | None = None,
        places: dict[str, int] | None = None,
    ) -> None:
        """Remember the manifest just written, with its digest when known (else
        :meth:`settle` computes it, later) and its logins' places when a delta's merge kept
        them (else they are counted here)."""
        lines = body["consumers"]
        if places is None:
            places = {line["as"]: i for i, line in enumerate(lines)}
        self._written[str(manifest)] = _Last(
            data, body["provider"], body["provision"], lines, texts, places, digest
        )

    def forget(self, manifest: Path) -> None:
        """Nothing is known of ``manifest`` (a write of it failed half-way)."""
        self._written.pop(str(manifest), None)

    def digest(self, last: _Last) -> str:
        """The consumer-set digest of a kept manifest, computed once."""
        with self._lock:
            if last.digest is None:
                last.digest = _set_digest(last.lines)
            return last.digest

    @property
    def unsettled(self) -> bool:
        """Whether a kept manifest's digest is still to be computed, or its file to be read
        back."""
        kept = list(self._written.values())
        return any(last.digest is None or last.seen is None for last in kept)

    def settle(self) -> None:
        """Compute the digests still owed and read back the files not yet read back (the agent
        calls it once its answer is sent, so the next delta finds both ready and the delivery
        that wrote the file waited for neither)."""
        for path, last in list(self._written.items()):
            self.digest(last)
            if last.seen is None:
                self._read_back(Path(path), last, SETTLE_TRIES)

    def _read_back(self, manifest: Path, last: _Last, tries: int) -> None:
        """:func:`_read_back`, again on a timer while the file is too fresh to be judged."""
        try:
            fresh = _read_back(manifest, last)
        except (HostFileError, OSError):
            return
        if fresh and tries > 1:
            timer = threading.Timer(SETTLE_WAIT_S, self._read_back, (manifest, last, tries - 1))
            timer.daemon = True
            with self._lock:
                self._timers = [t for t in self._timers if t.is_alive()] + [timer]
            timer.start()

    def wait(self) -> None:
        """Wait until every read-back left on a timer is done (tests, benchmarks)."""
        while True:
            with self._lock:
                alive = [t for t in self._timers if t.is_alive()]
            if not alive:
                return
            for timer in alive:
                timer.join()


def _read_back(manifest: Path, last: _Last) -> bool:
    """Remember the file's identity in ``last`` when it reads as exactly ``last.data`` and its
    change time is older than the moment it was read: any change after that moment stamps a
    later change time, so while the identity stays the same the bytes do too. A file changed
    meanwhile is not remembered (the next delta reads it, and refuses it if it must). True when
    the file was changed within the filesystem's current clock tick (not read: ask again later)."""
    folder = folders.open_folder(manifest.parent)
    if folder is None:
        return False
    with folder:
        now = _stamp_now(folder)
        try:
            info = os.stat(manifest.name, dir_fd=folder.fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        if now is None or info.st_size != len(last.data):
            return False
        if info.st_ctime_ns >= now:
            return True
        got = folder.read_with_stat(manifest.name, limit=folders.MAX_MANIFEST)
        if got is not None and got[0] == last.data and got[1].st_ctime_ns < now:
            last.seen = identity(got[1])
        return False


def _set_digest(lines: list[ManifestLine]) -> str:
    """The consumer-set digest of manifest lines (what a delta's base is compared with)."""
    return consumer_set_digest(_consumer_line(c) for c in lines)


def _consumer_line(c: ManifestLine) -> ConsumerLine:
    return ConsumerLine(c["as"], c["node"], c["module"], c["at"], c["values"], c["digest"])


def _serial_on_disk(folder: folders.Folder, name: str) -> int:
    """The serial the manifest on disk carries (0 when it is missing or unreadable)."""
    try:
        data = folder.read(name, limit=folders.MAX_MANIFEST)
        return int(json.loads(data or b"{}")["serial"])
    except (HostFileError, OSError, ValueError, KeyError, TypeError):
        return 0


@dataclass(frozen=True)
class Written:
    """What :func:`write_provider_files` did: the logins the provisioner must apply (None:
    every one, a whole manifest), or why a delta was refused (then nothing was written)."""

    logins: frozenset[str] | None = None
    refused: str | None = None
    scoped: bytes | None = None
    """A delta's: the manifest as written, cut to the delta's consumers (what the built-in
    provisioner would otherwise read back from the file and cut itself)."""


def _line(c: ManifestEntry, rel: str) -> ManifestLine:
    line: ManifestLine = {
        "as": c["as"],
        "node": c["node"],
        "module": c["module"],
        "at": c["at"],
        "values": c["values"],
        "secret": rel + secret_name(c["node"], c["module"]),
        "digest": c["digest"],
    }
    if c.get("keep"):
        line["keep"] = True
    if c.get("alt"):
        line["alt"] = c["alt"]
    return line


def _held_lines(
    folder: folders.Folder, manifest: Path, spec: ProviderSet, serials: Serials
) -> tuple[list[ManifestLine], _Last | None] | str:
    """The consumer lines of the manifest on disk when its set is the delta's base (with what
    this agent remembers of it when it wrote it so: the lines' text and places), else why not
    (missing, unreadable, another provision's, or not the set the controller expects)."""
    base = spec.get("base")
    assert base is not None
    last = serials.unchanged(folder, manifest)  # read back already, and untouched since
    if last is None:
        try:
            data = folder.read(manifest.name, limit=folders.MAX_MANIFEST)
        except (HostFileError, OSError) as exc:
            return f"the manifest on the node cannot be read ({exc})"
        if data is None:
            return "the node holds no manifest to apply a delta to"
        last = serials.kept(manifest, data)
    if last is not None:  # exactly what this agent wrote last: its lines and digest are known
        provider, provision, lines = last.provider, last.provision, last.lines
    else:
        assert data is not None
        try:
            body = _MANIFEST.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            return f"the manifest on the node is not a manifest meshtui wrote ({exc})"
        provider, provision, lines = body["provider"], body["provision"], body["consumers"]
    if provider != spec["provider"] or provision != spec["provision"]:
        return "the manifest on the node is for another provision"
    digest = serials.digest(last) if last is not None else _set_digest(lines)
    if digest != base["digest"]:
        return (
            "the manifest on the node does not hold the consumer set the delta applies to "
            "(edited, behind, or written by another controller)"
        )
    return lines, last


@dataclass
class _Merged:
    """A delta merged into the manifest it applies to: the whole set's lines, their text (None:
    to be encoded), each login's place (None: to be counted), and the set's digest."""

    lines: list[ManifestLine]
    texts: list[str] | None
    places: dict[str, int] | None
    digest: str


def _merge(
    held: list[ManifestLine],
    last: _Last | None,
    lines: list[ManifestLine],
    gone: set[str],
    base_digest: str,
) -> _Merged:
    """``lines`` (changed or added) and ``gone`` (logins removed) merged into ``held``: a held
    line keeps its place (and its text), a changed one takes it, an added one goes last, a
    removed one leaves. On the lines this agent wrote last (``last``) a delta that removes
    nothing costs the delta's size, not the manifest's (its lines are found by their places
    and the lists copied, not rebuilt); any other merge walks every line."""
    changed = {line["as"]: line for line in lines}
    if last is not None and not gone and len(changed) == len(lines):
        places = last.places
        was = [held[p] for line in lines if (p := places.get(line["as"])) is not None]
        merged, copied = held.copy(), last.texts.copy()
        added = [line for line in lines if line["as"] not in places]
        if added:
            places = {**places, **{line["as"]: len(held) + i for i, line in enumerate(added)}}
        for line in lines:
            text = line_text(line)
            if (p := last.places.get(line["as"])) is not None:
                merged[p], copied[p] = line, text
            else:
                merged.append(line)
                copied.append(text)
        digest = rebased_digest(
            base_digest, [_consumer_line(h) for h in was], [_consumer_line(c) for c in lines]
        )
        return _Merged(merged, copied, places, digest)
    # the merged set's digest, moved past the delta in the delta's size
    digest = rebased_digest(
        base_digest,
        [_consumer_line(h) for h in held if h["as"] in gone or h["as"] in changed],
        [_consumer_line(line) for line in lines],
    )
    merged = [changed.pop(h["as"], h) for h in held if h["as"] not in gone]
    texts: list[str] | None = None
    if last is not None:  # a held line keeps its text; a changed one is encoded
        was_text = {id(h): t for h, t in zip(held, last.texts, strict=True)}
        texts = [was_text.get(id(m)) or line_text(m) for m in merged]
    merged += [line for line in lines if line["as"] in changed]
    if texts is not None:
        texts += [line_text(m) for m in merged[len(texts) :]]
    return _Merged(merged, texts, None, digest)


def _not_replaceable(folder: folders.Folder, manifest: Path, spec: ProviderSet) -> str | None:
    """Why the file at ``manifest`` is not one this agent may replace (it is not a manifest of
    this provision: a system file a wrong ``receives`` names), or None."""
    try:
        data = folder.read(manifest.name, limit=folders.MAX_MANIFEST)
    except HostFileError as exc:
        return str(exc)
    if data is None:
        return None
    try:
        body = _MANIFEST.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return f"{manifest} exists and is not a manifest meshtui wrote, so it is not replaced"
    if body["provider"] != spec["provider"] or body["provision"] != spec["provision"]:
        return f"{manifest} is the manifest of {body['provider']} {body['provision']}, not replaced"
    return None


def _not_agents_folder(folder: folders.Folder, manifest: Path, *, entries: bool) -> str | None:
    """Why an existing grants folder is not one this agent made (never chmod-ed, never emptied
    of what is not a secret file), or None: mode 0700 and only secret files (and, when it is
    the manifest's own folder, the manifest) in it (looked at with ``entries``)."""
    mode = os.fstat(folder.fd).st_mode & 0o7777
    keep = "move it away, or choose another grants folder"
    if mode != 0o700:
        return (
            f"grants folder {folder.path} exists with mode {mode:04o}; the agent keeps secrets "
            f"only in a folder it made (0700) and never changes an existing folder ({keep})"
        )
    for name in folder.names() if entries else []:
        ours = name.endswith(".secret") or name == manifest.name
        if not ours and not (name.startswith(".") and name.endswith(".tmp")):
            return (
                f"grants folder {folder.path} holds {name!r}, which is not a secret file the "
                f"agent wrote ({keep})"
            )
    return None


def write_provider_files(
    spec: ProviderSet, manifest: Path, grants: Path, unseal: Unseal, serials: Serials
) -> Written:
    """Secret files into the grants folder, then the manifest beside it; stale secrets go.

    Both folders are opened once, checked (real folders, the agent's own, nobody else may
    write them) and worked in by descriptor. Every blob is unsealed before anything is
    written, so a bad one changes nothing; an unsafe folder is refused before any write.

    A delta (``base`` in the set) is merged into the manifest on disk when that holds the
    base's consumer set (the result is the whole manifest a whole delivery would write), and
    only its entries' secret files are checked; otherwise it is refused, nothing written.
    """
    delta = "base" in spec
    consumers = spec["consumers"]
    inside = grants.relative_to(manifest.parent).as_posix()
    rel = "" if inside == "." else inside + "/"
    # a grants folder that is the manifest's own is made 0700 like any other
    mdir = folders.open_folder(manifest.parent, create=0o700 if inside == "." else 0o755)
    assert mdir is not None
    with mdir:
        new_here = not serials.knows(manifest)  # not written by this agent since it started
        if new_here and not delta and (why := _not_replaceable(mdir, manifest, spec)):
            raise HostFileError(why)
        lines = [_line(c, rel) for c in consumers]
        scope: frozenset[str] | None = None
        held: list[ManifestLine] = []
        gone: set[str] = set()
        texts: list[str] | None = None
        places: dict[str, int] | None = None
        digest: str | None = None  # a whole manifest's is computed later (Serials.settle)
        if delta:
            base_digest = spec["base"]["digest"]  # what the manifest on disk is found to hold
            found = _held_lines(mdir, manifest, spec, serials)
            if isinstance(found, str):
                return Written(refused=found)
            (held, last), gone = found, set(spec.get("removed", []))
            merged = _merge(held, last, lines, gone, base_digest)
            lines, texts, places, digest = merged.lines, merged.texts, merged.places, merged.digest
            scope = frozenset(c["as"] for c in consumers) | gone
        gdir = folders.open_folder(grants, create=0o700, own=True)
        assert gdir is not None
        with gdir:
            if why := _not_agents_folder(gdir, manifest, entries=new_here):
                raise HostFileError(why)
            secrets: dict[str, bytes] = {}
            for c in consumers:
                name = secret_name(c["node"], c["module"])
                current, _ = files.read_in(gdir, name, files.PRIVATE_FILE)
                if current is None or crypto.secret_digest(current) != c["digest"]:
                    secrets[name] = unseal(c["sealed"], c["digest"], c["pair"])
            serial = serials.next(mdir, manifest)
            body: ManifestBody = {
                "version": VERSION,
                "provision": spec["provision"],
                "provider": spec["provider"],
                "serial": serial,
                "pin": spec["pin"],
                "consumers": lines,
            }
            if (kind := registry.stored_name(registry.name_of(spec.get("kind")))) is not None:
                body["kind"] = kind
            if texts is None:
                texts = [line_text(c) for c in lines]
            data = _joined(body, texts)
            serials.forget(manifest)
            try:
                if secrets:  # the manifest's temp file is fsynced while the secrets are written
                    mdir.write_after(
                        manifest.name, data, PRIVATE, lambda: gdir.write_many(secrets, PRIVATE)
                    )
                else:
                    mdir.write(manifest.name, data, PRIVATE)
            finally:
                secrets.clear()
            serials.wrote(manifest, serial)
            serials.keep(manifest, body, data, texts, digest, places)
            # a delta can make stale only the secret files of the logins it removes
            names = gdir.names() if not delta else [
                secret_name(h["node"], h["module"]) for h in held if h["as"] in gone
            ] if gone else []  # fmt: skip
            wanted = {line["secret"].rsplit("/", 1)[-1] for line in lines} if names else set()
            for stale in names:
                old = stale.endswith(".secret") and stale not in wanted
                if old and not gdir.is_folder(stale):
                    gdir.remove(stale)
    if scope is None:
        return Written(logins=scope)
    if places is not None:  # the delta's lines by their places, in the manifest's order
        cut = [texts[p] for p in sorted(places[a] for a in scope if a in places)]
    else:
        cut = [t for line, t in zip(lines, texts, strict=True) if line["as"] in scope]
    return Written(logins=scope, scoped=_joined(body, cut))
