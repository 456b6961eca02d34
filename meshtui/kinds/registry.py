"""The one registry of provider kinds: which kinds exist, and the one place a name becomes a kind.

``PACKAGES`` lists one package per kind, one line each: adding a kind is adding its line (see
docs/ARCHITECTURE.md, "Adding a provider kind"). Each package's ``__init__.py`` holds its
:class:`~meshtui.kinds.kind.Kind` as ``KIND``. Every layer asks this module, never a kind's
package, and never compares a kind's name with a literal.

``kind_of(None)`` is the one place an omitted kind means PostgreSQL: a ``provides`` entry without
``kind``, and the stored shapes that leave the default out (a module's stored spec, a manifest,
a probe's target on the wire) all read back through it. :func:`stored_name` is its inverse for
those shapes, so what older agents and manifests hold stays byte for byte the same.

Core: it imports the kinds' records only (each imports nothing above the core).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping

from meshtui.errors import UnknownKindError
from meshtui.kinds.kind import DEFAULT_KIND, Kind

DEFAULT = DEFAULT_KIND
"""The default kind's name (see :func:`kind_of`)."""

PACKAGES = (
    "meshtui.kinds.postgres",
    "meshtui.kinds.redis",
    "meshtui.kinds.openbao",
    "meshtui.kinds.seaweedfs",
)
"""One line per registered kind: the package whose ``KIND`` it is."""


def _index(packages: tuple[str, ...]) -> dict[str, Kind]:
    out: dict[str, Kind] = {}
    for package in packages:
        kind = getattr(importlib.import_module(package), "KIND", None)
        if not isinstance(kind, Kind):
            raise TypeError(f"{package} has no KIND (a meshtui.kinds.kind.Kind)")
        if kind.name in out:
            raise TypeError(f"{package} registers kind {kind.name!r} a second time")
        out[kind.name] = kind
    return out


KINDS: Mapping[str, Kind] = _index(PACKAGES)
"""Every registered kind by name, in ``PACKAGES`` order."""

NAMES: tuple[str, ...] = tuple(KINDS)
"""The registered kinds' names, as an error lists them."""


def kind_of(name: object) -> Kind:
    """The kind named ``name``; None (omitted) is the default kind, PostgreSQL.

    Raises UnknownKindError naming the known kinds for anything else; a declaration or a
    manifest turns it into its own error with the file and the key.
    """
    if name is None:
        return KINDS[DEFAULT_KIND]
    kind = KINDS.get(name) if isinstance(name, str) else None
    if kind is None:
        raise UnknownKindError(name, NAMES)
    return kind


def stored_name(kind: str) -> str | None:
    """``kind`` as a stored shape writes it: None (left out) for the default kind. Not checked
    against the registry: an agent passes a kind it does not know on, to be refused where it
    is used (a manifest the provisioner cannot read, a probe not run)."""
    return None if kind == DEFAULT_KIND else kind


def name_of(stored: str | None) -> str:
    """The kind's name as a stored shape holds it (a module's spec, a manifest, a wire item):
    left out (None or empty) is the default kind. Not checked either (see :func:`stored_name`)."""
    return stored or DEFAULT_KIND


def is_default(name: object) -> bool:
    """Whether ``name`` (as a stored shape holds it, None for omitted) is the default kind."""
    return kind_of(name).name == DEFAULT_KIND


def can_overlap(kind: Kind) -> bool:
    """Whether ``kind``'s adapter declares that one login holds two credentials at once (its
    ``capabilities.overlapping``): the one answer ``declare`` asks before it accepts
    ``rotation = "overlap"``. Loads the adapter's module (its client library) on first use."""
    return bool(kind.adapter.load().capabilities.overlapping)


def can_alternate(kind: Kind) -> bool:
    """Whether ``kind``'s adapter overlaps by two logins of one owner, its login holding one
    credential (its ``capabilities.alternating``: PostgreSQL's roles, SeaweedFS's access keys)."""
    return bool(kind.adapter.load().capabilities.alternating)


def rotates_by_overlap(kind: Kind) -> bool:
    """Whether a pair of ``kind`` may be declared ``rotation = "overlap"``: its login holds
    two credentials at once, or it alternates between two logins (:func:`can_alternate`)."""
    return can_overlap(kind) or can_alternate(kind)


def own_secret_kinds() -> tuple[Kind, ...]:
    """The kinds that store modules' own secrets (their ``own_secrets`` declared)."""
    return tuple(k for k in KINDS.values() if k.own_secrets is not None)


def own_secret_kind(name: str | None) -> Kind:
    """The kind named ``name`` when it stores modules' own secrets; None (a request from before
    it named one): the one registered kind that does. UnknownKindError otherwise."""
    stores = own_secret_kinds()
    if name is None and len(stores) == 1:
        return stores[0]
    kind = KINDS.get(name) if name else None
    if kind is None or kind.own_secrets is None:
        raise UnknownKindError(name, tuple(k.name for k in stores))
    return kind
