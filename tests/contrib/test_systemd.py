"""The service units in contrib/systemd: hardened, and valid for systemd's own checker."""

from __future__ import annotations

import configparser
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNITS = sorted((Path(__file__).parents[2] / "contrib" / "systemd").glob("*.service"))
HARDENING = {
    "ProtectSystem": {"strict"},
    "NoNewPrivileges": {"true", "yes"},
    "PrivateTmp": {"true", "yes"},
}


def _service(unit: Path) -> configparser.SectionProxy:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(unit.read_text())
    return parser["Service"]


def test_units_exist() -> None:
    names = {u.name for u in UNITS}
    assert {
        "meshtui-agent.service",
        "meshtui-provision@.service",
        "meshtui-watch.service",
        "meshtui-backup.service",
    } <= names


def test_the_nightly_backup_timer_starts_the_backup() -> None:
    timer = UNITS[0].with_name("meshtui-backup.timer")
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(timer.read_text())
    assert parser["Timer"]["Unit"] == "meshtui-backup.service"
    assert parser["Timer"]["OnCalendar"].startswith("*-*-* ")  # every night
    assert parser["Timer"]["Persistent"] == "true"
    assert parser["Install"]["WantedBy"] == "timers.target"
    service = _service(timer.with_name("meshtui-backup.service"))
    start = service["ExecStart"]
    # the passphrase comes as a systemd credential file, never in argv or the environment
    assert "--passphrase-file %d/passphrase" in start and "LoadCredential" in service
    assert "passphrase" not in service.get("Environment", "")
    assert service["Type"] == "oneshot" and service["User"] == "meshtui"
    # the same program and state folder as the watch it backs up
    watch = _service(timer.with_name("meshtui-watch.service"))
    assert start.split()[0] == watch["ExecStart"].split()[0] == "/opt/meshtui/bin/meshtui"
    assert service["Environment"] == watch["Environment"]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_systemd_analyze_verify_the_timer(tmp_path: Path) -> None:
    meshtui = Path(sys.executable).with_name("meshtui")
    folder = UNITS[0].parent
    for name in ("meshtui-backup.service", "meshtui-backup.timer"):
        text = (folder / name).read_text().replace("/opt/meshtui/bin/meshtui", str(meshtui))
        (tmp_path / name).write_text(text)
    done = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(tmp_path / "meshtui-backup.timer")],
        capture_output=True,
        text=True,
        check=False,
    )
    problems = [
        line
        for line in (done.stdout + done.stderr).splitlines()
        if "meshtui-backup" in line or "Unknown" in line or "Invalid" in line
    ]
    assert done.returncode == 0 and not problems, "\n".join(problems) or done.stderr


@pytest.mark.parametrize("unit", UNITS, ids=lambda u: u.name)
def test_unit_is_hardened(unit: Path) -> None:
    service = _service(unit)
    for key, allowed in HARDENING.items():
        assert service.get(key) in allowed, f"{unit.name}: {key}={sorted(allowed)[0]} missing"
    assert "meshtui" in service["ExecStart"]
    # every unit says where it may write; nothing else is writable under ProtectSystem=strict
    assert any(k in service for k in ("ReadWritePaths", "ReadOnlyPaths", "StateDirectory"))
    # a unit that keeps root keeps no capability beyond the ones it names
    if "User" not in service:
        assert "CapabilityBoundingSet" in service, f"{unit.name} runs as root with every capability"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
@pytest.mark.parametrize("unit", UNITS, ids=lambda u: u.name)
def test_systemd_analyze_verify(unit: Path, tmp_path: Path) -> None:
    # verify wants the ExecStart binary to exist: point it at this venv's meshtui
    meshtui = Path(sys.executable).with_name("meshtui")
    name = unit.name.replace("@.", "@lab.")
    copy = tmp_path / name
    copy.write_text(unit.read_text().replace("/opt/meshtui/bin/meshtui", str(meshtui)))
    done = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(copy)],
        capture_output=True,
        text=True,
        check=False,
    )
    problems = [
        line
        for line in (done.stdout + done.stderr).splitlines()
        if name in line or "Unknown" in line or "Invalid" in line
    ]
    assert done.returncode == 0 and not problems, "\n".join(problems) or done.stderr


def test_the_agent_units_writable_folders_cover_the_walks_policy_folders(tmp_path: Path) -> None:
    """Every folder the manual's node policies (docs/real-mesh.md) allow is writable by the
    agent's unit, as shipped or with the walk's drop-in; every policy there parses; and the unit
    mounts the policy read-only."""
    from meshtui.host.policy import node_policy

    walk = (Path(__file__).parents[2] / "docs" / "real-mesh.md").read_text()
    blocks = [b.split("```", 1)[0] for b in walk.split("<!-- run: policy -->\n```toml\n")[1:]]
    assert len(blocks) == 3  # db1's, app1's and app2's
    folders: set[str] = set()
    for i, text in enumerate(blocks):
        node_policy.write(tmp_path / str(i), text)
        allowed = node_policy.load(tmp_path / str(i), "node")
        folders |= {r.under for r in (*allowed.credentials, *allowed.providers)}
    service = _service(UNITS[[u.name for u in UNITS].index("meshtui-agent.service")])
    writable = {p.lstrip("-") for p in service["ReadWritePaths"].split()}
    for drop_in in re.findall(r"ReadWritePaths=([^`\n]+)", walk):
        writable |= set(drop_in.split())
    for folder in folders:
        assert any(folder == w or folder.startswith(w + "/") for w in writable), folder
    state = service["ExecStart"].split("--state ", 1)[1].split()[0]
    assert service["ReadOnlyPaths"].lstrip("-") == f"{state}/policy.toml"
    assert {"CAP_SETUID", "CAP_SETGID"} <= set(service["CapabilityBoundingSet"].split())


def test_the_agent_cannot_even_read_the_nodes_key_material() -> None:
    """The agent stays root, so its unit's view of the filesystem hides what no request of its
    may reach: home folders, the host's SSH keys, password hashes, TLS private keys, and a
    controller's state and backups on the same machine (the watch and backup units' folders)."""
    folder = UNITS[0].parent
    service = _service(folder / "meshtui-agent.service")
    assert service["ProtectHome"] == "true"
    hidden = {p.lstrip("-") for p in service["InaccessiblePaths"].split()}
    controller = _service(folder / "meshtui-watch.service")["Environment"].split("=", 1)[1]
    backups = _service(folder / "meshtui-backup.service")["ReadWritePaths"].split()[-1]
    assert {"/etc/ssh", "/etc/shadow", "/etc/ssl/private", controller, backups} <= hidden
    state = service["ExecStart"].split("--state ", 1)[1].split()[0]
    assert not any(state.startswith(p) for p in hidden)  # its own key it must read
