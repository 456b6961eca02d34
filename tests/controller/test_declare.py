"""Declaring a mesh: fan-out, withdrawal, idempotence, and nothing secret at rest."""

from __future__ import annotations

import base64
import contextlib
import sqlite3
from pathlib import Path
from typing import Any

import msgspec
import pytest

from meshtui import crypto
from meshtui.controller.core import Controller
from meshtui.controller.plan import declaration
from meshtui.controller.plan import declare as declare_mod
from meshtui.controller.plan.declare import declare
from meshtui.controller.read.status_image import IMAGE
from meshtui.errors import UnsealError
from meshtui.host.state import identity
from meshtui.inventory import Inventory, Transaction
from meshtui.inventory.rows import ModuleSpec, decode_spec, encode_spec
from meshtui.model import ConnectionFile, Declaration, Module, Offer, OwnSecret, Requirement
from tests.fix_mesh import Mesh, MeshFactory, consumer, modules

EIGHT = [
    "app1/gitea",
    "app1/keycloak",
    "app1/grafana",
    "app1/wiki",
    "app1/chat",
    "app1/ci",
    "app1/registry",
    "app1/metrics",
]
STATUS_FIELDS = {
    "pair",
    "provision",
    "consumer",
    "provider",
    "login",
    "generation",
    "consumer_generation",
    "provider_generation",
    "withdrawn",
    "state",
    "reason",
    "probed_at",
    "rotated_at",
    "holders",
}


def pid(consumer_id: str, provider_id: str = "db1/postgres") -> str:
    return f"database:{consumer_id}->{provider_id}"


def declare_eight(mesh: Mesh) -> Path:
    path = mesh.write(mesh.spec(modules(EIGHT)))
    res = mesh.cli("declare", path)
    assert res.code == 0, res.err
    return path


def test_eight_modules_on_one_node_are_eight_pairs_with_eight_logins(mesh: Mesh) -> None:
    declare_eight(mesh)
    res = mesh.cli("status", "--json")
    assert res.code == 0, res.err
    rows = res.json()
    assert [r["pair"] for r in rows] == sorted(pid(m) for m in EIGHT)
    assert len({r["login"] for r in rows}) == 8
    for r in rows:
        assert set(r) >= STATUS_FIELDS, STATUS_FIELDS - set(r)
        node, module = r["consumer"].split("/")
        assert r["provision"] == "database"
        assert r["provider"] == "db1/postgres"
        assert r["generation"] == 1
        assert r["consumer_generation"] is None and r["provider_generation"] is None
        assert r["withdrawn"] is False
        assert r["state"] == "stale" and "never delivered" in r["reason"]
        assert r["probed_at"] is None and r["rotated_at"] is None
        assert r["login"].startswith(f"{module}_{node}_")
        assert r["holders"] == {
            "consumer": {
                "node": "app1",
                "module": r["consumer"],
                "file": f"/srv/{r['consumer']}/database.password",
            },
            "provider": {"node": "db1", "module": "db1/postgres", "login": r["login"]},
        }
    # and the text listing says the same
    text = mesh.cli("status")
    assert text.code == 0
    assert "8 pairs" in text.out
    for r in rows:
        assert r["pair"] in text.out and r["login"] in text.out


def test_removing_one_module_withdraws_it_and_keeps_the_others_byte_for_byte(
    mesh: Mesh,
) -> None:
    declare_eight(mesh)
    before = mesh.generations()
    pairs_before = {row[0]: row for row in mesh.tables()["pairs"]}
    assert len(before) == 8

    gone = "app1/wiki"
    path = mesh.write(mesh.spec(modules(m for m in EIGHT if m != gone)))
    res = mesh.cli("declare", path)
    assert res.code == 0, res.err
    assert "1 withdrawn" in res.out and f"withdrawn {pid(gone)}" in res.out.replace("  ", " ")

    # every generation row, the withdrawn pair's included, is exactly as it was
    assert mesh.generations() == before
    pairs_after = {row[0]: row for row in mesh.tables()["pairs"]}
    for m in EIGHT:
        if m != gone:
            assert pairs_after[pid(m)] == pairs_before[pid(m)]

    rows = {r["pair"]: r for r in mesh.cli("status", "--json").json()}
    assert len(rows) == 8
    assert rows[pid(gone)]["withdrawn"] is True
    assert rows[pid(gone)]["state"] == "stale"
    assert rows[pid(gone)]["reason"] == "withdrawn; revocation not verified"
    for m in EIGHT:
        if m != gone:
            assert rows[pid(m)]["withdrawn"] is False
            assert rows[pid(m)]["generation"] == 1

    # declaring it again brings it back with a fresh credential; the others stay put
    path = mesh.write(mesh.spec(modules(EIGHT)))
    res = mesh.cli("declare", path)
    assert res.code == 0 and "1 reissued" in res.out
    after = mesh.generations()
    assert {k: v for k, v in after.items() if k != (pid(gone), 2)} == before
    assert after[(pid(gone), 2)][4] != before[(pid(gone), 1)][4]  # new digest
    rows = {r["pair"]: r for r in mesh.cli("status", "--json").json()}
    assert rows[pid(gone)]["withdrawn"] is False and rows[pid(gone)]["generation"] == 2


def test_declaring_the_same_file_twice_changes_nothing(mesh: Mesh) -> None:
    path = declare_eight(mesh)
    tables = mesh.tables()
    assert len(tables["audit"]) == 1
    res = mesh.cli("declare", path)
    assert res.code == 0, res.err
    assert "0 new, 0 reissued, 0 changed, 0 withdrawn, 8 unchanged" in res.out
    assert "push" not in res.out
    assert mesh.tables() == tables
    assert mesh.cli("declare", path, "--json").json()["unchanged"] == sorted(pid(m) for m in EIGHT)
    assert mesh.tables() == tables


def test_fan_out_is_per_consumer_module(mesh: Mesh) -> None:
    three = ["app1/a", "app1/b", "app1/c"]
    path = mesh.write(mesh.spec(modules(three)))
    assert mesh.cli("declare", path).code == 0
    rows = mesh.cli("status", "--json").json()
    assert [r["pair"] for r in rows] == [pid(m) for m in three]
    assert len({r["login"] for r in rows}) == 3
    gens = mesh.generations()
    assert len(gens) == 3
    assert len({g[4] for g in gens.values()}) == 3  # three distinct digests
    app1, db1 = mesh.keys("app1"), mesh.keys("db1")
    secrets = {app1.unseal(g[2]) for g in gens.values()}
    assert len(secrets) == 3
    for g in gens.values():
        assert db1.unseal(g[3]) == app1.unseal(g[2])


def test_a_module_requiring_two_providers_gets_a_pair_with_each(mesh_factory: MeshFactory) -> None:
    mesh = mesh_factory({"db1": "10.0.0.2", "db2": "10.0.0.3", "app1": "10.0.0.4"})
    mods = modules([], "db1/postgres") | modules([], "db2/postgres")
    mods["app1/gitea"] = {
        "requires": [
            {"name": "database", "from": "db1/postgres", "file": "/srv/a.password"},
            {"name": "database", "from": "db2/postgres", "file": "/srv/b.password"},
        ]
    }
    res = mesh.cli("declare", mesh.write(mesh.spec(mods)))
    assert res.code == 0, res.err
    rows = mesh.cli("status", "--json").json()
    assert [r["pair"] for r in rows] == [
        pid("app1/gitea", "db1/postgres"),
        pid("app1/gitea", "db2/postgres"),
    ]


def test_every_generation_unseals_and_no_plaintext_rests_in_the_inventory(mesh: Mesh) -> None:
    path = mesh.write(mesh.spec(modules([*EIGHT, "app2/gitea"])))
    ctl = Controller.open(mesh.state)
    try:
        ctl.declare(path)
        # a second declaration with one module gone and one new, so the WAL holds churn
        ctl.declare(mesh.write(mesh.spec(modules([*EIGHT[1:], "app2/gitea", "app2/wiki"]))))
        plaintexts = _unseal_all(mesh)
        assert len(plaintexts) == 10
        files = [p for p in mesh.state.iterdir() if p.name.startswith("inventory.db")]
        assert any(p.name.endswith("-wal") for p in files)  # searched while a writer is open
        _assert_absent(plaintexts, files)
    finally:
        ctl.close()
    files = [p for p in mesh.state.iterdir() if p.name.startswith("inventory.db")]
    _assert_absent(plaintexts, files)


def test_the_status_image_holds_no_credential_seal_or_digest(mesh: Mesh) -> None:
    """The status image a read leaves in the state folder holds what ``status`` prints: no
    credential (in any form), none of its sealed blobs and no digest of one."""
    with Controller.open(mesh.state) as ctl:
        ctl.declare(mesh.write(mesh.spec(modules([*EIGHT, "app2/gitea"]))))
        assert len(ctl.status()) == 9
    image = mesh.state / IMAGE
    assert image.exists()
    _assert_absent(_unseal_all(mesh), [image])
    raw = image.read_bytes()
    for row in mesh.generations().values():
        for sealed in (row[2], row[3]):
            assert base64.b64encode(sealed) not in raw and sealed.hex().encode() not in raw
        assert row[4].encode() not in raw and row[4].split(":")[1].encode() not in raw


def _unseal_all(mesh: Mesh) -> list[bytes]:
    out = []
    with Inventory.open(mesh.inventory, read_only=True) as inv:
        pairs = {p["id"]: p for p in inv.pairs()}
        for (pair, _gen), row in mesh.generations().items():
            c_node = pairs[pair]["consumer"].split("/")[0]
            p_node = pairs[pair]["provider"].split("/")[0]
            secret = mesh.keys(c_node).unseal(row[2])
            assert mesh.keys(p_node).unseal(row[3]) == secret
            assert crypto.secret_digest(secret) == row[4]
            out.append(secret)
    return out


def _assert_absent(plaintexts: list[bytes], files: list[Path]) -> None:
    for f in files:
        raw = f.read_bytes()
        for secret in plaintexts:
            for form in (secret, base64.b64encode(secret), secret.hex().encode()):
                assert form not in raw, f"a credential rests in {f.name}"


def test_changed_values_keep_the_credential(mesh: Mesh) -> None:
    path = mesh.write(mesh.spec(modules(["app1/gitea"])))
    assert mesh.cli("declare", path).code == 0
    gens = mesh.generations()
    mods = modules([])
    mods["app1/gitea"] = consumer("app1/gitea", database="other")
    res = mesh.cli("declare", mesh.write(mesh.spec(mods)))
    assert res.code == 0 and "1 changed" in res.out
    assert mesh.generations() == gens
    with Inventory.open(mesh.inventory, read_only=True) as inv:
        (row,) = inv.pairs()
    assert row["values"] == {"database": "other"} and row["generation"] == 1


def test_a_rekeyed_node_gets_fresh_generations_sealed_to_its_new_key(mesh: Mesh) -> None:
    path = mesh.write(mesh.spec(modules(["app1/gitea", "app2/gitea"])))
    assert mesh.cli("declare", path).code == 0
    before = mesh.generations()
    # app1 is reinstalled: new keys in a new folder, the declaration points there
    old_keys = mesh.keys("app1")
    fresh = mesh.root / "nodes" / "app1-new"
    identity.init("app1", fresh, mesh.state / "controller.pub")
    spec = mesh.spec(modules(["app1/gitea", "app2/gitea"]))
    spec["nodes"]["app1"]["keys"] = "nodes/app1-new/node.pub"
    res = mesh.cli("declare", mesh.write(spec))
    assert res.code == 0, res.err
    assert f"reissued {pid('app1/gitea')}" in res.out.replace("  ", " ")
    after = mesh.generations()
    assert after[(pid("app2/gitea"), 1)] == before[(pid("app2/gitea"), 1)]
    assert (pid("app2/gitea"), 2) not in after
    new = after[(pid("app1/gitea"), 2)]
    new_keys = crypto.load_private(fresh / "node.key")
    assert crypto.secret_digest(new_keys.unseal(new[2])) == new[4]
    with pytest.raises(UnsealError):
        old_keys.unseal(new[2])


def test_a_failed_declare_writes_nothing(mesh: Mesh, monkeypatch: pytest.MonkeyPatch) -> None:
    decl = declaration.load(mesh.write(mesh.spec(modules(EIGHT))))
    with Inventory.open(mesh.inventory) as inv:
        empty = mesh.tables()

        def broken_audit(*args: object, **kwargs: object) -> None:
            raise RuntimeError("disk on fire")

        monkeypatch.setattr(Transaction, "audit", broken_audit)
        with pytest.raises(RuntimeError, match="disk on fire"):
            declare(inv, decl)
    assert mesh.tables() == empty


def test_declare_never_loses_a_concurrent_write(
    mesh: Mesh, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process (a rotation) writing while declare seals must not be overwritten."""
    assert mesh.cli("declare", mesh.write(mesh.spec(modules(["app1/gitea"])))).code == 0
    mods = modules(["app1/new"])
    mods["app1/gitea"] = consumer("app1/gitea", database="renamed")  # "changed"
    path = mesh.write(mesh.spec(mods))
    real_seal = declare_mod.seal_generation
    raced: list[str] = []

    def racing_seal(*args: Any) -> Any:
        try:
            with contextlib.closing(sqlite3.connect(mesh.inventory, timeout=0.2)) as other:
                other.execute(
                    "UPDATE pairs SET generation = 2, rotated_at = 'then' WHERE id = ?",
                    [pid("app1/gitea")],
                )
                other.commit()
            raced.append("wrote")
        except sqlite3.OperationalError as exc:
            assert "locked" in str(exc)
            raced.append("locked")
        return real_seal(*args)

    monkeypatch.setattr(declare_mod, "seal_generation", racing_seal)
    with Controller.open(mesh.state) as ctl:
        result = ctl.declare(path)
    assert result.changed == [pid("app1/gitea")] and result.new == [pid("app1/new")]
    with Inventory.open(mesh.inventory, read_only=True) as inv:
        (row,) = inv.pairs([pid("app1/gitea")])
    assert row["values"] == {"database": "renamed"}
    assert row["generation"] == (2 if raced == ["wrote"] else 1), (raced, row)


def test_module_specs_follow_the_declaration_and_gone_modules_are_marked(mesh: Mesh) -> None:
    assert (
        mesh.cli("declare", mesh.write(mesh.spec(modules(["app1/gitea", "app1/wiki"])))).code == 0
    )
    mods = modules(["app1/gitea"])
    mods["db1/postgres"]["admin"] = "/etc/other.conninfo"
    path = mesh.write(mesh.spec(mods))
    assert mesh.cli("declare", path).code == 0
    with Inventory.open(mesh.inventory, read_only=True) as inv:
        got = inv.modules()
        events = inv.events()
    assert got["db1/postgres"]["spec"].admin == "/etc/other.conninfo"
    assert got["app1/wiki"]["declared"] == 0 and got["app1/gitea"]["declared"] == 1
    assert len(events) == 2
    tables = mesh.tables()
    assert mesh.cli("declare", path).code == 0
    assert mesh.tables() == tables
    mods["db1/postgres"]["admin"] = "/etc/third.conninfo"
    assert mesh.cli("declare", mesh.write(mesh.spec(mods))).code == 0
    assert len(mesh.tables()["audit"]) == 3


def test_pairs_written_in_chunks_are_all_there_and_a_failure_after_some_writes_none(
    mesh: Mesh, monkeypatch: pytest.MonkeyPatch
) -> None:
    """declare writes new pairs and their sealed generations a few at a time (its peak memory
    at 10,000 pairs); with a chunk of 3 among eight pairs every pair and generation is still
    written, once, and a failure after two chunks leaves the inventory as it was."""
    monkeypatch.setattr(declare_mod, "WRITE_CHUNK", 3)
    decl = declaration.load(mesh.write(mesh.spec(modules(EIGHT))))
    with Inventory.open(mesh.inventory) as inv:
        empty = mesh.tables()
        with monkeypatch.context() as broken:
            broken.setattr(Transaction, "audit", lambda *a, **k: (_ for _ in ()).throw(OSError))
            with pytest.raises(OSError):
                declare(inv, decl)
        assert mesh.tables() == empty
        result = declare(inv, decl)
        assert sorted(result.new) == sorted(pid(m) for m in EIGHT)
        assert sorted(p["id"] for p in inv.pairs()) == sorted(pid(m) for m in EIGHT)
        conn = inv._db.conn
        gens = conn.execute("SELECT pair, generation FROM generations ORDER BY pair").fetchall()
        assert gens == [(pid(m), 1) for m in sorted(EIGHT, key=pid)]


STORED_SPECS = {
    # each module's spec exactly as declare stored it before the spec was built as a ModuleSpec
    "db1/postgres": '{"admin": "/etc/a.conninfo", "grants": {"database": "/g"}, "pin": true, '
    '"provides": [{"name": "database", "port": 5432}], "provisioner": ["builtin:postgres"], '
    '"receives": {"database": "/m"}, "requires": []}',
    "cache1/redis": '{"admin": null, "grants": {}, "provides": [{"ca": null, "kind": "redis", '
    '"name": "cache", "port": 6379, "tls": true}, {"ca": "/ca.pem", "kind": "redis", "name": '
    '"plain", "port": 6380, "tls": false}], "provisioner": ["builtin:postgres"], "receives": {}, '
    '"requires": []}',
    "app1/gitea": '{"admin": null, "grants": {}, "provides": [], "provisioner": '
    '["builtin:postgres"], "receives": {}, "requires": [{"file": "/c/db", "name": "database"}, '
    '{"connection": {"file": "/c/conn.env", "format": "env"}, "file": "/c/cache", "name": '
    '"cache"}, {"connection": {"ca": "/ca.pem", "file": "/c/conn.json", "format": "json"}, '
    '"file": "/c/plain", "name": "plain"}], "secrets": [{"alphabet": "urlsafe", "file": '
    '"/s/session", "group": null, "length": 32, "mode": "0600", "name": "session", "owner": '
    'null, "reload": ["systemctl", "reload", "gitea"], "supplied": false}, {"alphabet": '
    '"urlsafe", "file": "/s/token", "group": "git", "length": 32, "max_age": 86400.0, "mode": '
    '"0640", "name": "token", "owner": "git", "reload": [], "supplied": true}, {"alphabet": '
    '"urlsafe", "file": "/s/jwt", "group": null, "length": 32, "max_age": 3600.0, "mode": "0600", '
    '"name": "jwt", "owner": null, "reload": [], "supplied": true}]}',
}


def test_a_module_spec_is_stored_byte_for_byte_as_inventories_already_hold_it() -> None:
    """Every optional part of a spec (pin, another kind's offers, connection files, own secrets
    with and without max_age) is written as already stored specs hold it, so declaring an
    unchanged module over an existing inventory compares equal and writes nothing; and a stored
    spec decoded and encoded again is the same bytes."""
    secrets = (
        OwnSecret("session", "/s/session", reload=("systemctl", "reload", "gitea")),
        OwnSecret("token", "/s/token", supplied=True, owner="git", group="git", mode="0640",
                  max_age=86400.0),
        OwnSecret("jwt", "/s/jwt", supplied=True, max_age=3600.0),
    )  # fmt: skip
    requires = (
        Requirement("database", "/c/db"),
        Requirement("cache", "/c/cache", connection=ConnectionFile("/c/conn.env", "env")),
        Requirement("plain", "/c/plain", connection=ConnectionFile("/c/conn.json", "json",
                                                                   ca="/ca.pem")),
    )  # fmt: skip
    mods = {
        "db1/postgres": Module(node="db1", name="postgres", provides=(Offer("database", 5432),),
                               receives={"database": "/m"}, grants={"database": "/g"},
                               admin="/etc/a.conninfo", pin=True),
        "cache1/redis": Module(node="cache1", name="redis", provides=(
            Offer("cache", 6379, kind="redis"),
            Offer("plain", 6380, kind="redis", ca="/ca.pem", tls=False),
        )),
        "app1/gitea": Module(node="app1", name="gitea", requires=requires, secrets=secrets),
    }  # fmt: skip
    decl = Declaration(source="x.toml", nodes={}, modules=mods, pairs=())
    for mid, stored in STORED_SPECS.items():
        assert declare_mod._module_spec(decl, mid) == stored, mid
        assert encode_spec(decode_spec(mid, stored)) == stored, mid
        later = _SpecWithALaterKey(**msgspec.structs.asdict(decode_spec(mid, stored)))
        assert encode_spec(later) == stored, mid  # a key added later, at its default: left out


class _SpecWithALaterKey(ModuleSpec, frozen=True, kw_only=True, omit_defaults=True):
    """A spec shape grown by a key with a default, as a later change to the spec adds one."""

    later: list[str] = []
