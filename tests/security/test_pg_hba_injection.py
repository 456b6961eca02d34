"""Attack: text from a manifest reaching pg_hba.conf as more than one token.

A manifest names the provision, the provider and each consumer's address. With ``pin``, those
go into pg_hba.conf (the marker lines and the allow line). Whoever writes a manifest the root
provisioner reads (``meshtui provision --manifest``) must not be able to add a rule of their
own: a newline in the provision name, or a tab and a '#' hidden in an IPv6 scope id in ``at``,
would give every role ``trust`` from anywhere.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from meshtui.errors import ManifestError
from meshtui.provisioner.harness import reconcile
from tests.provisioner.conftest import Mesh


@pytest.fixture
def hba(mesh: Mesh) -> Iterator[Path]:
    path = mesh.cluster.datadir / "pg_hba.conf"
    before = path.read_text().splitlines()
    yield path
    mesh.cluster.set_hba(before)


def _superuser_without_password(mesh: Mesh) -> bool:
    """True when the server lets the bootstrap superuser in over TCP with no password at all."""
    with mesh.admin_conn() as conn:
        row = conn.execute("SELECT current_user").fetchone()
    assert row is not None
    try:
        psycopg.connect(
            host="127.0.0.1",
            port=mesh.cluster.port,
            user=str(row[0]),
            dbname="postgres",
            password="",
            connect_timeout=5,
        ).close()
    except psycopg.OperationalError:
        return False
    return True


def _attack(manifest: Path, admin: Path) -> str:
    """Run the provisioner on the attacker's manifest; its refusal ("" when it ran)."""
    try:
        reconcile(manifest, admin)
    except ManifestError as exc:
        return str(exc)
    return ""


def _pinned(mesh: Mesh, **top: object) -> Path:
    mesh.write()
    doc = json.loads(mesh.manifest.read_text())
    doc.update(pin=True, **top)
    mesh.manifest.write_text(json.dumps(doc))
    return mesh.manifest


def test_a_newline_in_the_provision_name_adds_no_rule(mesh: Mesh, hba: Path) -> None:
    mesh.add("app1", "gitea")
    manifest = _pinned(mesh, provision="database\nhost all all 0.0.0.0/0 trust")
    refused = _attack(manifest, mesh.admin)
    assert not _superuser_without_password(mesh)
    assert "provision" in refused and "mesh.json" in refused


def test_a_newline_in_the_provider_name_adds_no_rule(mesh: Mesh, hba: Path) -> None:
    mesh.add("app1", "gitea")
    manifest = _pinned(mesh, provider="db1/postgres\nhost all all 0.0.0.0/0 trust")
    refused = _attack(manifest, mesh.admin)
    assert not _superuser_without_password(mesh)
    assert "provider" in refused


@pytest.mark.parametrize("at", ["::1%lo\t::\ttrust#", "fe80::1%x#", "127.0.0.1\t"])
def test_an_address_with_a_scope_id_is_refused(mesh: Mesh, hba: Path, at: str) -> None:
    entry = mesh.add("app1", "gitea")
    entry["at"] = at
    manifest = _pinned(mesh)
    refused = _attack(manifest, mesh.admin)
    assert "\ttrust" not in hba.read_text() and "%" not in hba.read_text()
    assert "consumers[0].at" in refused
