"""Manifest parsing: "nobody is asked for" is valid; everything broken is a ManifestError."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from meshtui.contracts.manifest_reader import load_manifest, parse_manifest
from meshtui.crypto import secret_digest
from meshtui.errors import ManifestError

DIGEST = secret_digest(b"x" * 43)


def doc(**top: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "version": 1,
        "provision": "database",
        "provider": "db1/postgres",
        "serial": 12,
        "consumers": [
            {
                "as": "gitea_app1_3f9a2c",
                "node": "app1",
                "module": "gitea",
                "at": "10.213.0.3",
                "values": {"database": "gitea"},
                "secret": "app1.gitea.secret",
                "digest": DIGEST,
            }
        ],
    }
    base.update(top)
    return base


def parse(value: Any) -> Any:
    data = value if isinstance(value, bytes) else json.dumps(value).encode()
    return parse_manifest(data, Path("/srv/db1/mesh.json"))


def test_valid_manifest() -> None:
    manifest = parse(doc())
    assert (manifest.version, manifest.provision, manifest.provider, manifest.serial) == (
        1,
        "database",
        "db1/postgres",
        12,
    )
    (consumer,) = manifest.consumers
    assert consumer.login == "gitea_app1_3f9a2c" and consumer.name == "app1/gitea"
    assert dict(consumer.values) == {"database": "gitea"}
    assert manifest.secret_path(consumer) == Path("/srv/db1/app1.gitea.secret")
    with pytest.raises(TypeError):
        consumer.values["database"] = "other"  # type: ignore[index]


def test_nobody_asked_for_is_valid() -> None:
    manifest = parse(doc(consumers=[]))
    assert manifest.consumers == ()


def test_optional_keys_and_unknown_keys() -> None:
    value = doc(future="ignored")
    del value["consumers"][0]["at"]
    del value["consumers"][0]["values"]
    (consumer,) = parse(value).consumers
    assert consumer.at == "" and dict(consumer.values) == {}


def test_secret_may_live_in_a_folder_below() -> None:
    manifest = parse(_consumer_with(secret="grants/app1.gitea.secret"))
    assert manifest.secret_path(manifest.consumers[0]) == Path("/srv/db1/grants/app1.gitea.secret")


def test_unsafe_login_is_not_a_broken_manifest() -> None:
    value = doc()
    value["consumers"][0]["as"] = "x" * 80
    assert parse(value).consumers[0].login == "x" * 80


def _without(key: str) -> dict[str, Any]:
    value = doc()
    del value[key]
    return value


def _consumer_without(key: str) -> dict[str, Any]:
    value = doc()
    del value["consumers"][0][key]
    return value


def _consumer_with(**changes: Any) -> dict[str, Any]:
    value = doc()
    value["consumers"][0].update(changes)
    return value


BROKEN: dict[str, tuple[Any, str]] = {
    "truncated": (json.dumps(doc()).encode()[:-20], "not valid JSON"),
    "empty": (b"", "not valid JSON"),
    "not utf-8": (b'{"version": 1, "x": "\xff"}', "not valid JSON"),
    "NaN": (b'{"version": NaN}', "not valid JSON"),
    "duplicate key": (b'{"version": 1, "version": 1}', "appears twice"),
    "array on top": ([doc()], "must be a JSON object"),
    "version 2": (doc(version=2), "version"),
    "version as text": (doc(version="1"), "version"),
    "version as bool": (doc(version=True), "version"),
    "no version": (_without("version"), "version: is missing"),
    "no consumers": (_without("consumers"), "consumers: is missing"),
    "consumers not a list": (doc(consumers={}), "consumers"),
    "no serial": (_without("serial"), "serial: is missing"),
    "negative serial": (doc(serial=-1), "serial"),
    "no provider": (_without("provider"), "provider"),
    "empty provision": (doc(provision=""), "provision"),
    "consumer without as": (_consumer_without("as"), "consumers[0].as: is missing"),
    "consumer without secret": (_consumer_without("secret"), "consumers[0].secret"),
    "consumer without digest": (_consumer_without("digest"), "consumers[0].digest"),
    "consumer without node": (_consumer_without("node"), "consumers[0].node"),
    "bad digest": (_consumer_with(digest="sha256:00"), "consumers[0].digest"),
    "secret escapes": (_consumer_with(secret="../../etc/shadow"), "must be a file name"),
    "absolute secret": (_consumer_with(secret="/etc/shadow"), "must be a file name"),
    "hidden secret": (_consumer_with(secret=".x"), "must be a file name"),
    "dot-dot inside": (_consumer_with(secret="grants/../../x"), "must be a file name"),
    "value not text": (_consumer_with(values={"database": 5}), "values.database"),
    "consumer not object": (doc(consumers=["gitea"]), "consumers[0]"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_manifests(case: str) -> None:
    value, where = BROKEN[case]
    with pytest.raises(ManifestError) as err:
        parse(value)
    assert "/srv/db1/mesh.json" in str(err.value)
    assert where in str(err.value)


def test_two_consumers_with_one_login() -> None:
    value = doc()
    twin = dict(value["consumers"][0], node="app2", secret="app2.gitea.secret")
    value["consumers"].append(twin)
    with pytest.raises(ManifestError, match=r"consumers\[1\].as: repeats consumers\[0\]"):
        parse(value)


def test_load_manifest_reads_the_file(tmp_path: Path) -> None:
    path = tmp_path / "mesh.json"
    path.write_text(json.dumps(doc()))
    assert load_manifest(path).serial == 12
    with pytest.raises(ManifestError, match="cannot be read"):
        load_manifest(tmp_path / "missing.json")


def test_provisioner_imports_no_controller_inventory_or_ui() -> None:
    code = (
        "import sys, meshtui.provisioner.harness, meshtui.kinds.postgres.adapter;"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('textual', 'rich')"
        " or m.startswith(('meshtui.controller', 'meshtui.inventory', 'meshtui.tui'))];"
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_agents_writer_and_the_provisioners_reader_share_one_shape() -> None:
    """Every key of the one shape (meshtui/protocol/manifest.py), written by the agent's writer, is read
    back by the provisioner's reader: a key added to the shape that either side ignores fails."""
    from typing import get_type_hints

    from meshtui.host.receive.manifest_writer import manifest_text
    from meshtui.protocol.manifest import VERSION, ManifestBody, ManifestLine, secret_name

    line: ManifestLine = {
        "as": "wiki_app2_77aa01",
        "node": "app2",
        "module": "wiki",
        "at": "10.213.0.4",
        "values": {"keys": "wiki:*"},
        "secret": secret_name("app2", "wiki"),
        "digest": DIGEST,
        "keep": True,
        "alt": "b",
    }
    body: ManifestBody = {
        "version": VERSION,
        "provision": "cache",
        "provider": "db1/redis",
        "serial": 7,
        "pin": True,
        "consumers": [line],
        "kind": "redis",
    }
    assert set(body) == set(get_type_hints(ManifestBody)), "every key of the shape is written"
    assert set(line) == set(get_type_hints(ManifestLine))
    parsed = parse_manifest(manifest_text(body), Path("/srv/db1/redis/mesh.json"))
    (consumer,) = parsed.consumers
    read_top = {
        "version": parsed.version,
        "provision": parsed.provision,
        "provider": parsed.provider,
        "serial": parsed.serial,
        "pin": parsed.pin,
        "kind": parsed.kind,
    }
    read_line = {
        "as": consumer.login,
        "node": consumer.node,
        "module": consumer.module,
        "at": consumer.at,
        "values": dict(consumer.values),
        "secret": consumer.secret,
        "digest": consumer.digest,
        "keep": consumer.keep,
        "alt": consumer.alt,
    }
    assert read_top == {k: v for k, v in body.items() if k != "consumers"}
    assert read_line == line


@pytest.mark.parametrize("alt", ["c", "", 1, "A"])
def test_a_line_naming_no_alternate_is_refused_naming_its_key(tmp_path: Path, alt: object) -> None:
    """``alt`` is "a" or "b" (an alternating pair's current login) or absent: anything else is
    the key named, not a line read as if it held a login of its own."""
    from meshtui.host.receive.manifest_writer import manifest_text

    body = {
        "version": 1,
        "provision": "database",
        "provider": "db1/postgres",
        "serial": 1,
        "pin": True,
        "consumers": [
            {
                "as": "gitea_app1_12ab34",
                "node": "app1",
                "module": "gitea",
                "at": "10.0.0.3",
                "values": {},
                "secret": "app1.gitea.secret",
                "digest": DIGEST,
                "alt": alt,
            }
        ],
    }
    data = manifest_text(body)  # type: ignore[arg-type]
    if alt == "":
        assert parse_manifest(data, tmp_path / "mesh.json").consumers[0].alt == ""
        return
    with pytest.raises(ManifestError, match=r"consumers\[0\]\.alt"):
        parse_manifest(data, tmp_path / "mesh.json")
