"""Which files this node's agent wrote for modules' own secrets: by module and secret name, the
file, the version and its digest, never the value.

A pair's credential file is replaced only when the agent wrote it (``holdings.json`` names the
file); a module's own secret file keeps the same rule through this record, so a secret declared
at the path of an operator's own file (a config, a key) is refused instead of overwriting it.
Persisted beside the node's keys (``secret-files.json``, 0600); a file the record cannot read
stops the agent naming it, as a corrupted holdings record does.
"""

from __future__ import annotations

import threading
from pathlib import Path

import msgspec

from meshtui.atomic import write_private
from meshtui.host.state.record import read_record

FILE = "secret-files.json"
ADVICE = (
    "move it aside and start the agent again: the agent then refuses to replace the secret "
    "files it wrote before (move each away, then meshtui push writes it again)"
)


class Written(msgspec.Struct, forbid_unknown_fields=True):
    """One secret file the agent wrote: where, which version, that version's digest, its
    owner, group and mode (absent from a record written before they were kept: the default),
    and ``local``, the node's own keyed digest of what it wrote (absent from an older record)."""

    file: str
    version: int
    digest: str
    owner: str | None = None
    group: str | None = None
    mode: str = "0600"
    local: str | None = None


class SecretFiles:
    """A small persistent map ``"module name" -> Written``."""

    def __init__(self, state_dir: Path) -> None:
        self._path = state_dir / FILE
        self._lock = threading.Lock()
        self._data = self._load()

    @staticmethod
    def key(module: str, name: str) -> str:
        """The record's key of one module's secret."""
        return f"{module} {name}"

    def _load(self) -> dict[str, Written]:
        found = read_record(
            self._path, dict[str, Written], what="a record of secret files", advice=ADVICE
        )
        return found if found is not None else {}

    def get(self, module: str, name: str) -> Written | None:
        """What the agent last wrote for a module's secret."""
        with self._lock:
            return self._data.get(self.key(module, name))

    def listing(self) -> dict[str, Written]:
        """Every file written, by :meth:`key`."""
        with self._lock:
            return dict(self._data)

    def put(self, module: str, name: str, written: Written) -> None:
        """Record a file written (persisted at once: a lost record would refuse the file)."""
        with self._lock:
            self._data[self.key(module, name)] = written
            write_private(self._path, msgspec.json.encode(self._data))
