"""The live login: pure rules (anyone), a loopback server (anyone), and a real private network
(root): PostgreSQL in db1's namespace, probes run from app1's namespace in a subprocess that gets
the password on stdin."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from meshtui.contracts import probe_target as probe_address
from meshtui.contracts import probe_types
from meshtui.host import probe_runner as p
from meshtui.host.probe_runner import LoginResult, ProbeResult, ProbeTarget, Verdict
from meshtui.kinds.postgres import probe as probe_postgres
from meshtui.kinds.postgres.lab import Cluster, create_cluster
from meshtui.lab import netns as lab_netns

PW = "Pw-" + secrets.token_urlsafe(24)  # the credential the tests hold

# --------------------------------------------------------------------------- pure rules


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1", "127.3.4.5", "::1", "[::1]", "localhost", "LOCALHOST.", "db.localhost",
     "/tmp", "/run/postgresql", "@abstract", "", "0.0.0.0", "::", "::ffff:127.0.0.1"],
)  # fmt: skip
def test_loopback_targets_are_not_run(host: str) -> None:
    started = time.perf_counter()
    res = p.login(host, 5432, "u", PW, "db")
    assert time.perf_counter() - started < 0.5
    assert res.verdict is Verdict.UNKNOWN
    assert res.loopback is True
    assert "loopback" in res.reason and "not run" in res.reason
    assert res.latency_ms == 0.0 and res.used_password is None
    assert PW not in res.reason
    whole = p.probe(host, 5432, "u", PW, "db")
    assert whole.verdict() is Verdict.UNKNOWN and whole.control is None
    assert "loopback" in whole.reason()


@pytest.mark.parametrize("host", ["10.213.0.2", "192.0.2.7", "fd00::2", "db1.example"])
def test_private_targets_are_not_loopback(host: str) -> None:
    assert probe_address.loopback_host(host) is False


def test_multiple_hosts_and_empty_passwords_are_not_run() -> None:
    res = p.login("10.213.0.2,127.0.0.1", 5432, "u", PW, "db")
    assert res.verdict is Verdict.UNKNOWN and "exactly one host" in res.reason
    res = p.login("10.213.0.2", 5432, "u", "", "db")
    assert res.verdict is Verdict.UNKNOWN and "empty" in res.reason
    res = p.login("10.213.0.2", 5432, "", PW, "db")
    assert res.verdict is Verdict.UNKNOWN and "not run" in res.reason
    for port in (0, 70000, "5432", True):
        res = p.login("10.213.0.2", port, "u", PW, "db")  # type: ignore[arg-type]
        assert res.verdict is Verdict.UNKNOWN and "bad port" in res.reason


PREFIX = 'connection failed: connection to server at "10.213.0.2", port 5432 failed: '


@pytest.mark.parametrize(
    "message, verdict",
    [
        (PREFIX + 'FATAL:  password authentication failed for user "gitea_app1"', "refused"),
        (
            PREFIX + 'authentication method requirement "scram-sha-256" failed: server did not'
            " complete authentication",
            "no password demanded",
        ),
        (
            PREFIX + 'authentication method requirement "scram-sha-256" failed: server requested'
            " a cleartext password",
            "unknown",
        ),
        (PREFIX + "Connection refused\n\tIs the server running on that host and ...?", "unknown"),
        ("connection timeout expired", "unknown"),
        (PREFIX + "No route to host", "unknown"),
        (PREFIX + "FATAL:  sorry, too many clients already", "unknown"),
        (PREFIX + 'FATAL:  too many connections for role "x"', "unknown"),
        (PREFIX + 'FATAL:  database "gitea" does not exist', "unknown"),
        (PREFIX + "FATAL:  the database system is shutting down", "unknown"),
        (PREFIX + "FATAL:  the database system is starting up", "unknown"),
        (PREFIX + 'FATAL:  role "x" is not permitted to log in', "unknown"),
        (
            # the user name is not where the refusal is read from
            PREFIX + 'FATAL:  no pg_hba.conf entry for host "10.213.0.3", user "password'
            ' authentication failed for user ", database "d", no encryption',
            "unknown",
        ),
        (PREFIX + "server closed the connection unexpectedly", "unknown"),
        ("", "unknown"),
    ],
)
def test_only_an_authentication_refusal_is_refused(message: str, verdict: str) -> None:
    got, reason = probe_postgres.classify(message)
    assert got == Verdict(verdict)
    assert reason


def test_scrub_removes_the_password_and_noise() -> None:
    text = PREFIX + f"FATAL: oops {PW} here\n\tIs the server running on that host and x?"
    clean = probe_postgres.scrub_libpq(text, PW)
    assert PW not in clean and "***" in clean and "\n" not in clean
    assert not clean.startswith("connection")
    assert len(probe_postgres.scrub_libpq("x" * 1000, PW)) <= probe_types.REASON_MAX


def _lr(verdict: Verdict, *, loopback: bool = False) -> LoginResult:
    return LoginResult(verdict, f"r-{verdict.name}", 1.0, True, "10.213.0.3", loopback)


A, R, U, N = Verdict.ACCEPTED, Verdict.REFUSED, Verdict.UNKNOWN, Verdict.NO_PASSWORD


@pytest.mark.parametrize(
    "login, control, want",
    [
        (A, R, A),
        (A, None, A),
        (A, A, N),  # a random wrong password got in: the server checks nothing
        (A, N, N),
        (A, U, U),  # cannot prove the server checks passwords
        (R, None, R),
        (R, R, R),
        (R, A, N),
        (U, None, U),
        (U, R, U),
        (N, None, N),
        (N, R, N),
    ],
)
def test_probe_verdict_table(login: Verdict, control: Verdict | None, want: Verdict) -> None:
    res = ProbeResult(_lr(login), _lr(control) if control is not None else None)
    assert res.verdict() is want
    assert res.reason()
    data = json.loads(json.dumps(res.to_json()))
    assert data["verdict"] == str(want)
    assert ProbeResult.from_json(data) == res


def test_loopback_shows_in_the_probe_reason() -> None:
    res = ProbeResult(_lr(A, loopback=True), _lr(R, loopback=True))
    assert res.verdict() is A and res.loopback and "loopback" in res.reason()


def test_target_repr_hides_the_password() -> None:
    t = ProbeTarget("10.213.0.2", 5432, "u", PW, "db")
    assert PW not in repr(t) and PW not in str(t)


def test_probe_many_keeps_order_and_bounds_concurrency(monkeypatch: pytest.MonkeyPatch) -> None:
    lock = threading.Lock()
    active = peak = 0

    def fake(target: ProbeTarget, options: p.ProbeOptions) -> Any:
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
        time.sleep(0.01)
        with lock:
            active -= 1
        return ProbeResult(LoginResult(A, target.user, 1.0, True, None, False), None)

    monkeypatch.setattr(p, "probe_one", fake)
    targets = [ProbeTarget("10.213.0.2", 5432, f"u{i}", PW, "db") for i in range(40)]
    out = p.probe_many(targets, concurrency=3)
    assert [r.login.reason for r in out] == [f"u{i}" for i in range(40)]
    assert 1 < peak <= 3
    assert p.probe_many([], concurrency=3) == []
    with pytest.raises(ValueError):
        p.probe_many(targets, concurrency=0)


def test_probe_module_imports_nothing_it_must_not() -> None:
    code = (
        "import sys, meshtui.host.probe_runner\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('textual', 'rich') or "
        "m.startswith(('meshtui.controller', 'meshtui.inventory', 'meshtui.tui'))]\n"
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --------------------------------------------------------------------------- helpers


def add_role(cluster: Cluster, role: str, password: str, **opts: str) -> None:
    """Create ``role`` with a SCRAM verifier computed here: the server never sees the password."""
    with psycopg.connect(cluster.admin_conninfo(), autocommit=True) as conn:
        verifier = conn.pgconn.encrypt_password(password.encode(), role.encode(), b"scram-sha-256")
        conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
        conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN PASSWORD {} " + " ".join(opts.values())).format(
                sql.Identifier(role), sql.Literal(verifier.decode())
            )
        )


RUNNER = """
import json, sys
from meshtui.host import probe_runner as probe
out = []
for r in json.load(sys.stdin):
    kind = r.pop("kind")
    if kind == "login":
        out.append(probe.login(**r).to_json())
    elif kind == "probe":
        out.append(probe.probe(**r).to_json())
    else:
        targets = [probe.ProbeTarget(**t) for t in r.pop("targets")]
        out.append([x.to_json() for x in probe.probe_many(targets, **r)])
json.dump(out, sys.stdout)
"""


def run_in(namespace: str, requests: list[dict[str, Any]]) -> list[Any]:
    """Run probes in ``namespace`` in a fresh Python; passwords travel on stdin only."""
    proc = lab_netns.spawn(
        namespace,
        [sys.executable, "-c", RUNNER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = proc.communicate(json.dumps(requests).encode(), timeout=120)
    assert proc.returncode == 0, err.decode()
    text = out.decode() + err.decode()
    for r in requests:
        for secret in [r.get("password")] + [t["password"] for t in r.get("targets", [])]:
            assert not secret or secret not in text, "a password leaked into the output"
    result: list[Any] = json.loads(out)
    return result


@pytest.fixture
def loopback_pg(pg_clean: Cluster) -> Cluster:
    add_role(pg_clean, "probe_lo", PW)
    return pg_clean


def test_loopback_server_is_only_probed_when_allowed(loopback_pg: Cluster) -> None:
    host, port = loopback_pg.listen[0], loopback_pg.port
    refused_to_run = p.probe(host, port, "probe_lo", PW, "postgres")
    assert refused_to_run.verdict() is Verdict.UNKNOWN and "loopback" in refused_to_run.reason()
    assert refused_to_run.login.latency_ms == 0.0
    ok = p.probe(host, port, "probe_lo", PW, "postgres", allow_loopback=True)
    assert ok.verdict() is Verdict.ACCEPTED, ok.reason()
    assert ok.login.used_password is True and ok.login.client_addr == "127.0.0.1"
    assert ok.control is not None and ok.control.verdict is Verdict.REFUSED
    assert ok.loopback and ok.login.loopback and ok.control.loopback
    assert "loopback" in ok.reason() and "loopback" in ok.login.reason
    wrong = p.probe(host, port, "probe_lo", "nope-" + PW, "postgres", allow_loopback=True)
    assert wrong.verdict() is Verdict.REFUSED and wrong.loopback and "loopback" in wrong.reason()
    sock = p.probe(str(loopback_pg.socket_dir), port, "probe_lo", PW, "postgres")
    assert sock.verdict() is Verdict.UNKNOWN and "loopback" in sock.reason()


# --------------------------------------------------------------------------- the private network


@pytest.fixture(scope="module")
def db(netns: lab_netns.Network) -> Iterator[Cluster]:
    """PostgreSQL listening only on db1's address, started inside db1's namespace."""
    base = Path(tempfile.mkdtemp(prefix="meshtui-probe-"))
    base.chmod(0o711)
    cluster = create_cluster(
        base / "data", port=5432, listen=(netns.address("db1"),), hba_networks=(netns.cidr(),)
    )
    try:
        cluster.start(netns=netns.namespace("db1"))
        add_role(cluster, "probe_ok", PW)
        add_role(cluster, "probe_nolimit", PW, limit="CONNECTION LIMIT 0")
        yield cluster
    finally:
        cluster.stop()
        log = cluster.log_path.read_text(errors="replace") if cluster.log_path.exists() else ""
        shutil.rmtree(base, ignore_errors=True)
    assert PW not in log, "the password reached the server log"


def _req(net: lab_netns.Network, kind: str = "probe", **kw: Any) -> dict[str, Any]:
    req: dict[str, Any] = {
        "kind": kind,
        "host": net.address("db1"),
        "port": 5432,
        "user": "probe_ok",
        "password": PW,
        "dbname": "postgres",
        "timeout": 3.0,
    }
    req.update(kw)
    return req


@pytest.mark.root
def test_probe_from_app1_accepted_refused_unknown(netns: lab_netns.Network, db: Cluster) -> None:
    app1 = netns.address("app1")
    got = run_in(
        netns.namespace("app1"),
        [
            _req(netns, expect_client_addr=app1),
            _req(netns, password="wrong-" + PW),
            _req(netns, user="no_such_role"),
            _req(netns, dbname="no_such_db"),
            _req(netns, user="probe_nolimit"),
            _req(netns, host=netns.address("app2")),  # nothing listens there
            _req(netns, expect_client_addr=netns.address("app2")),
        ],
    )
    ok, wrong, nobody, nodb, limited, nolisten, elsewhere = got

    assert ok["verdict"] == "accepted", ok["reason"]
    assert ok["loopback"] is False
    assert ok["login"]["used_password"] is True
    assert ok["login"]["client_addr"] == app1
    assert ok["login"]["system_user"] == "scram-sha-256:probe_ok"
    assert ok["control"]["verdict"] == "refused"
    assert ok["login"]["latency_ms"] > 0

    assert wrong["verdict"] == "refused" and "28P01" in wrong["reason"]
    assert wrong["control"] is None
    assert nobody["verdict"] == "refused"
    for res in (nodb, limited, nolisten, elsewhere):
        assert res["verdict"] == "unknown", res
    assert "does not exist" in nodb["reason"]
    assert "too many connections" in limited["reason"]
    assert "connection refused" in nolisten["reason"]
    assert "not " + netns.address("app2") in elsewhere["reason"]


@pytest.mark.root
def test_probe_many_from_app1(netns: lab_netns.Network, db: Cluster) -> None:
    targets = [
        {"host": netns.address("db1"), "port": 5432, "user": "probe_ok", "dbname": "postgres",
         "password": PW if i % 2 == 0 else f"wrong-{i}-{PW}"}
        for i in range(12)
    ]  # fmt: skip
    (results,) = run_in(
        netns.namespace("app1"), [{"kind": "many", "targets": targets, "concurrency": 4}]
    )
    assert [r["verdict"] for r in results] == ["accepted", "refused"] * 6


@pytest.mark.root
def test_unroutable_address_times_out_as_unknown(netns: lab_netns.Network, db: Cluster) -> None:
    # An address in the subnet that no namespace holds: ARP on our own bridge gets no answer.
    (res,) = run_in(netns.namespace("app1"), [_req(netns, host="10.213.0.250", timeout=2.0)])
    assert res["verdict"] == "unknown"
    assert res["login"]["latency_ms"] < 4000
    assert "refused" not in res["reason"].replace("connection refused", "")


@pytest.mark.root
def test_a_login_from_the_servers_own_host_is_loopback(
    netns: lab_netns.Network, db: Cluster
) -> None:
    # From db1 to db1's own address: the login would never cross the network.
    strict, allowed = run_in(
        netns.namespace("db1"), [_req(netns), _req(netns, allow_loopback=True)]
    )
    assert strict["verdict"] == "unknown" and "loopback" in strict["reason"]
    assert "not run" in strict["reason"] and strict["login"]["latency_ms"] == 0.0
    assert strict["loopback"] is True
    assert allowed["verdict"] == "accepted" and allowed["loopback"] is True
    assert "loopback" in allowed["reason"]
    assert allowed["login"]["client_addr"] == netns.address("db1")


@pytest.mark.root
def test_post_login_check_catches_a_local_login(netns: lab_netns.Network, db: Cluster) -> None:
    # Where binding cannot tell (ip_nonlocal_bind), client == server address still does.
    code = (
        "import sys, json\n"
        "from meshtui.host import probe_runner as p\n"
        "from meshtui.contracts import probe_target as probe_address\n"
        "probe_address.own_address = lambda addr: False\n"
        "a = json.load(sys.stdin)\n"
        "print(json.dumps(p.probe(**a).to_json()))"
    )
    req = _req(netns)
    del req["kind"]
    proc = lab_netns.spawn(
        netns.namespace("db1"),
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    out, _ = proc.communicate(json.dumps(req).encode(), timeout=60)
    res = json.loads(out)
    assert res["verdict"] == "unknown" and res["loopback"] is True
    assert "server's own host" in res["reason"]
    assert res["login"]["used_password"] is True and res["control"] is None


@pytest.mark.root
def test_trust_everything_is_no_password_never_accepted(
    netns: lab_netns.Network, db: Cluster
) -> None:
    scram_hba = (db.datadir / "pg_hba.conf").read_text().splitlines()
    db.set_hba(["local all postgres peer map=admin", f"host all all {netns.cidr()} trust"])
    try:
        got = run_in(
            netns.namespace("app1"),
            [
                _req(netns),
                _req(netns, password="wrong-" + PW),
                _req(netns, user="no_such_role"),
                _req(netns, kind="login"),
            ],
        )
    finally:
        db.set_hba(scram_hba)
    for res in got:
        assert res["verdict"] == "no password demanded", res
    assert "did not demand a password" in got[3]["reason"]
    # and back to SCRAM, it is accepted again
    (res,) = run_in(netns.namespace("app1"), [_req(netns)])
    assert res["verdict"] == "accepted"


@pytest.mark.root
def test_no_pg_hba_line_is_unknown_not_refused(netns: lab_netns.Network, db: Cluster) -> None:
    scram_hba = (db.datadir / "pg_hba.conf").read_text().splitlines()
    db.set_hba(["local all postgres peer map=admin", "host all all 10.99.0.0/24 scram-sha-256"])
    try:
        (res,) = run_in(netns.namespace("app1"), [_req(netns, password="wrong-" + PW)])
    finally:
        db.set_hba(scram_hba)
    assert res["verdict"] == "unknown" and "pg_hba" in res["reason"]


@pytest.mark.root
def test_stopped_server_is_unknown_never_refused(netns: lab_netns.Network, db: Cluster) -> None:
    db.stop()
    try:
        got = run_in(netns.namespace("app1"), [_req(netns), _req(netns, password="wrong-" + PW)])
    finally:
        db.start(netns=netns.namespace("db1"))
    for res in got:
        assert res["verdict"] == "unknown", res
        assert "connection refused" in res["reason"]
        assert res["control"] is None


def _psql(netns: lab_netns.Network, user: str, password: str, tmp: Path) -> tuple[int, str]:
    """Debian's psql from app1's namespace, the password in a 0600 PGPASSFILE."""
    passfile = tmp / f"pgpass-{user}-{secrets.token_hex(4)}"
    fd = os.open(passfile, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(f"{netns.address('db1')}:5432:postgres:{user}:{password}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env.update(PGPASSFILE=str(passfile), PGCONNECT_TIMEOUT="5", LC_ALL="C")
    done = subprocess.run(
        lab_netns.exec_argv(
            netns.namespace("app1"),
            [
                "/usr/bin/psql", "-X", "-w", "-At",
                f"host={netns.address('db1')} port=5432 user={user} dbname=postgres",
                "-c", "SELECT inet_client_addr()",
            ],
        ),
        capture_output=True, text=True, env=env, timeout=30,
    )  # fmt: skip
    passfile.unlink()
    return done.returncode, done.stdout + done.stderr


@pytest.mark.root
def test_psql_agrees_with_probe(netns: lab_netns.Network, db: Cluster, tmp_path: Path) -> None:
    if not os.access("/usr/bin/psql", os.X_OK):
        pytest.skip("Debian's psql (postgresql-client) is not installed")
    cases = [("probe_ok", PW), ("probe_ok", "wrong-" + PW), ("no_such_role", PW)]
    got = run_in(
        netns.namespace("app1"),
        [_req(netns, kind="login", user=u, password=pw) for u, pw in cases],
    )
    for (user, password), res in zip(cases, got, strict=True):
        code, text = _psql(netns, user, password, tmp_path)
        assert password not in text
        if res["verdict"] == "accepted":
            assert code == 0 and text.strip() == netns.address("app1"), text
        else:
            assert res["verdict"] == "refused"
            assert code != 0 and "password authentication failed" in text, text
    assert [r["verdict"] for r in got] == ["accepted", "refused", "refused"]
