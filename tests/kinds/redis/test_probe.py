"""The Redis probe against real servers: accepted, WRONGPASS, a default user with no password,
a wrong-password-accepting server, certificate checks, connection errors, loopback refusal."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis

from meshtui.host.probe_runner import ProbeTarget, Verdict, probe_many
from meshtui.kinds.redis import probe as probe_redis
from meshtui.lab.certificates import make_certificates

from .conftest import RMesh, free_port, run_redis


def _ready(port: int) -> None:
    for _ in range(200):
        try:
            redis.Redis(port=port, socket_timeout=1).ping()
            return
        except redis.ConnectionError:
            time.sleep(0.05)
        except redis.AuthenticationError:
            return


def _probe(rmesh: RMesh, login: str, password: str, **kw: object) -> probe_redis.ProbeResult:
    args: dict[str, object] = {"ca": str(rmesh.server.ca), "allow_loopback": True, **kw}
    return probe_redis.probe(rmesh.server.address, rmesh.server.port, login, password, **args)  # type: ignore[arg-type]


def test_accepted_with_a_refused_control(rmesh: RMesh) -> None:
    rmesh.add("app1", "worker")
    assert rmesh.reconcile().ok
    result = _probe(rmesh, rmesh.login_of("app1", "worker"), rmesh.password("app1", "worker"))
    assert result.verdict() is Verdict.ACCEPTED, result.reason()
    assert result.control is not None and result.control.verdict is Verdict.REFUSED
    assert result.login.used_password and result.login.client_addr == "127.0.0.1"
    assert "WRONGPASS" in result.control.reason
    assert "certificate verified" in result.reason() and result.loopback


def test_a_restricted_login_is_named_by_its_address_not_an_error(rmesh: RMesh) -> None:
    """A login without @connection (as asked: ``+@read +@write``) may not run CLIENT INFO:
    the reason says what was proven and from where, not a permission error."""
    rmesh.add("app1", "wiki", values={"commands": "+@read +@write"})
    assert rmesh.reconcile().ok
    result = _probe(rmesh, rmesh.login_of("app1", "wiki"), rmesh.password("app1", "wiki"))
    assert result.verdict() is Verdict.ACCEPTED, result.reason()
    assert result.login.client_addr == "127.0.0.1"
    assert "from 127.0.0.1" in result.reason(), result.reason()
    assert "NoPermission" not in result.reason() and "could not" not in result.reason()
    assert "may not run CLIENT INFO" in result.reason()


def test_wrong_password_and_removed_user_are_refused(rmesh: RMesh) -> None:
    rmesh.add("app1", "worker")
    assert rmesh.reconcile().ok
    login, password = rmesh.login_of("app1", "worker"), rmesh.password("app1", "worker")
    assert _probe(rmesh, login, "not-the-password").verdict() is Verdict.REFUSED
    rmesh.drop("app1", "worker")
    assert rmesh.reconcile().ok
    gone = _probe(rmesh, login, password)
    assert gone.verdict() is Verdict.REFUSED and "WRONGPASS" in gone.reason()


def test_probe_many_dispatches_on_kind(rmesh: RMesh) -> None:
    rmesh.add("app1", "worker")
    assert rmesh.reconcile().ok
    target = ProbeTarget(
        host=rmesh.server.address,
        port=rmesh.server.port,
        user=rmesh.login_of("app1", "worker"),
        password=rmesh.password("app1", "worker"),
        dbname="",
        kind="redis",
        ca=str(rmesh.server.ca),
    )
    (result,) = probe_many([target], allow_loopback=True)
    assert result.verdict() is Verdict.ACCEPTED, result.reason()
    assert "password" not in repr(target).replace("password=", "")


def test_certificate_not_signed_by_the_ca_is_unknown(rmesh: RMesh, tmp_path: Path) -> None:
    rmesh.add("app1", "worker")
    assert rmesh.reconcile().ok

    other = tmp_path / "other"
    other.mkdir()
    make_certificates(other, "127.0.0.1", server="Redis")
    result = _probe(
        rmesh,
        rmesh.login_of("app1", "worker"),
        rmesh.password("app1", "worker"),
        ca=str(other / "ca.pem"),
    )
    assert result.verdict() is Verdict.UNKNOWN
    assert "certificate" in result.reason().lower()


def test_no_ca_and_loopback_are_not_run(rmesh: RMesh) -> None:
    result = probe_redis.probe(
        "127.0.0.1", rmesh.server.port, "x", "y", ca=None, allow_loopback=True
    )
    assert result.verdict() is Verdict.UNKNOWN and "no CA" in result.reason()
    result = probe_redis.probe("127.0.0.1", rmesh.server.port, "x", "y", ca=str(rmesh.server.ca))
    assert result.verdict() is Verdict.UNKNOWN and "loopback" in result.reason()


def test_connection_refused_is_unknown(rmesh: RMesh) -> None:
    result = probe_redis.probe(
        "127.0.0.1", free_port(), "x", "y", ca=str(rmesh.server.ca), allow_loopback=True
    )
    assert result.verdict() is Verdict.UNKNOWN


def test_default_user_without_password_cannot_prove_anything(tmp_path: Path) -> None:
    port = free_port()
    proc = run_redis(tmp_path, "--port", str(port), "--bind", "127.0.0.1", "--protected-mode", "no")
    try:
        _ready(port)
        redis.Redis(port=port).execute_command(
            "ACL", "SETUSER", "worker", "on", ">right-password", "~*", "+@all"
        )
        for password in ("right-password", "wrong-password"):
            result = probe_redis.probe(
                "127.0.0.1", port, "worker", password, ca=None, tls=False, allow_loopback=True
            )
            assert result.verdict() is Verdict.UNKNOWN, result.reason()
            assert "default user needs no password" in result.reason()
    finally:
        proc.terminate()
        proc.wait(10)


def test_a_server_accepting_any_password_is_no_password(tmp_path: Path) -> None:
    port = free_port()
    proc = run_redis(tmp_path, "--port", str(port), "--bind", "127.0.0.1")
    try:
        _ready(port)
        admin = redis.Redis(port=port)
        admin.execute_command("ACL", "SETUSER", "worker", "on", "nopass", "~*", "+@all")
        admin.execute_command("ACL", "SETUSER", "default", "off")
        result = probe_redis.probe(
            "127.0.0.1", port, "worker", "anything", ca=None, tls=False, allow_loopback=True
        )
        assert result.verdict() is Verdict.NO_PASSWORD, result.reason()
        assert "plain text" in result.login.reason
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.parametrize("password", ["with\r\nnewline", ""])
def test_bad_input_is_not_run(rmesh: RMesh, password: str) -> None:
    result = _probe(rmesh, "worker", password)
    assert result.verdict() is Verdict.UNKNOWN and "not run" in result.reason()


def test_only_the_declared_ca_is_trusted(
    rmesh: RMesh, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server's certificate is signed by a CA the machine trusts (SSL_CERT_FILE), not by
    the one the declaration names: the probe must not accept it."""

    rmesh.add("app1", "worker")
    assert rmesh.reconcile().ok
    other = tmp_path / "declared"
    other.mkdir()
    make_certificates(other, "127.0.0.1", server="Redis")
    monkeypatch.setenv("SSL_CERT_FILE", str(rmesh.server.ca))
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    result = _probe(
        rmesh,
        rmesh.login_of("app1", "worker"),
        rmesh.password("app1", "worker"),
        ca=str(other / "ca.pem"),
    )
    assert result.verdict() is Verdict.UNKNOWN, result.reason()
    assert "certificate" in result.reason().lower()
