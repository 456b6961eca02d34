"""A delta merged into the manifest the agent wrote last costs the delta's size, not the
manifest's, and writes exactly what a whole delivery of the same set writes (the real writer,
real folders and files; the sealed blobs are opened by a seam that hands back each secret)."""

from __future__ import annotations

import os
import re
import secrets
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from meshtui import crypto, folders
from meshtui.host.receive import manifest_writer as host_manifest
from meshtui.host.receive.manifest_writer import Serials, write_provider_files
from meshtui.protocol.messages import ConsumerLine, ManifestEntry, ProviderSet, consumer_set_digest


class Provision:
    """One provider's consumers as the controller would send them, whole or as a delta."""

    def __init__(self, root: Path, count: int) -> None:
        self.root = root
        self.secrets: dict[str, bytes] = {}
        self.entries = [self.entry(i) for i in range(count)]
        self.serials = Serials()

    def entry(self, i: int, generation: int = 1) -> ManifestEntry:
        secret = secrets.token_urlsafe(32).encode()
        digest = crypto.secret_digest(secret)
        self.secrets[digest] = secret
        return {
            "pair": f"database:n{i}/m{i}->db1/postgres",
            "as": f"m{i}_n{i}",
            "node": f"n{i}",
            "module": f"m{i}",
            "at": "10.0.0.3",
            "values": {"database": f"m{i}"},
            "digest": digest,
            "sealed": "-",
            "generation": generation,
        }

    def unseal(self, sealed: str, digest: str, pair: str) -> bytes:
        return self.secrets[digest]

    def spec(self, consumers: list[ManifestEntry], **more: Any) -> ProviderSet:
        spec: ProviderSet = {
            "provider": "db1/postgres",
            "provision": "database",
            "receives": str(self.manifest),
            "grants": str(self.root / "grants"),
            "admin": None,
            "provisioner": None,
            "pin": True,
            "consumers": consumers,
        }
        spec.update(more)  # type: ignore[typeddict-item]
        return spec

    @property
    def manifest(self) -> Path:
        return self.root / "mesh.json"

    def digest(self) -> str:
        return consumer_set_digest(
            ConsumerLine(c["as"], c["node"], c["module"], c["at"], c["values"], c["digest"])
            for c in self.entries
        )

    def whole(self, serials: Serials | None = None) -> None:
        written = write_provider_files(
            self.spec(list(self.entries)),
            self.manifest,
            self.root / "grants",
            self.unseal,
            serials or self.serials,
        )
        assert written.refused is None

    def rotate(self, i: int) -> host_manifest.Written:
        """A delta rotating consumer ``i`` (its secret and generation)."""
        base = self.digest()
        self.entries[i] = self.entry(i, self.entries[i]["generation"] + 1)
        delta = self.spec([self.entries[i]], base={"digest": base})
        return write_provider_files(
            delta, self.manifest, self.root / "grants", self.unseal, self.serials
        )


def _lines_run(fn: Callable[[], object]) -> int:
    """How many lines of meshtui/host/receive/manifest_writer.py ``fn`` runs (a loop's body once per turn)."""
    code_file = host_manifest.__file__
    count = 0

    def tracer(frame: FrameType, event: str, arg: object) -> Any:
        nonlocal count
        if frame.f_code.co_filename != code_file:
            return None
        if event == "line":
            count += 1
        return tracer

    sys.settrace(tracer)
    try:
        fn()
    finally:
        sys.settrace(None)
    return count


def _folder(tmp_path: Path, name: str) -> Path:
    root = tmp_path / name
    root.mkdir(mode=0o700)
    return root


def test_a_rotation_merged_from_memory_walks_the_delta_not_the_manifest(tmp_path: Path) -> None:
    small, large = Provision(_folder(tmp_path, "s"), 10), Provision(_folder(tmp_path, "l"), 2000)
    for one in (small, large):
        one.whole()
        one.rotate(3)  # the first delta may read the file back; the next ones are from memory
    steps = [_lines_run(lambda one=one: one.rotate(5)) for one in (small, large)]  # type: ignore[misc]
    # the old merge walked every held line, several times (thousands of lines at 2,000)
    assert steps[1] <= steps[0] + 5, steps


def test_deltas_from_memory_write_exactly_what_a_whole_delivery_writes(tmp_path: Path) -> None:
    one = Provision(_folder(tmp_path, "a"), 50)
    one.whole()
    for i in (3, 7, 3, 49, 0):
        written = one.rotate(i)
        assert written.refused is None and written.logins == {f"m{i}_n{i}"}
        assert written.scoped is not None and f'"m{i}_n{i}"'.encode() in written.scoped
    # a login added by a delta goes last, as a whole delivery of the same order writes it
    base = one.digest()
    one.entries.append(one.entry(50))
    added = one.spec([one.entries[-1]], base={"digest": base})
    assert (
        write_provider_files(
            added, one.manifest, one.root / "grants", one.unseal, one.serials
        ).refused
        is None
    )
    one.rotate(50)
    merged = one.manifest.read_bytes()

    other = Provision(_folder(tmp_path, "b"), 0)
    other.entries, other.secrets = one.entries, one.secrets
    other.whole()
    assert re.sub(rb'"serial": \d+', b"", other.manifest.read_bytes()) == re.sub(
        rb'"serial": \d+', b"", merged
    )
    assert sorted(p.name for p in (other.root / "grants").iterdir()) == sorted(
        p.name for p in (one.root / "grants").iterdir()
    )


def _edit_in_place(path: Path, login: str) -> None:
    """Change one hex digit of ``login``'s digest in the file itself (same size, same inode)
    and put its access and modification times back, as a careful hand edit could."""
    before = path.stat()
    data = path.read_bytes()
    at = data.index(b'"digest": "blake2b:', data.index(f'"as": "{login}"'.encode()))
    at += len(b'"digest": "blake2b:')
    with path.open("r+b") as f:
        f.seek(at)
        f.write(b"0" if data[at : at + 1] != b"0" else b"1")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
        before.st_ino,
        before.st_size,
        before.st_mtime_ns,
    )


def _reads_of(monkeypatch: pytest.MonkeyPatch, name: str) -> list[str]:
    """The reads of the file ``name`` by folder descriptor from now on (the real reads)."""
    seen: list[str] = []
    real = folders.Folder.read_with_stat

    def counted(self: folders.Folder, file: str, *, limit: int = folders.MAX_SECRET) -> Any:
        if file == name:
            seen.append(file)
        return real(self, file, limit=limit)

    monkeypatch.setattr(folders.Folder, "read_with_stat", counted)
    return seen


def test_a_manifest_read_back_once_is_not_read_again_while_untouched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    one = Provision(_folder(tmp_path, "a"), 20)
    one.whole()
    one.serials.settle()  # as the agent does once its answer is sent
    one.serials.wait()
    reads = _reads_of(monkeypatch, "mesh.json")
    for i in (1, 2, 3):
        assert one.rotate(i).refused is None
        assert reads == []  # the delivery read nothing back: the file's stat alone
        one.serials.settle()  # read back off the delivery's path (on a timer within its tick)
        one.serials.wait()
        assert reads and set(reads) == {"mesh.json"}
        reads.clear()


def test_an_in_place_edit_that_puts_the_times_back_is_still_caught(tmp_path: Path) -> None:
    one = Provision(_folder(tmp_path, "a"), 20)
    one.whole()
    one.serials.settle()
    one.serials.wait()
    assert one.rotate(4).refused is None
    one.serials.settle()
    one.serials.wait()
    _edit_in_place(one.manifest, "m7_n7")  # the change time moves; nobody can put it back
    refused = one.rotate(7).refused
    assert refused is not None and "does not hold the consumer set" in refused
    assert b'"m7_n7"' in one.manifest.read_bytes()  # nothing written over the edit


def test_an_edit_before_the_read_back_is_caught_by_the_read_back(tmp_path: Path) -> None:
    one = Provision(_folder(tmp_path, "a"), 20)
    one.whole()
    _edit_in_place(one.manifest, "m2_n2")  # within the write's own clock tick, maybe
    one.serials.settle()  # reads it back: not what the agent wrote, so not remembered
    one.serials.wait()
    refused = one.rotate(2).refused
    assert refused is not None and "does not hold the consumer set" in refused


def test_a_link_put_in_the_manifests_place_is_refused_not_followed(tmp_path: Path) -> None:
    one = Provision(_folder(tmp_path, "a"), 5)
    one.whole()
    one.serials.settle()
    one.serials.wait()
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_bytes(one.manifest.read_bytes())  # the very bytes the agent wrote
    one.manifest.unlink()
    one.manifest.symlink_to(elsewhere)
    refused = one.rotate(1).refused
    assert refused is not None and "symbolic link" in refused
    assert one.manifest.is_symlink() and elsewhere.read_bytes().count(b'"as"') == 5
