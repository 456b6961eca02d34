"""The AppRole probe against a real OpenBao: accepted, refused, and unknown (never refused) for
a sealed vault, a certificate from another CA or a closed port."""

from __future__ import annotations

from pathlib import Path

from meshtui.contracts.adapter import Scope
from meshtui.host.probe_runner import ProbeOptions, ProbeTarget, probe_one
from meshtui.kinds.openbao.adapter import TOKEN_TTL_S, OpenBaoAdapter
from meshtui.lab.certificates import make_certificates
from meshtui.model import Verdict
from tests.kinds.openbao.conftest import BMesh

LOCAL = ProbeOptions(timeout=5.0, allow_loopback=True)


def target(
    bmesh: BMesh, node: str, module: str, secret: str | None = None, **kw: object
) -> ProbeTarget:
    fields: dict[str, object] = {
        "host": bmesh.server.address,
        "port": bmesh.server.port,
        "user": bmesh.login_of(node, module),
        "password": secret or bmesh.secret(node, module),
        "dbname": "",
        "kind": "openbao",
        "ca": str(bmesh.server.ca),
    }
    fields.update(kw)
    return ProbeTarget(**fields)  # type: ignore[arg-type]


def live_tokens(bmesh: BMesh, login: str) -> list[int]:
    """The remaining TTL of each live token the login's role issued."""
    with OpenBaoAdapter(bmesh.server.admin_file.read_text(), Scope(bmesh.provider, "secret")) as a:
        ttls = []
        for accessor in a.bao.keys("auth/token/accessors"):
            info = a.bao.data("POST", "auth/token/lookup-accessor", {"accessor": accessor})
            if (info.get("meta") or {}).get("role_name") == f"meshtui-{login}":
                ttls.append(int(info["ttl"]))
        return ttls


def test_accepted_with_the_control_refused_and_its_token_short_lived(bmesh: BMesh) -> None:
    bmesh.add("app1", "gitea")
    bmesh.reconcile()
    result = probe_one(target(bmesh, "app1", "gitea"), LOCAL)
    assert result.verdict() is Verdict.ACCEPTED, result.reason()
    assert result.control is not None and result.control.verdict is Verdict.REFUSED
    assert "certificate verified" in result.reason()
    assert "a random wrong password was refused" in result.reason()
    assert result.loopback
    (ttl,) = live_tokens(bmesh, bmesh.login_of("app1", "gitea"))  # the control made none
    assert 0 < ttl <= TOKEN_TTL_S


def test_a_rotated_away_secret_id_is_refused(bmesh: BMesh) -> None:
    bmesh.add("app1", "gitea")
    bmesh.reconcile()
    old = bmesh.secret("app1", "gitea")
    bmesh.rotate("app1", "gitea")
    bmesh.reconcile()
    result = probe_one(target(bmesh, "app1", "gitea", old), LOCAL)
    assert result.verdict() is Verdict.REFUSED, result.reason()
    assert "invalid role or secret ID" in result.reason()
    assert old not in result.reason()


def test_another_ca_is_unknown_never_refused(bmesh: BMesh, tmp_path: Path) -> None:
    bmesh.add("app1", "gitea")
    bmesh.reconcile()
    make_certificates(tmp_path, "127.0.0.1", server="OpenBao")
    result = probe_one(target(bmesh, "app1", "gitea", ca=str(tmp_path / "ca.pem")), LOCAL)
    assert result.verdict() is Verdict.UNKNOWN, result.reason()
    assert "CERTIFICATE_VERIFY_FAILED" in result.reason() or "certificate" in result.reason()


def test_a_closed_port_is_unknown(bmesh: BMesh) -> None:
    from meshtui.kinds.openbao.lab import free_port

    result = probe_one(target(bmesh, "app1", "gitea", "x" * 40, port=free_port()), LOCAL)
    assert result.verdict() is Verdict.UNKNOWN, result.reason()


def test_a_loopback_target_is_not_run_unless_allowed(bmesh: BMesh) -> None:
    result = probe_one(target(bmesh, "app1", "gitea", "x" * 40), ProbeOptions())
    assert result.verdict() is Verdict.UNKNOWN
    assert "not run" in result.reason() and "loopback" in result.reason()


def test_a_sealed_vault_is_unknown_never_refused(bmesh: BMesh) -> None:
    """Sealed, OpenBao answers 503 to every login: nothing is proved either way."""
    bmesh.add("app1", "gitea")
    bmesh.reconcile()
    old = bmesh.secret("app1", "gitea")
    with bmesh.root() as bao:
        bao.call("PUT", "sys/seal")
    try:
        for secret in (old, "wrong-" + "x" * 40):
            result = probe_one(target(bmesh, "app1", "gitea", secret), LOCAL)
            assert result.verdict() is Verdict.UNKNOWN, result.reason()
            assert "sealed" in result.reason()
    finally:
        bmesh.server.start()  # unseals it again
    assert probe_one(target(bmesh, "app1", "gitea"), LOCAL).verdict() is Verdict.ACCEPTED
