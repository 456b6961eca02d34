"""An object store in the declaration: its consumers' buckets and rights, refused at ``declare``
when they reach beyond the consumer's own buckets (no live server needed)."""

from __future__ import annotations

from typing import Any

import pytest

from meshtui.controller.plan import declaration
from meshtui.controller.plan.naming import derive_login
from meshtui.errors import DeclarationError
from meshtui.kinds.seaweedfs.values import Grant, default_bucket, grant_for
from tests.fix_mesh import Mesh, consumer, provider


def s3_spec(
    mesh: Mesh, gitea: dict[str, str] | None = None, wiki: dict[str, str] | None = None
) -> dict[str, Any]:
    store = provider("db1/s3", "objects", 8333)
    store["provides"][0].update({"kind": "seaweedfs", "ca": "ca.pem"})
    store["admin"] = "srv/db1/s3/admin.toml"
    mods = {"db1/s3": store}
    for name, values in (("app1/gitea", gitea), ("app2/wiki", wiki)):
        mods[name] = consumer(name, "objects")
        mods[name]["requires"][0].pop("values", None)
        if values is not None:
            mods[name]["requires"][0]["values"] = values
    return mesh.spec(mods)


def test_a_consumer_gets_a_bucket_of_its_own_by_default(mesh: Mesh) -> None:
    decl = declaration.load(mesh.write(s3_spec(mesh)))
    assert decl.modules["db1/s3"].provides[0].kind == "seaweedfs"
    login = derive_login("app1", "gitea")
    assert grant_for(login, {}) == Grant(
        buckets=(default_bucket(login),), rights=("read", "write", "list")
    )
    assert default_bucket(login) == login.replace("_", "-")


@pytest.mark.parametrize(
    ("wiki", "words"),
    [
        ({"bucket": "gitea-lfs"}, "bucket 'gitea-lfs' at db1/s3 is already app1/gitea's"),
        ({"buckets": "wiki gitea-lfs"}, "already app1/gitea's"),
        ({"bucket": "*"}, "no wildcard"),
        ({"bucket": "Wiki"}, "lower-case"),
        ({"rights": "read admin"}, "admin rights are never granted"),
        ({"rights": "read delete"}, "not one a consumer may have"),
        ({"database": "wiki"}, "not an object-store value"),
        ({"bucket": "a", "buckets": "b"}, "keep one"),
        ({"bucket": "10.0.0.1"}, "not an IP address"),
    ],
)
def test_rights_outside_its_own_buckets_are_refused(
    mesh: Mesh, wiki: dict[str, str], words: str
) -> None:
    spec = s3_spec(mesh, gitea={"bucket": "gitea-lfs"}, wiki=wiki)
    with pytest.raises(DeclarationError) as info:
        declaration.load(mesh.write(spec))
    text = str(info.value)
    assert 'modules."app2/wiki".requires[0].values' in text and words in text, text


def test_plain_text_is_not_probed(mesh: Mesh) -> None:
    from meshtui.contracts.probe_types import ProbeOptions, ProbeTarget
    from meshtui.kinds.seaweedfs import probe

    target = ProbeTarget(
        "10.9.9.9", 8333, "x_y_123456", "s" * 43, "b-1", kind="seaweedfs", tls=False
    )
    result = probe.probe(target, ProbeOptions())
    assert result.verdict() == "unknown" and "TLS only" in result.reason()


def test_the_connection_file_names_the_store_never_the_secret() -> None:
    from meshtui.kinds.kind import ConnectionFacts
    from meshtui.kinds.seaweedfs.connection import connection

    facts = ConnectionFacts(
        login="gitea_app1_d1fc15",
        host="10.213.0.2",
        port=8333,
        values={"buckets": "gitea-lfs gitea-avatars"},
        ca="/etc/meshtui/s3-ca.pem",
        tls=True,
        password_file="/etc/gitea/s3.secret",
    )
    made = connection(facts)
    assert made.env["AWS_ACCESS_KEY_ID"] == "gitea_app1_d1fc15"
    assert made.env["AWS_ENDPOINT_URL"] == "https://10.213.0.2:8333"
    assert made.env["AWS_CA_BUNDLE"] == "/etc/meshtui/s3-ca.pem"
    assert made.fields["buckets"] == "gitea-lfs gitea-avatars"
    assert made.dsn == "https://10.213.0.2:8333/gitea-lfs"
    assert "AWS_SECRET_ACCESS_KEY" not in made.env


def test_the_dashboard_names_the_object_store_kind() -> None:
    from datetime import UTC, datetime

    from meshtui.model import PairStatus, State
    from meshtui.tui.pairs import COLUMNS, make_row

    status = PairStatus(
        pair="objects:app1/grafana->db1/s3",
        provision="objects",
        consumer="app1/grafana",
        provider="db1/s3",
        login="grafana_app1_0a1b2c",
        generation=1,
        consumer_generation=1,
        provider_generation=1,
        withdrawn=False,
        state=State.WORKING,
        reason="signed request accepted on grafana-app1-0a1b2c over TLS (certificate verified)",
        probed_at=None,
        rotated_at=None,
        consumer_file="/srv/app1/grafana/s3.secret",
        created_at="2026-12-01T19:00:00+00:00",
        kind="seaweedfs",
    )
    row = make_row(status, datetime.now(UTC))
    assert row.cells[[c.key for c in COLUMNS].index("provider")] == "db1/s3 (seaweedfs)"
