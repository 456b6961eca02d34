"""The Redis provisioner against a real Redis 7 with TLS and an aclfile, mirroring the
PostgreSQL ones: create, rotate, drift, removal, unmanaged users, bad input, persistence."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pytest
import redis

from meshtui.contracts.adapter import Scope
from meshtui.contracts.provider_files import SecretFiles
from meshtui.errors import ManifestError, ProvisionError
from meshtui.kinds.redis import lab as lab_redis
from meshtui.kinds.redis.adapter import RedisAdapter
from meshtui.provisioner.harness import inspect, reconcile

from .conftest import (
    PROVIDER,
    PROVISION,
    RMesh,
    can_auth,
    client_as,
    free_port,
    outcomes,
    run_redis,
)


def test_create_then_idle_run_writes_nothing(rmesh: RMesh) -> None:
    rmesh.add("app1", "worker")
    rmesh.add("app2", "web", values={"keys": "web:* shared:*", "channels": "news.*"})
    report = rmesh.reconcile()
    assert report.ok, report.lines()
    assert set(outcomes(report).values()) == {"created"}
    assert rmesh.can_auth("app1", "worker") and rmesh.can_auth("app2", "web")
    # an idle run: "unchanged", and not one write command reached the server
    with rmesh.redis() as admin:
        before = admin.info("stats")["total_commands_processed"]
        stats_before = admin.info("commandstats")
    report = rmesh.reconcile()
    assert set(outcomes(report).values()) == {"unchanged"}, report.lines()
    with rmesh.redis() as admin:
        stats = admin.info("commandstats")
    assert stats.get("cmdstat_acl|setuser") == stats_before.get("cmdstat_acl|setuser")
    assert "cmdstat_acl|save" not in stats or stats["cmdstat_acl|save"] == stats_before.get(
        "cmdstat_acl|save"
    )
    assert before > 0


def test_rules_follow_the_values(rmesh: RMesh) -> None:
    rmesh.add("app1", "worker")
    rmesh.add("app2", "web", values={"keys": "web:*", "commands": "+@read"})
    assert rmesh.reconcile().ok
    worker = client_as(
        rmesh.server, rmesh.login_of("app1", "worker"), rmesh.password("app1", "worker")
    )
    web = client_as(rmesh.server, rmesh.login_of("app2", "web"), rmesh.password("app2", "web"))
    with worker, web:
        login = rmesh.login_of("app1", "worker")
        worker.set(f"{login}:a", "1")  # default keys: "<login>:*"
        with pytest.raises(redis.exceptions.NoPermissionError):
            worker.set("other:a", "1")
        with pytest.raises(redis.exceptions.NoPermissionError):
            worker.flushall()  # @dangerous is excluded by default
        with pytest.raises(redis.exceptions.NoPermissionError):
            worker.acl_setuser("x")  # and @admin
        assert web.get("web:x") is None
        with pytest.raises(redis.exceptions.NoPermissionError):
            web.set("web:x", "1")  # read only


def test_drift_is_restored(rmesh: RMesh) -> None:
    rmesh.add("app1", "worker")
    assert rmesh.reconcile().ok
    login = rmesh.login_of("app1", "worker")
    with rmesh.redis() as admin:
        admin.execute_command("ACL", "SETUSER", login, "resetpass", ">changed-behind-our-back")
    assert not rmesh.can_auth("app1", "worker")
    report = rmesh.reconcile()
    assert outcomes(report) == {login: "updated"}, report.lines()
    assert rmesh.can_auth("app1", "worker")
    assert not rmesh.can_auth("app1", "worker", "changed-behind-our-back")
    # a rule widened behind our back is drift too, and so is a selector added to the user
    for change in (["allkeys"], ["(~* +@all)"], ["nopass"], [">a-second-password"]):
        with rmesh.redis() as admin:
            admin.execute_command("ACL", "SETUSER", login, *change)
        assert outcomes(rmesh.reconcile()) == {login: "updated"}, change
        with rmesh.redis() as admin:
            user = admin.acl_getuser(login)
        assert user["keys"] == [f"~{login}:*"] and len(user["selectors"]) == 1, change
        assert len(user["passwords"]) == 1 and "nopass" not in user["flags"], change
    assert rmesh.can_auth("app1", "worker")
    assert not rmesh.can_auth("app1", "worker", "a-second-password")


def test_removal_keeps_keys_and_ends_sessions(rmesh: RMesh) -> None:
    rmesh.add("app1", "worker")
    assert rmesh.reconcile().ok
    login, password = rmesh.login_of("app1", "worker"), rmesh.password("app1", "worker")
    live = client_as(rmesh.server, login, password)
    live.set(f"{login}:kept", "yes")
    rmesh.drop("app1", "worker")
    report = rmesh.reconcile()
    assert outcomes(report) == {login: "removed"}, report.lines()
    with pytest.raises(redis.exceptions.ConnectionError):
        live.get(f"{login}:kept")  # its connection was ended
    live.close()
    assert not can_auth(rmesh.server, login, password)
    with rmesh.redis() as admin:
        assert login not in admin.acl_users()
        assert admin.get(f"{login}:kept") == "yes"


def test_unmanaged_users_are_never_touched(rmesh: RMesh) -> None:
    with rmesh.redis() as admin:
        admin.execute_command(
            "ACL", "SETUSER", "handmade", "on", ">hand-made-password", "~*", "+get"
        )
        admin.execute_command("ACL", "SETUSER", "lonely", "on", ">another", "~*", "+get")
        before = {u: admin.acl_getuser(u) for u in admin.acl_users()}
    rmesh.add("app1", "worker", login="handmade")
    rmesh.add("app2", "web", login="default")
    rmesh.add("app3", "ops", login=lab_redis.ADMIN_USER)
    report = rmesh.reconcile()
    got = outcomes(report)
    assert got == {"handmade": "refused", "default": "refused", lab_redis.ADMIN_USER: "refused"}
    reasons = {o.login: o.reason for o in report.outcomes}
    assert "did not make" in reasons["handmade"]
    with rmesh.redis() as admin:
        after = {u: admin.acl_getuser(u) for u in admin.acl_users()}
    assert after == before  # nothing changed, and nothing removed ("lonely" is not ours)


def test_other_scope_is_not_ours(rmesh: RMesh) -> None:
    rmesh.add("app1", "worker")
    assert rmesh.reconcile(provision="queue").ok
    login = rmesh.login_of("app1", "worker")
    report = rmesh.reconcile()  # now for "cache": the user belongs to "queue"
    assert outcomes(report) == {login: "refused"}
    assert "made by meshtui for queue" in report.outcomes[0].reason
    rmesh.drop("app1", "worker")
    report = rmesh.reconcile()  # "cache" never removes "queue"'s user
    assert outcomes(report) == {}
    with rmesh.redis() as admin:
        assert login in admin.acl_users()


def test_broken_manifest_changes_nothing(rmesh: RMesh) -> None:
    rmesh.add("app1", "worker")
    assert rmesh.reconcile().ok
    with rmesh.redis() as admin:
        users = admin.acl_list()
    for text in (
        "{",
        json.dumps(
            {
                "version": 1,
                "kind": "memcached",
                "provision": "cache",
                "provider": PROVIDER,
                "serial": 3,
                "consumers": [],
            }
        ),
    ):
        rmesh.manifest.write_text(text)
        with pytest.raises(ManifestError):
            reconcile(rmesh.manifest, rmesh.admin)
    with rmesh.redis() as admin:
        assert admin.acl_list() == users


def test_missing_secret_waits_and_bad_names_are_refused(rmesh: RMesh) -> None:
    rmesh.add("app1", "worker", write_secret=False)
    rmesh.add("app2", "web", login="has space")
    rmesh.add("app3", "ops", values={"commands": "+@admin"})
    rmesh.add("app4", "bad", values={"colour": "blue"})
    report = rmesh.reconcile()
    got = outcomes(report)
    assert got == {
        "worker_app1_x": "waiting",
        "has space": "refused",
        "ops_app3_x": "refused",
        "bad_app4_x": "refused",
    }, report.lines()
    with rmesh.redis() as admin:
        users = ["default", lab_redis.ADMIN_USER, lab_redis.LAB_USER]
        assert sorted(admin.acl_users()) == sorted(users)


def test_persisted_across_a_restart(rmesh: RMesh) -> None:
    rmesh.add("app1", "worker")
    assert rmesh.reconcile().ok
    text = rmesh.server.aclfile.read_text()
    assert rmesh.login_of("app1", "worker") in text
    assert rmesh.server.aclfile.stat().st_mode & 0o777 == 0o600  # rewritten by ACL SAVE
    rmesh.server.stop()
    rmesh.server.start()
    assert rmesh.can_auth("app1", "worker")
    assert set(outcomes(rmesh.reconcile()).values()) == {"unchanged"}


def test_a_server_that_cannot_persist_is_reported(tmp_path: Path) -> None:
    port = free_port()
    proc = run_redis(tmp_path, "--port", str(port), "--bind", "127.0.0.1")
    try:
        for _ in range(100):
            try:
                redis.Redis(port=port).execute_command(
                    "ACL", "SETUSER", "boss", "on", ">boss-pw", "~*", "&*", "+@all"
                )
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        adapter = RedisAdapter(
            f"redis://boss:boss-pw@127.0.0.1:{port}/0", Scope(PROVIDER, PROVISION)
        )
        try:
            done = adapter.create("worker_app1_x", "s3cret-s3cret", {})
        finally:
            adapter.close()
        assert done.outcome == "created"
        assert "held in memory only" in done.reason and "aclfile" in done.reason
    finally:
        proc.terminate()
        proc.wait(10)


def test_a_wrong_admin_password_is_said_at_once_without_the_url(rmesh: RMesh) -> None:
    url = rmesh.server.admin_file.read_text()
    password = url.split(":", 2)[2].split("@", 1)[0]
    started = time.monotonic()
    with pytest.raises(ProvisionError) as info:
        RedisAdapter(url.replace(password, "not-" + password), Scope(PROVIDER, PROVISION))
    assert time.monotonic() - started < 3
    assert password not in str(info.value) and "not-" not in str(info.value)
    assert "admin" in str(info.value)


@pytest.mark.parametrize(
    "url",
    [
        "rediss://127.0.0.1:6379",  # no user: that is "default" with no password
        "rediss://default:pw@127.0.0.1:6379",
        "rediss://admin@127.0.0.1:6379",
        "host=/run/postgresql user=postgres",
    ],
)
def test_admin_url_must_name_an_admin_with_a_password(url: str) -> None:
    with pytest.raises(ProvisionError) as info:
        RedisAdapter(url, Scope(PROVIDER, PROVISION))
    assert "pw" not in str(info.value).replace("password", "")


def test_the_rules_hash_is_what_redis_prints(rmesh: RMesh) -> None:
    """The marker's rules hash is learned from the read-back, so inspect sees it intact."""
    for i in range(5):
        rmesh.add(f"app{i}", "worker", values={"commands": "+@read +@write"} if i % 2 else {})
    assert rmesh.reconcile().ok
    assert set(outcomes(rmesh.reconcile()).values()) == {"unchanged"}
    with rmesh.redis() as admin:
        for line in admin.acl_list():
            if "worker_" in line:
                sha = line.split("#", 1)[1].split(" ", 1)[0]
                assert len(sha) == 64 and sha != hashlib.sha256(b"").hexdigest()


def test_a_batch_is_pipelined_and_a_bad_login_costs_only_itself(rmesh: RMesh) -> None:
    for node in ("app1", "app2", "app3", "app4"):
        rmesh.add(node, "worker")
    rmesh.add("app5", "web", values={"keys": "web:* shared:*", "channels": "news.*"})
    rmesh.add("app6", "odd", values={"commands": "+@read +@nosuchcategory"})
    report = rmesh.reconcile()
    got = outcomes(report)
    assert got.pop("odd_app6_x") == "refused", report.lines()
    assert "no ACL category @nosuchcategory" in report.outcomes[-1].reason
    assert set(got.values()) == {"created"}, report.lines()
    for key in rmesh.consumers:
        node, module = key.split("/")
        assert rmesh.can_auth(node, module) is (module != "odd")
    rmesh.rotate("app2", "worker")
    rmesh.rotate("app5", "web")
    report = rmesh.reconcile()  # a fresh session: the rule forms are learned again
    assert outcomes(report)["worker_app2_x"] == "updated"
    assert outcomes(report)["web_app5_x"] == "updated"
    assert rmesh.can_auth("app2", "worker") and rmesh.can_auth("app5", "web")
    assert set(outcomes(rmesh.reconcile()).values()) - {"refused"} == {"unchanged"}


def test_each_secret_file_is_read_once_per_run(
    rmesh: RMesh, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[str] = []
    real = SecretFiles.read

    def counted(self: SecretFiles, name: str) -> bytes | str:
        reads.append(name)
        return real(self, name)

    monkeypatch.setattr(SecretFiles, "read", counted)
    for node in ("app1", "app2", "app3"):
        rmesh.add(node, "worker")
    rmesh.add("app4", "web", write_secret=False)
    assert set(outcomes(rmesh.reconcile()).values()) == {"created", "waiting"}
    assert sorted(reads) == sorted(c["secret"] for c in rmesh.consumers.values())
    reads.clear()
    rmesh.rotate("app1", "worker")
    report = rmesh.reconcile()
    assert outcomes(report)["worker_app1_x"] == "updated", report.lines()
    assert sorted(reads) == sorted(c["secret"] for c in rmesh.consumers.values())


def test_the_read_only_inspect_picks_the_redis_adapter_by_itself(rmesh: RMesh) -> None:
    rmesh.add("app1", "worker")
    rmesh.add("app2", "web", write_secret=False)
    assert outcomes(rmesh.reconcile())["worker_app1_x"] == "created"
    with rmesh.redis() as admin:
        admin.execute_command("ACL", "SETUSER", "worker_app1_x", ">changed-behind-our-back")
        before = admin.info("commandstats")
    found = {f.login: f.verdict for f in inspect(rmesh.manifest, rmesh.admin)}
    assert found == {"worker_app1_x": "changed", "web_app2_x": "waiting"}
    with rmesh.redis() as admin:
        after = admin.info("commandstats")
    assert after.get("cmdstat_acl|setuser") == before.get("cmdstat_acl|setuser")
