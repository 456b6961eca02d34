"""Writing a provider's manifest and the secret files beside it, by folder descriptor.

The manifest is whole on every write (every live consumer of the provision, a serial one more
than the last) and written after every secret it names; secret files no longer named go. A
delta is merged into the manifest on disk first, when that is the set the delta applies to.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NotRequired, TypedDict

import msgspec

from meshtui import crypto
from meshtui.atomic import PRIVATE
from meshtui.errors import HostFileError
from meshtui.host import files
from meshtui.messages import ConsumerLine, ManifestEntry, ProviderSet, consumer_set_digest

ManifestLine = TypedDict(
    "ManifestLine",
    {
        "as": str,
        "node": str,
        "module": str,
        "at": str,
        "values": dict[str, str],
        "secret": str,
        "digest": str,
    },
)
"""One consumer as the provisioner reads it: its login, where it connects from, its values, and
its secret file (relative to the manifest) with the digest that file must match."""


class ManifestBody(TypedDict):
    """The manifest file (docs/ARCHITECTURE.md, the manifest)."""

    version: int
    provision: str
    provider: str
    serial: int
    pin: bool
    consumers: list[ManifestLine]
    kind: NotRequired[str]  # absent: PostgreSQL; the harness picks its adapter by this


_MANIFEST = msgspec.json.Decoder(ManifestBody)
"""The manifest this agent wrote, read back with its shape checked (a delta's base)."""

Unseal = Callable[[str, str, str], bytes]
"""``unseal(sealed_b64, digest, pair)``: the secret, or CryptoError naming the pair."""


def secret_name(node: str, module: str) -> str:
    """The secret file's name beside the manifest (docs/ARCHITECTURE.md, the manifest)."""
    return f"{node}.{module}.secret"


def manifest_text(body: ManifestBody) -> bytes:
    """The manifest as JSON, one consumer a line (readable, and encoded by the C encoder,
    which ``indent`` would turn off: 10x slower for 1,000 consumers)."""
    head = {k: v for k, v in body.items() if k != "consumers"}
    lines = [json.dumps(c, separators=(", ", ": ")) for c in body["consumers"]]
    inner = ",\n ".join(lines)
    text = json.dumps(head)[:-1] + ', "consumers": [' + ("\n " + inner + "\n" if lines else "")
    return (text + "]}\n").encode()


class Serials:
    """Each manifest's last serial, kept in memory once written (read from the file after a start)."""

    def __init__(self) -> None:
        self._last: dict[str, int] = {}

    def next(self, folder: files.Folder, manifest: Path) -> int:
        """One more than the serial this agent wrote last."""
        last = self._last.get(str(manifest))
        return last + 1 if last is not None else _serial_on_disk(folder, manifest.name) + 1

    def wrote(self, manifest: Path, serial: int) -> None:
        self._last[str(manifest)] = serial


def _serial_on_disk(folder: files.Folder, name: str) -> int:
    """The serial the manifest on disk carries (0 when it is missing or unreadable)."""
    try:
        data = folder.read(name, limit=files.MAX_MANIFEST)
        return int(json.loads(data or b"{}")["serial"])
    except (HostFileError, OSError, ValueError, KeyError, TypeError):
        return 0


@dataclass(frozen=True)
class Written:
    """What :func:`write_provider_files` did: the logins the provisioner must apply (None:
    every one, a whole manifest), or why a delta was refused (then nothing was written)."""

    logins: frozenset[str] | None = None
    refused: str | None = None


def _line(c: ManifestEntry, rel: str) -> ManifestLine:
    return {
        "as": c["as"],
        "node": c["node"],
        "module": c["module"],
        "at": c["at"],
        "values": c["values"],
        "secret": rel + secret_name(c["node"], c["module"]),
        "digest": c["digest"],
    }


def _held_lines(folder: files.Folder, name: str, spec: ProviderSet) -> list[ManifestLine] | str:
    """The consumer lines of the manifest on disk when its set is the delta's base, else why
    not (missing, unreadable, another provision's, or not the set the controller expects)."""
    base = spec.get("base")
    assert base is not None
    try:
        data = folder.read(name, limit=files.MAX_MANIFEST)
    except (HostFileError, OSError) as exc:
        return f"the manifest on the node cannot be read ({exc})"
    if data is None:
        return "the node holds no manifest to apply a delta to"
    try:
        body = _MANIFEST.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        return f"the manifest on the node is not a manifest meshtui wrote ({exc})"
    if body["provider"] != spec["provider"] or body["provision"] != spec["provision"]:
        return "the manifest on the node is for another provision"
    lines = body["consumers"]
    digest = consumer_set_digest(
        ConsumerLine(c["as"], c["node"], c["module"], c["at"], c["values"], c["digest"])
        for c in lines
    )
    if digest != base["digest"]:
        return (
            "the manifest on the node does not hold the consumer set the delta applies to "
            "(edited, behind, or written by another controller)"
        )
    return lines


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
    mdir = files.open_folder(manifest.parent, create=0o755)
    assert mdir is not None
    with mdir:
        lines = [_line(c, rel) for c in consumers]
        scope: frozenset[str] | None = None
        held: list[ManifestLine] = []
        gone: set[str] = set()
        if delta:
            found = _held_lines(mdir, manifest.name, spec)
            if isinstance(found, str):
                return Written(refused=found)
            held, gone = found, set(spec.get("removed", []))
            changed = {line["as"]: line for line in lines}
            merged = [changed.pop(h["as"], h) for h in held if h["as"] not in gone]
            lines = merged + [line for line in lines if line["as"] in changed]
            scope = frozenset(c["as"] for c in consumers) | gone
        gdir = files.open_folder(grants, create=0o700, own=True)
        assert gdir is not None
        with gdir:
            os.fchmod(gdir.fd, 0o700)
            secrets: dict[str, bytes] = {}
            for c in consumers:
                name = secret_name(c["node"], c["module"])
                current, _ = files.read_in(gdir, name)
                if current is None or crypto.secret_digest(current) != c["digest"]:
                    secrets[name] = unseal(c["sealed"], c["digest"], c["pair"])
            gdir.write_many(secrets, PRIVATE)
            secrets.clear()
            serial = serials.next(mdir, manifest)
            body: ManifestBody = {
                "version": 1,
                "provision": spec["provision"],
                "provider": spec["provider"],
                "serial": serial,
                "pin": spec["pin"],
                "consumers": lines,
            }
            if spec.get("kind", "postgres") != "postgres":
                body["kind"] = spec["kind"]
            mdir.write(manifest.name, manifest_text(body), PRIVATE)
            serials.wrote(manifest, serial)
            wanted = {line["secret"].rsplit("/", 1)[-1] for line in lines}
            # a delta can make stale only the secret files of the logins it removes
            names = gdir.names() if not delta else [
                secret_name(h["node"], h["module"]) for h in held if h["as"] in gone
            ]  # fmt: skip
            for stale in names:
                old = stale.endswith(".secret") and stale not in wanted
                if old and not gdir.is_folder(stale):
                    gdir.remove(stale)
    return Written(logins=scope)
