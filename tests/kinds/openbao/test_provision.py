"""The OpenBao adapter against a real OpenBao: AppRole roles set every time, confined, removed
with their tokens revoked, never touching what meshtui did not make."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from meshtui.errors import ProvisionError
from meshtui.kinds.openbao.adapter import OpenBaoAdapter
from meshtui.kinds.openbao.client import APPROLE_MOUNT, KV_MOUNT, Bao
from meshtui.kinds.openbao.lab import admin_text
from meshtui.model import Sessions
from meshtui.provisioner.harness import reconcile
from tests.kinds.openbao.conftest import BMesh, outcomes


def test_create_sets_role_id_and_secret_id(bmesh: BMesh) -> None:
    bmesh.add("app1", "gitea")
    report = bmesh.reconcile()
    login = bmesh.login_of("app1", "gitea")
    assert outcomes(report) == {login: "created"}, report.lines()
    assert not bmesh.refused("app1", "gitea")
    assert bmesh.refused("app1", "gitea", "a-wrong-secret-id-of-enough-length-1234")
    with bmesh.root() as bao:
        role_id = bao.data("GET", f"auth/{APPROLE_MOUNT}/role/meshtui-{login}/role-id")
    assert role_id["role_id"] == login
    assert len(bmesh.accessors("app1", "gitea")) == 1


def test_second_run_is_unchanged_and_writes_nothing(bmesh: BMesh) -> None:
    bmesh.add("app1", "gitea")
    bmesh.reconcile()
    before = bmesh.accessors("app1", "gitea")
    report = bmesh.reconcile()
    assert set(outcomes(report).values()) == {"unchanged"}, report.lines()
    assert bmesh.accessors("app1", "gitea") == before


def test_rotation_leaves_exactly_the_new_secret_id(bmesh: BMesh) -> None:
    bmesh.add("app1", "gitea")
    bmesh.reconcile()
    old = bmesh.secret("app1", "gitea")
    bmesh.rotate("app1", "gitea")
    report = bmesh.reconcile()
    assert set(outcomes(report).values()) == {"updated"}, report.lines()
    assert bmesh.refused("app1", "gitea", old)
    assert not bmesh.refused("app1", "gitea")
    assert len(bmesh.accessors("app1", "gitea")) == 1


def test_drift_an_extra_secret_id_is_destroyed(bmesh: BMesh) -> None:
    """A secret_id minted by hand beside ours is gone after the next run."""
    bmesh.add("app1", "gitea")
    bmesh.reconcile()
    login = bmesh.login_of("app1", "gitea")
    with bmesh.root() as bao:
        extra = bao.data("POST", f"auth/{APPROLE_MOUNT}/role/meshtui-{login}/secret-id")
    assert not bmesh.refused("app1", "gitea", extra["secret_id"])
    report = bmesh.reconcile()
    assert set(outcomes(report).values()) == {"updated"}, report.lines()
    assert bmesh.refused("app1", "gitea", extra["secret_id"])
    assert not bmesh.refused("app1", "gitea")
    assert len(bmesh.accessors("app1", "gitea")) == 1


def test_drift_a_policy_widened_by_hand_is_restored(bmesh: BMesh) -> None:
    bmesh.add("app1", "gitea")
    bmesh.add("app2", "wiki")
    bmesh.reconcile()
    gitea, wiki = bmesh.login_of("app1", "gitea"), bmesh.login_of("app2", "wiki")
    bmesh.put(f"{wiki}/smtp", {"value": "the wiki's"})
    with bmesh.root() as bao:
        text = bao.data("GET", f"sys/policies/acl/meshtui-{gitea}")["policy"]
        wide = text + f'path "{KV_MOUNT}/data/*" {{ capabilities = ["read"] }}\n'
        bao.call("PUT", f"sys/policies/acl/meshtui-{gitea}", {"policy": wide})
    report = bmesh.reconcile()
    assert outcomes(report)[gitea] == "updated", report.lines()
    with Bao(bmesh.server.url, ca=str(bmesh.server.ca), token=bmesh.token("app1", "gitea")) as bao:
        assert bao.send("GET", f"{KV_MOUNT}/data/{wiki}/smtp").status_code == 403


def test_each_module_is_confined_to_its_own_path(bmesh: BMesh) -> None:
    """gitea reads its own path; the wiki's path answers 403, and so does writing."""
    bmesh.add("app1", "gitea")
    bmesh.add("app2", "wiki")
    bmesh.reconcile()
    gitea, wiki = bmesh.login_of("app1", "gitea"), bmesh.login_of("app2", "wiki")
    bmesh.put(f"{gitea}/session", {"value": "gitea's own"})
    bmesh.put(f"{wiki}/smtp", {"value": "the wiki's"})
    with Bao(bmesh.server.url, ca=str(bmesh.server.ca), token=bmesh.token("app1", "gitea")) as bao:
        own = bao.send("GET", f"{KV_MOUNT}/data/{gitea}/session")
        assert own.status_code == 200
        assert own.json()["data"]["data"] == {"value": "gitea's own"}
        assert bao.send("GET", f"{KV_MOUNT}/data/{wiki}/smtp").status_code == 403
        write = bao.send("POST", f"{KV_MOUNT}/data/{wiki}/smtp", {"data": {"value": "x"}})
        assert write.status_code == 403
        assert bao.send("LIST", f"{KV_MOUNT}/metadata/{wiki}").status_code == 403


def test_removal_deletes_the_role_revokes_its_tokens_and_keeps_the_secrets(bmesh: BMesh) -> None:
    bmesh.add("app1", "gitea")
    bmesh.add("app2", "wiki")
    bmesh.reconcile()
    gitea = bmesh.login_of("app1", "gitea")
    secret = bmesh.secret("app1", "gitea")
    bmesh.put(f"{gitea}/session", {"value": "kept"})
    tokens = [bmesh.token("app1", "gitea") for _ in range(3)]
    wiki_token = bmesh.token("app2", "wiki")
    bmesh.drop("app1", "gitea")
    report = bmesh.reconcile()
    assert outcomes(report)[gitea] == "removed", report.lines()
    assert "3 tokens it issued revoked" in {o.login: o.reason for o in report.outcomes}[gitea]
    with Bao(bmesh.server.url, ca=str(bmesh.server.ca)) as bao:
        for token in tokens:
            assert bao.send("GET", "auth/token/lookup-self", token=token).status_code == 403
        assert bao.send("GET", "auth/token/lookup-self", token=wiki_token).status_code == 200
        gone = bao.send(
            "POST", f"auth/{APPROLE_MOUNT}/login", {"role_id": gitea, "secret_id": secret}
        )
        assert gone.status_code == 400
    with bmesh.root() as bao:
        assert bao.call("GET", f"sys/policies/acl/meshtui-{gitea}", missing_ok=True) is None
        kept = bao.data("GET", f"{KV_MOUNT}/data/{gitea}/session")
        assert kept["data"] == {"value": "kept"}
    assert set(outcomes(bmesh.reconcile()).values()) == {"unchanged"}


def test_a_role_meshtui_did_not_make_is_refused_and_untouched(bmesh: BMesh) -> None:
    entry = bmesh.add("app1", "gitea")
    login = entry["as"]
    with bmesh.root() as bao:
        bao.call(
            "PUT",
            f"sys/policies/acl/meshtui-{login}",
            {"policy": 'path "x/*" { capabilities = ["read"] }'},
        )
        bao.call(
            "POST", f"auth/{APPROLE_MOUNT}/role/meshtui-{login}", {"token_policies": ["default"]}
        )
    report = bmesh.reconcile()
    assert outcomes(report) == {login: "refused"}, report.lines()
    assert "not made by meshtui" in report.outcomes[0].reason
    with bmesh.root() as bao:
        role = bao.data("GET", f"auth/{APPROLE_MOUNT}/role/meshtui-{login}")
        assert role["token_policies"] == ["default"]
        assert bao.keys(f"auth/{APPROLE_MOUNT}/role/meshtui-{login}/secret-id") == []
    bmesh.drop("app1", "gitea")
    bmesh.reconcile()
    with bmesh.root() as bao:
        assert bao.data("GET", f"auth/{APPROLE_MOUNT}/role/meshtui-{login}") is not None


def test_another_scope_is_not_ours(bmesh: BMesh) -> None:
    """A role made for another provider's manifest is neither rewritten nor removed."""
    bmesh.add("app1", "gitea")
    bmesh.reconcile(provider=f"db2/bao{bmesh.tag}")
    login = bmesh.login_of("app1", "gitea")
    report = bmesh.reconcile()
    assert outcomes(report) == {login: "refused"}, report.lines()
    assert f"made by meshtui for secret at db2/bao{bmesh.tag}" in report.outcomes[0].reason
    secret = bmesh.secret("app1", "gitea")
    bmesh.drop("app1", "gitea")
    assert outcomes(bmesh.reconcile()) == {}
    assert not bmesh.refused("app1", "gitea", secret)


def test_the_admin_token_cannot_read_secrets(bmesh: BMesh) -> None:
    """The provisioner's token is not root: a module's path answers 403 to it."""
    bmesh.add("app1", "gitea")
    bmesh.reconcile()
    login = bmesh.login_of("app1", "gitea")
    bmesh.put(f"{login}/session", {"value": "x"})
    token = bmesh.server.admin_file.read_text().split('token = "')[1].split('"')[0]
    with Bao(bmesh.server.url, ca=str(bmesh.server.ca), token=token) as bao:
        assert bao.send("GET", f"{KV_MOUNT}/data/{login}/session").status_code == 403
        assert bao.send("GET", "sys/policies/acl/root").status_code == 403
        me = bao.data("GET", "auth/token/lookup-self")
    assert "root" not in me["policies"]


def test_an_expired_admin_token_is_refused_by_name(bmesh: BMesh, tmp_path) -> None:  # type: ignore[no-untyped-def]
    bmesh.add("app1", "gitea")
    admin = tmp_path / "admin.toml"
    text = bmesh.server.admin_file.read_text()
    token = text.split('token = "')[1].split('"')[0]
    admin.write_text(text.replace(token, "s.not-a-token"))
    admin.chmod(0o600)
    bmesh.write()
    with pytest.raises(Exception, match="refused the admin token"):
        reconcile(bmesh.manifest, admin)


def test_an_admin_token_lacking_a_capability_is_named(bmesh: BMesh, tmp_path: Path) -> None:
    """A token of the default policy alone: refused at once, naming the path it lacks."""
    bmesh.add("app1", "gitea")
    with bmesh.root() as bao:
        made = bao.call("POST", "auth/token/create", {"policies": ["default"], "ttl": "10m"})
    token = made["auth"]["client_token"]
    admin = tmp_path / "admin.toml"
    admin.write_text(admin_text(bmesh.server.url, str(bmesh.server.ca), token))
    admin.chmod(0o600)
    bmesh.write()
    with pytest.raises(ProvisionError, match="lacks a capability on sys/auth") as caught:
        reconcile(bmesh.manifest, admin)
    assert token not in str(caught.value)
    login = bmesh.login_of("app1", "gitea")
    with bmesh.root() as bao:  # nothing was made
        assert (
            bao.call("GET", f"auth/{APPROLE_MOUNT}/role/meshtui-{login}", missing_ok=True) is None
        )


def test_a_sealed_vault_changes_nothing_and_says_so(bmesh: BMesh) -> None:
    bmesh.add("app1", "gitea")
    bmesh.reconcile()
    before = bmesh.accessors("app1", "gitea")
    old = bmesh.secret("app1", "gitea")
    bmesh.rotate("app1", "gitea")
    with bmesh.root() as bao:
        bao.call("PUT", "sys/seal")
    try:
        bmesh.write()
        with pytest.raises(ProvisionError, match="sealed"):
            reconcile(bmesh.manifest, bmesh.admin)
    finally:
        bmesh.server.start()
    assert bmesh.accessors("app1", "gitea") == before
    assert not bmesh.refused("app1", "gitea", old)


def test_past_the_token_scan_limit_sessions_are_not_looked_up_and_the_run_says_so(
    bmesh: BMesh, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OpenBao lists tokens server-wide only, each looked up to learn whose it is: past the
    scan limit a count (or an end) is refused by name before any lookup, and a removal still
    removes, saying its tokens live out their TTL."""
    bmesh.add("app1", "gitea")
    bmesh.reconcile()
    gitea = bmesh.login_of("app1", "gitea")
    tokens = [bmesh.token("app1", "gitea") for _ in range(2)]
    counted = reconcile(bmesh.manifest, bmesh.admin, sessions={gitea: Sessions.DRAIN})
    assert {o.login: o.sessions for o in counted.outcomes}[gitea] == 0  # both on the current
    monkeypatch.setattr(OpenBaoAdapter, "token_scan_limit", 1)
    for choice in Sessions:
        report = reconcile(bmesh.manifest, bmesh.admin, sessions={gitea: choice})
        (done,) = report.outcomes
        assert done.outcome == "unchanged" and done.sessions is None, report.lines()
        assert "its sessions on the old credential could not be" in done.reason, done.reason
        assert "live tokens, more than the 1 meshtui looks up" in done.reason, done.reason
    bmesh.drop("app1", "gitea")
    removed = bmesh.reconcile()
    said = {o.login: (o.outcome, o.reason) for o in removed.outcomes}[gitea]
    assert said[0] == "removed" and "live out their TTL" in said[1], said
    with Bao(bmesh.server.url, ca=str(bmesh.server.ca)) as bao:  # not revoked: they expire
        assert bao.send("GET", "auth/token/lookup-self", token=tokens[0]).status_code == 200


def test_a_run_looks_each_token_up_once_for_all_its_logins(
    bmesh: BMesh, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ending and counting the sessions of several logins in one run scans the server's
    tokens once, not once per login and step (each lookup is a request)."""
    for module in ("gitea", "wiki", "grafana"):
        bmesh.add("app1", module)
    bmesh.reconcile()
    logins = [bmesh.login_of("app1", m) for m in ("gitea", "wiki", "grafana")]
    for module in ("gitea", "wiki", "grafana"):
        bmesh.token("app1", module)
    with bmesh.root() as bao:
        live = len(bao.keys("auth/token/accessors"))
    looked: list[str] = []
    data = Bao.data

    def counted(self: Bao, method: str, path: str, *args: Any, **kwargs: Any) -> Any:
        if path == "auth/token/lookup-accessor":
            looked.append(path)
        return data(self, method, path, *args, **kwargs)

    monkeypatch.setattr(Bao, "data", counted)
    report = reconcile(bmesh.manifest, bmesh.admin, sessions=dict.fromkeys(logins, Sessions.END))
    assert all(o.sessions == 0 for o in report.outcomes), report.lines()
    assert 0 < len(looked) <= live, (len(looked), live)
