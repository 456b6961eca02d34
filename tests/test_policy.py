"""Policy in the declaration: durations, the three levels and their sources, clear errors, and
the effective policy stored in the inventory for status and watch."""

from __future__ import annotations

from typing import Any

import pytest

from meshtui.controller.core import Controller
from meshtui.controller.plan import declaration
from meshtui.errors import DeclarationError
from meshtui.model import (
    DEFAULT_PROBE_EVERY_S,
    Policy,
    PolicySource,
    format_duration,
    parse_duration,
)
from tests.fix_mesh import Mesh, modules

GITEA = "database:app1/gitea->db1/postgres"
WIKI = "database:app1/wiki->db1/postgres"
OTHER = "database:app2/grafana->db1/postgres"


def spec(mesh: Mesh) -> dict[str, Any]:
    return mesh.spec(modules(["app1/gitea", "app1/wiki", "app2/grafana"]))


def policies(mesh: Mesh, s: dict[str, Any], extra: str = "") -> dict[str, Policy]:
    decl = declaration.load(mesh.write(s, extra=extra))
    return {p.id: p.policy for p in decl.pairs}


@pytest.mark.parametrize(
    ("text", "seconds"), [("90d", 90 * 86400), ("12h", 43200), ("5m", 300), ("30s", 30)]
)
def test_durations_parse_and_format_back(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds
    assert format_duration(seconds) == text


@pytest.mark.parametrize("text", ["", "0d", "5", "5 m", "1.5h", "-3d", "3w", "d", "05m", "3D"])
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


@pytest.mark.parametrize("text", ["0s", "0d", "00m"])
def test_a_duration_of_nothing_is_refused_as_such(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration longer than 0"):
        parse_duration(text)


def test_no_policy_means_no_rotation_and_default_probe(mesh: Mesh) -> None:
    for policy in policies(mesh, spec(mesh)).values():
        assert policy == Policy(None, DEFAULT_PROBE_EVERY_S)


def test_consumer_beats_provider_beats_global_per_key(mesh: Mesh) -> None:
    s = spec(mesh)
    s["modules"]["db1/postgres"]["rotate_every"] = "30d"
    s["modules"]["app1/gitea"]["requires"][0]["rotate_every"] = "7d"
    s["modules"]["app1/gitea"]["requires"][0]["probe_every"] = "1m"
    got = policies(mesh, s, '\n[policy]\nrotate_every = "90d"\nprobe_every = "10m"\n')
    assert got[GITEA] == Policy(7 * 86400, 60, PolicySource.CONSUMER, PolicySource.CONSUMER)
    assert got[WIKI] == Policy(30 * 86400, 600, PolicySource.PROVIDER, PolicySource.GLOBAL)
    assert got[WIKI].describe() == "rotate 30d (provider), probe 10m (global)"


def test_short_rotation_without_probe_every_probes_as_often(mesh: Mesh) -> None:
    got = policies(mesh, spec(mesh), '\n[policy]\nrotate_every = "30s"\n')
    assert got[GITEA].probe_every == 30 and got[GITEA].rotate_every == 30


@pytest.mark.parametrize(
    ("where", "extra", "key", "words"),
    [
        ("global", 'rotate_every = "90 days"', "policy.rotate_every", "not a duration"),
        ("global", "rotate_every = 90", "policy.rotate_every", "duration string"),
        ("global", 'rotate_evry = "90d"', "policy.rotate_evry", "not a known key"),
        ("global", 'rotate_every = "1h"\nprobe_every = "2h"', "policy.probe_every", "longer"),
        ("provider", 'probe_every = "5x"', 'modules."db1/postgres".probe_every', "not a duration"),
        ("consumer", 'rotate_every = "0s"', 'modules."app1/gitea".requires[0].rotate_every', ""),
        ("module", 'rotate_every = "1d"', 'modules."app1/gitea".rotate_every', "provides nothing"),
    ],
)
def test_bad_policy_is_a_clear_error_naming_file_and_key(
    mesh: Mesh, where: str, extra: str, key: str, words: str
) -> None:
    s = spec(mesh)
    tail = ""
    k, _, v = extra.partition(" = ")
    if where == "global":
        tail = "\n[policy]\n" + extra + "\n"
    elif where == "provider":
        s["modules"]["db1/postgres"][k] = v.strip('"')
    elif where == "consumer":
        s["modules"]["app1/gitea"]["requires"][0][k] = v.strip('"')
    else:
        s["modules"]["app1/gitea"][k] = v.strip('"')
    path = mesh.write(s, extra=tail)
    with pytest.raises(DeclarationError) as err:
        declaration.load(path)
    assert err.value.file == str(path)
    assert err.value.key == key
    assert words in str(err.value)


def test_probe_longer_than_an_inherited_rotation_names_both_sources(mesh: Mesh) -> None:
    s = spec(mesh)
    s["modules"]["db1/postgres"]["rotate_every"] = "1h"
    with pytest.raises(DeclarationError) as err:
        declaration.load(mesh.write(s, extra='\n[policy]\nprobe_every = "2h"\n'))
    assert "probe_every 2h (global) is longer than rotate_every 1h (provider)" in str(err.value)
    assert err.value.fix


def test_declare_stores_effective_policy_and_a_change_is_recorded(mesh: Mesh) -> None:
    s = spec(mesh)
    s["modules"]["db1/postgres"]["rotate_every"] = "30d"
    path = mesh.write(s)
    with Controller.open(mesh.state) as ctl:
        ctl.declare(path)
        stored = ctl.inventory.policies()
        assert stored[GITEA] == Policy(30 * 86400, 300, PolicySource.PROVIDER)
        again = ctl.declare(path)
        assert not again.touched
        s["modules"]["app1/gitea"]["requires"][0]["rotate_every"] = "1d"
        changed = ctl.declare(mesh.write(s))
        assert changed.changed == [GITEA] and GITEA not in changed.unchanged
        assert ctl.inventory.policies()[GITEA].rotate_source is PolicySource.CONSUMER
        assert ctl.inventory.events()[-1]["kind"] == "declare"
        assert ctl.verify_chain().ok


def test_bad_policy_loses_nothing(mesh: Mesh) -> None:
    s = spec(mesh)
    good = mesh.write(s)
    with Controller.open(mesh.state) as ctl:
        ctl.declare(good)
    before = mesh.tables()
    bad = mesh.write(s, name="bad.toml", extra='\n[policy]\nrotate_every = "soon"\n')
    result = mesh.cli("declare", bad)
    assert result.code == 2 and "policy.rotate_every" in result.err
    assert mesh.tables() == before
