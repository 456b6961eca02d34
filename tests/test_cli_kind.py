"""``meshtui kind list`` and ``meshtui kind config KIND``: every kind's server configuration
printed with a heading and a why per file, or written into a folder (every file or none, each
with its mode, never through a link), with no secret anywhere, importing no server's client."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

import pytest

from meshtui.cli import main
from meshtui.contracts.server_config import PLACEHOLDERS
from meshtui.kinds import registry
from tests.test_cli_imports import HEAVY, among, imported

KINDS = sorted(k.name for k in registry.KINDS.values() if k.server_config is not None)


def test_every_kind_has_a_server_config() -> None:
    assert sorted(registry.KINDS) == KINDS


def test_kind_list_names_every_kind(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["kind", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["kind"] for r in rows] == list(registry.KINDS)
    assert main(["kind", "list"]) == 0
    out = capsys.readouterr().out
    for name in registry.KINDS:
        assert f"meshtui kind config {name}" in out


@pytest.mark.parametrize("kind", KINDS)
def test_config_prints_each_file_with_its_why_and_what_expires(
    kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["kind", "config", kind, "--address", "10.9.8.7", "--admin-file", "/a/f"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert main([*args, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    for item in shown["files"]:
        assert f"## {item['name']} -> {item['path']} (mode {item['mode']})" in out
        assert f"## {item['purpose']}" in out
        assert item["text"] in out
        if any(p in item["text"] for p in PLACEHOLDERS):  # a secret goes there: said how
            assert item["mode"] == "0600" and item["secret"], item["name"]
    assert "10.9.8.7" in out and "/a/f" in out
    assert "## what expires" in out and shown["expires"]
    # the admin file is among them, 0600
    admin = [f for f in shown["files"] if f["path"] == "/a/f"]
    assert len(admin) == 1 and admin[0]["mode"] == "0600"


@pytest.mark.parametrize("kind", KINDS)
def test_nothing_printed_looks_like_a_secret(kind: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Two runs print the same text: nothing is minted (a minted secret would differ)."""
    main(["kind", "config", kind])
    first = capsys.readouterr().out
    main(["kind", "config", kind])
    assert capsys.readouterr().out == first
    assert not re.search(r"[A-Za-z0-9_-]{40,}", first.replace("/", " "))


def test_out_writes_every_file_with_its_mode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "redis-conf"
    assert main(["kind", "config", "redis", "--out", str(out)]) == 0
    said = capsys.readouterr().out
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()}
    assert modes == {"meshtui.conf": 0o644, "users.acl": 0o600, "admin.url": 0o600}
    assert stat.S_IMODE(out.stat().st_mode) == 0o700
    assert f"wrote {out / 'users.acl'} (0600)" in said and "its secret:" in said
    assert "<SHA256-OF-ADMIN-PASSWORD>" in (out / "users.acl").read_text()


def test_out_refuses_to_overwrite_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "conf"
    out.mkdir()
    (out / "admin.toml").write_text("mine\n")
    assert main(["kind", "config", "openbao", "--out", str(out)]) == 1
    assert "admin.toml already exists: nothing was written" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["admin.toml"]
    assert (out / "admin.toml").read_text() == "mine\n"


def test_out_never_follows_a_link(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "elsewhere"
    out = tmp_path / "conf"
    out.mkdir()
    os.symlink(target, out / "bao.hcl")
    assert main(["kind", "config", "openbao", "--out", str(out)]) == 1
    assert not target.exists()
    os.symlink(tmp_path, tmp_path / "linked")
    assert main(["kind", "config", "openbao", "--out", str(tmp_path / "linked")]) == 1
    assert "cannot write into" in capsys.readouterr().err


def test_a_bad_admin_name_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["kind", "config", "postgres", "--admin", "x; DROP ROLE postgres"]) == 2
    assert "admin role" in capsys.readouterr().err


@pytest.mark.parametrize("kind", KINDS)
def test_kind_config_imports_no_servers_client(kind: str) -> None:
    names, out = imported("kind", "config", kind)
    assert out.startswith("# ")
    assert among(names, (*HEAVY, "nacl", "msgspec", "sqlite3")) == []
    assert among(names, ("meshtui.controller", "meshtui.host", "meshtui.lab", "meshtui.tui")) == []
