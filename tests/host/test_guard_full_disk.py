"""A failed append to ``accepted.log`` leaves nothing behind, so the agent starts again.

The reviewer's attack: on a state filesystem that filled up in the middle of an append, the
first ``write`` was short and the next raised ENOSPC; the request failed (correctly) but its
half line stayed, the next request's whole line was appended after it, and at the next start
the record had a malformed line in the middle: the agent refused to start until the file was
deleted, which resets the replay guard. Here the state folder is a real, small tmpfs that
really fills up mid-line; and a seam makes ``fdatasync`` fail after a whole line was written.
"""

from __future__ import annotations

import errno
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from meshtui.errors import EnvelopeError
from meshtui.host.state import guard
from meshtui.host.state.guard import LEDGER, Accepted

LINE = 23  # len('{"s":1796150452272066}\n')
START = 1796150452272066


@pytest.fixture
def small_fs() -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("needs root (mounts a tmpfs)")
    where = Path(tempfile.mkdtemp(prefix="meshtui-full-"))
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs", str(where)], check=True
    )
    try:
        yield where
    finally:
        if subprocess.run(["umount", str(where)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], check=False)
        where.rmdir()


def fill(folder: Path) -> Path:
    """Write a filler file until the filesystem is full; its path."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        block = b"x" * 4096
        while True:
            try:
                if os.write(fd, block) < len(block):
                    os.write(fd, block)  # raises ENOSPC once the last page is used
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                return filler
    finally:
        os.close(fd)


def test_a_disk_full_in_the_middle_of_a_line_leaves_a_record_that_reads(small_fs: Path) -> None:
    accepted = Accepted(small_fs, "n1")
    seq = START
    ledger = small_fs / LEDGER
    # append until the record's last page has room for a few bytes of a line, not a whole one
    for _ in range(5000):
        seq += 1
        accepted.take(seq)
        accepted.record(seq)
        room = -ledger.stat().st_size % 4096
        if 0 < room < LINE:
            break
    else:
        raise AssertionError("never got a page-end shorter than a line")
    filler = fill(small_fs)
    seq += 1
    accepted.take(seq)
    with pytest.raises(OSError) as full:
        accepted.record(seq)  # a short write, then ENOSPC
    assert full.value.errno == errno.ENOSPC
    filler.unlink()
    seq += 1
    accepted.take(seq)
    accepted.record(seq)
    accepted.close()
    assert b"\n".join(ledger.read_bytes().split(b"\n")[:-1])  # whole lines only
    again = Accepted(small_fs, "n1")  # the agent starts again, the guard intact
    try:
        with pytest.raises(EnvelopeError, match="replayed"):
            again.take(seq)
        with pytest.raises(EnvelopeError, match="replayed"):
            again.take(seq - 2)
    finally:
        again.close()


def test_a_failed_sync_undoes_the_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    accepted = Accepted(tmp_path, "n1")
    accepted.take(START)
    accepted.record(START)
    before = (tmp_path / LEDGER).read_bytes()

    def broken(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(guard.os, "fdatasync", broken)
    accepted.take(START + 1)
    with pytest.raises(OSError):
        accepted.record(START + 1, [("consumer", "p", 3)])
    monkeypatch.undo()
    assert (tmp_path / LEDGER).read_bytes() == before
    assert accepted.get("consumer", "p") is None
    accepted.take(START + 2)
    accepted.record(START + 2)
    accepted.close()
    again = Accepted(tmp_path, "n1")
    with pytest.raises(EnvelopeError, match="replayed"):
        again.take(START + 2)
