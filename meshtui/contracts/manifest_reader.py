"""Read and validate a provider's manifest (``mesh.json``) into frozen dataclasses.

Two situations look alike but must never be confused:

* **Nobody is asked for.** A manifest that parses, has ``"version": 1`` and every required key,
  and says ``"consumers": []``. It is valid: the provisioner removes every login it made for
  this provision.
* **Broken.** Anything else: unreadable, not UTF-8, not JSON, truncated, a duplicated key, the
  wrong version, a missing or mistyped key, a secret path that leaves the manifest's folder,
  two consumers with one login. :func:`load_manifest` raises :class:`ManifestError` naming the
  file and the key, and the caller must change nothing at all.

A consumer whose *login* is unusable (empty, longer than 63 bytes, holding a NUL) is not a broken
manifest: it parses, and the harness refuses that consumer alone before any SQL.

Required keys: top level ``version``, ``provision``, ``provider``, ``serial``, ``consumers``;
per consumer ``as``, ``node``, ``module``, ``secret``, ``digest``. ``at`` (the consumer's
address) and ``values`` (an object of strings) are optional, and so are the top-level ``pin``
(a boolean: confine each login to its ``at`` in pg_hba.conf) and ``kind`` (a registered kind,
meshtui.kinds.registry; absent: the default): which adapter the harness drives. An unknown kind
is a broken manifest.
Unknown keys are ignored.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Any

from meshtui.contracts.provider_files import read_manifest
from meshtui.errors import ManifestError, UnknownKindError
from meshtui.freeform import JsonObject
from meshtui.kinds import registry
from meshtui.kinds.kind import DEFAULT_KIND
from meshtui.model import NAME_RE, plain_address
from meshtui.protocol.manifest import ALTERNATES, VERSION

MAX_MANIFEST_BYTES = 64 * 1024 * 1024
_DIGEST = re.compile(r"blake2b:[0-9a-f]{64}")
_ALTS = ("", *ALTERNATES)  # absent, or the alternate a line names


@dataclass(frozen=True)
class Consumer:
    """One consumer the provider must accept: its login, where its secret is, what it asked for."""

    login: str
    node: str
    module: str
    at: str
    values: Mapping[str, str]
    secret: str
    digest: str
    keep: bool = False  # an overlap's first step: the login keeps its credential beside this
    alt: str = ""  # an alternating pair's current login ("a"/"b"); ``login`` is its owner

    @property
    def name(self) -> str:
        """The consumer module, ``node/module``."""
        return f"{self.node}/{self.module}"


@dataclass(frozen=True)
class Manifest:
    """A valid manifest; ``consumers`` may be empty (nobody is asked for)."""

    path: Path
    version: int
    provision: str
    provider: str
    serial: int
    consumers: tuple[Consumer, ...]
    pin: bool = False  # keep one pg_hba line per login: only from its consumer's address
    kind: str = DEFAULT_KIND

    @cached_property
    def folder(self) -> str:
        """The manifest's folder, as text (secret paths are relative to it)."""
        return os.fspath(self.path.parent)

    def secret_path(self, consumer: Consumer) -> Path:
        """Where ``consumer``'s secret file lives: beside the manifest."""
        return self.path.parent / consumer.secret


def _no_duplicates(pairs: list[tuple[str, object]]) -> JsonObject:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _value in pairs:
            if key in seen:
                raise ValueError(f"key {key!r} appears twice")
            seen.add(key)
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


class _Reader:
    """Typed access to one JSON object, raising ManifestError that names the file and key."""

    def __init__(self, source: str, where: str, obj: Any) -> None:
        self.source, self.where = source, where
        if not isinstance(obj, dict):
            self.fail("", "must be a JSON object")
        self.obj: JsonObject = obj

    def fail(self, key: str, problem: str) -> None:
        path = ".".join(p for p in (self.where, key) if p)
        raise ManifestError(f"{self.source}: {path or '(top)'}: {problem}")

    def get(self, key: str, kind: type, *, required: bool = True) -> Any:
        if key not in self.obj:
            if required:
                self.fail(key, "is missing")
            return None
        value = self.obj[key]
        if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
            self.fail(key, f"must be an integer, not {type(value).__name__}")
        if not isinstance(value, kind):
            self.fail(key, f"must be a {kind.__name__}, not {type(value).__name__}")
        return value

    def text(self, key: str, *, required: bool = True, allow_empty: bool = False) -> str:
        value = self.get(key, str, required=required)
        if value is None:
            return ""
        if not allow_empty and not value:
            self.fail(key, "must not be empty")
        return str(value)


def _secret_ok(name: str) -> bool:
    """A relative path inside the manifest's folder (the grants folder may be a subfolder)."""
    if not name or name[0] in "./" or "\\" in name or "\x00" in name:
        return False
    return "/" not in name or all(p and p[0] != "." for p in name.split("/"))


def _secret_name(reader: _Reader, name: str) -> str:
    if not _secret_ok(name):
        reader.fail(
            "secret", f"{name!r} must be a file name beside the manifest or in a folder below it"
        )
    return name


def _provider_ok(text: str) -> bool:
    node, _, module = text.partition("/")
    return bool(NAME_RE.match(node) and NAME_RE.match(module))


def _plain(top: _Reader) -> tuple[str, str]:
    """The provision and provider names: plain, since they reach pg_hba.conf's marker lines."""
    provision, provider = top.text("provision"), top.text("provider")
    if not NAME_RE.match(provision):
        top.fail("provision", f"{provision!r} is not a provision name (letters, digits, '-', '_')")
    if not _provider_ok(provider):
        top.fail("provider", f"{provider!r} is not a provider module (node/module)")
    return provision, provider


def _consumer(source: str, index: int, obj: Any) -> Consumer:
    """One consumer: a quick path for a well-formed entry, the careful one to name a problem."""
    if type(obj) is dict:
        login, node, module = obj.get("as"), obj.get("node"), obj.get("module")
        secret, digest = obj.get("secret"), obj.get("digest")
        at, values = obj.get("at", ""), obj.get("values", {})
        if (
            type(login) is str
            and type(node) is str
            and type(module) is str
            and type(secret) is str
            and type(digest) is str
            and type(at) is str
            and type(values) is dict
            and node
            and module
            and all(type(v) is str for v in values.values())
            and _DIGEST.fullmatch(digest)
            and _secret_ok(secret)
            and (not at or plain_address(at))
            and type(obj.get("keep", False)) is bool
            and obj.get("alt", "") in _ALTS
        ):
            keep = obj.get("keep", False) is True
            return Consumer(
                login,
                node,
                module,
                at,
                MappingProxyType(values),
                secret,
                digest,
                keep,
                obj.get("alt", ""),
            )
    return _consumer_checked(source, index, obj)


def _consumer_checked(source: str, index: int, obj: Any) -> Consumer:
    reader = _Reader(source, f"consumers[{index}]", obj)
    login = reader.get("as", str)
    digest = reader.text("digest")
    if not _DIGEST.fullmatch(digest):
        reader.fail("digest", "must read 'blake2b:' and 64 lower-case hex digits")
    values_obj = reader.get("values", dict, required=False) or {}
    values: dict[str, str] = {}
    for key, value in values_obj.items():
        if not isinstance(value, str):
            reader.fail(f"values.{key}", f"must be a string, not {type(value).__name__}")
        values[key] = value
    at = reader.text("at", required=False, allow_empty=True)
    if at and not plain_address(at):
        reader.fail("at", f"{at!r} is not an IP address (an IPv6 scope id is not taken)")
    alt = reader.get("alt", str, required=False) or ""
    if alt not in _ALTS:
        reader.fail("alt", f'{alt!r} names no alternate login ("a" or "b")')
    return Consumer(
        login=login,
        node=reader.text("node"),
        module=reader.text("module"),
        at=at,
        values=MappingProxyType(values),
        secret=_secret_name(reader, reader.text("secret")),
        digest=digest,
        keep=reader.get("keep", bool, required=False) is True,
        alt=alt,
    )


def parse_manifest(data: bytes, path: Path) -> Manifest:
    """Validate ``data`` (the bytes of ``path``) into a Manifest, or raise ManifestError."""
    source = str(path)
    try:
        text = data.decode("utf-8")
        raw = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ManifestError(f"{source}: not valid JSON ({exc}); nothing was changed") from None
    top = _Reader(source, "", raw)
    version = top.get("version", int)
    if version != VERSION:
        top.fail("version", f"is {version}, this provisioner reads version {VERSION}")
    serial = top.get("serial", int)
    if serial < 0:
        top.fail("serial", "must not be negative")
    provision, provider = _plain(top)
    try:
        kind = registry.kind_of(top.text("kind", required=False) or None).name
    except UnknownKindError as exc:
        top.fail("kind", f"is {exc.name!r}; this provisioner knows {', '.join(exc.known)}")
        raise  # not reached: fail raises ManifestError
    consumers_raw = top.get("consumers", list)
    consumers = tuple(_consumer(source, i, c) for i, c in enumerate(consumers_raw))
    seen_logins: dict[str, int] = {}
    seen_names: dict[tuple[str, str], int] = {}
    for i, consumer in enumerate(consumers):
        if consumer.login in seen_logins:
            top.fail(f"consumers[{i}].as", f"repeats consumers[{seen_logins[consumer.login]}]")
        if (consumer.node, consumer.module) in seen_names:
            earlier = seen_names[(consumer.node, consumer.module)]
            top.fail(f"consumers[{i}]", f"repeats the module of consumers[{earlier}]")
        seen_logins[consumer.login] = i
        seen_names[(consumer.node, consumer.module)] = i
    return Manifest(
        path=path,
        version=version,
        provision=provision,
        provider=provider,
        serial=serial,
        consumers=consumers,
        pin=bool(top.get("pin", bool, required=False)),
        kind=kind,
    )


def read_manifest_bytes(path: Path) -> bytes:
    """The manifest's bytes through its checked folder (no link followed, no FIFO waited on),
    or ManifestError if it cannot be read."""

    return read_manifest(path, MAX_MANIFEST_BYTES)


def load_manifest(path: Path) -> Manifest:
    """Read and validate the manifest at ``path``; ManifestError means: change nothing."""
    path = Path(path)
    return parse_manifest(read_manifest_bytes(path), path)
