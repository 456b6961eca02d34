"""No plaintext password anywhere Redis writes or shows: its log, ACL LOG, SLOWLOG, the aclfile,
and a MONITOR capture taken while a rotation (and a probe) runs."""

from __future__ import annotations

import threading

import redis

from meshtui.kinds.redis import probe as probe_redis

from .conftest import RMesh, admin_client, can_auth, outcomes

END = "meshtui-test-end-of-capture"


def _capture(rmesh: RMesh, seen: list[str], ready: threading.Event) -> None:
    with admin_client(rmesh.server) as admin, admin.monitor() as monitor:
        ready.set()
        for event in monitor.listen():
            seen.append(str(event.get("command", "")))
            if END in seen[-1]:
                return


def test_no_plaintext_in_log_acl_log_slowlog_aclfile_or_monitor(rmesh: RMesh) -> None:
    with rmesh.redis() as admin:
        admin.config_set("slowlog-log-slower-than", 0)  # every command goes to SLOWLOG
        admin.config_set("loglevel", "debug")
    try:
        rmesh.add("app1", "worker")
        rmesh.add("app2", "web")
        assert rmesh.reconcile().ok
        passwords = [rmesh.password("app1", "worker"), rmesh.password("app2", "web")]
        seen: list[str] = []
        ready = threading.Event()
        capture = threading.Thread(target=_capture, args=(rmesh, seen, ready), daemon=True)
        capture.start()
        assert ready.wait(10)
        rmesh.rotate("app1", "worker")
        report = rmesh.reconcile()
        assert outcomes(report)[rmesh.login_of("app1", "worker")] == "updated"
        passwords.append(rmesh.password("app1", "worker"))
        # a probe (AUTH with the secret and with a wrong one) and a refused old password
        result = probe_redis.probe(
            rmesh.server.address,
            rmesh.server.port,
            rmesh.login_of("app1", "worker"),
            passwords[-1],
            ca=str(rmesh.server.ca),
            allow_loopback=True,
        )
        assert result.verdict() == "accepted", result.reason()
        assert not can_auth(rmesh.server, rmesh.login_of("app1", "worker"), passwords[0])
        with rmesh.redis() as admin:
            admin.echo(END)
        capture.join(10)
        # the capture covered the rotation (Redis keeps ACL SETUSER itself out of MONITOR)
        # and the probe's AUTH (shown redacted)
        assert "ACL WHOAMI" in seen and any(c.startswith("AUTH") for c in seen), seen[:8]
        assert END in seen[-1], seen[-3:]
        with rmesh.redis() as admin:
            places = {
                "MONITOR": "\n".join(seen),
                "ACL LOG": repr(admin.execute_command("ACL", "LOG")),
                "SLOWLOG": repr(admin.execute_command("SLOWLOG", "GET", "-1")),
                "aclfile": rmesh.server.aclfile.read_text(),
                "server log": rmesh.server.log.read_text(errors="replace"),
            }
            assert "WRONGPASS" in places["ACL LOG"] or "auth" in places["ACL LOG"]
        for where, text in places.items():
            for password in passwords:
                assert password not in text, f"a password is in {where}"
    finally:
        with rmesh.redis() as admin:
            admin.config_set("slowlog-log-slower-than", 10000)
            admin.config_set("loglevel", "notice")


def test_errors_never_carry_the_hash_argument(rmesh: RMesh) -> None:
    """A refused ACL SETUSER names the problem, not the #<sha256> argument."""
    from meshtui.kinds.redis.adapter import _why

    error = redis.ResponseError("Error in ACL SETUSER modifier '#" + "ab" * 32 + "': Syntax error")
    assert "ab" * 32 not in _why(error)
