"""The manifest (``mesh.json``): its one shape, written by the provider's agent
(meshtui/host/receive/manifest_writer.py) and read by the provisioner (meshtui/contracts/manifest_reader.py).

Both sides name its keys through these TypedDicts, so a key added here is a key both must handle
(``tests/provisioner/test_manifest.py`` writes a manifest with the agent's writer and reads every
key of these shapes back with the provisioner's reader). Core: no I/O here.
"""

from __future__ import annotations

from typing import NotRequired, TypedDict

VERSION = 1
"""The manifest version this meshtui writes and reads."""

ALTERNATES = ("a", "b")
"""The two logins of an alternating pair, as a line's ``alt`` names them."""

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
        "keep": NotRequired[bool],
        "alt": NotRequired[str],
    },
)
"""One consumer as the provisioner reads it: its login, where it connects from, its values, and
its secret file (relative to the manifest) with the digest that file must match. ``keep``: an
overlap rotation's first step: the login accepts this secret and keeps the one it holds now.
``alt``: an alternating pair's current login (``"a"`` or ``"b"``; ``as`` is then its owner,
see :class:`meshtui.contracts.adapter.Alternating`)."""


class ManifestBody(TypedDict):
    """The manifest file (docs/ARCHITECTURE.md, the manifest)."""

    version: int
    provision: str
    provider: str
    serial: int
    pin: bool
    consumers: list[ManifestLine]
    kind: NotRequired[str]  # absent: the default kind; the harness picks its adapter by this


def secret_name(node: str, module: str) -> str:
    """The secret file's name beside the manifest (docs/ARCHITECTURE.md, the manifest)."""
    return f"{node}.{module}.secret"
