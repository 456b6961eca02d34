"""The agent's record of the secret files it wrote: kept across restarts (0600), and a record it
cannot read stops it naming the file and what to do, rather than a node that forgets which
files are its own (and so refuses, or worse replaces, them)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from meshtui.errors import HostFileError
from meshtui.host.state.secret_files import FILE, SecretFiles, Written


def test_what_the_agent_wrote_is_kept_across_a_restart(tmp_path: Path) -> None:
    record = SecretFiles(tmp_path)
    assert record.get("app1/gitea", "session_key") is None
    record.put("app1/gitea", "session_key", Written("/srv/app1/session.key", 3, "blake2b:ab"))
    again = SecretFiles(tmp_path)
    assert again.get("app1/gitea", "session_key") == Written(
        "/srv/app1/session.key", 3, "blake2b:ab"
    )
    assert again.get("app1/gitea", "other") is None
    assert stat.S_IMODE((tmp_path / FILE).stat().st_mode) == 0o600
    assert b"blake2b:ab" in (tmp_path / FILE).read_bytes()  # a digest, never a value


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (b"{not json", "is not JSON"),
        (b'{"app1/gitea k": {"file": "/x", "version": "3", "digest": "d"}}', "is not a record"),
    ],
)
def test_a_record_it_cannot_read_stops_the_agent_naming_the_file(
    tmp_path: Path, text: bytes, said: str
) -> None:
    (tmp_path / FILE).write_bytes(text)
    with pytest.raises(HostFileError) as caught:
        SecretFiles(tmp_path)
    assert str(tmp_path / FILE) in str(caught.value) and said in str(caught.value)
    assert "move it aside" in str(caught.value)
