"""Client-side SCRAM verifiers agree with libpq and with the server."""

from __future__ import annotations

import base64
import hashlib

import psycopg
import pytest
from psycopg import sql

from meshtui.kinds.postgres.lab import Cluster
from meshtui.kinds.postgres.scram import (
    VerifiersAhead,
    is_plain_ascii,
    parse_verifier,
    scram_matches,
    scram_verifier,
)


def test_shape_and_offline_check() -> None:
    verifier = scram_verifier("correct horse", salt=b"0123456789abcdef")
    iterations, salt, stored, server = parse_verifier(verifier)
    assert verifier.startswith("SCRAM-SHA-256$4096:" + base64.b64encode(salt).decode() + "$")
    assert (iterations, salt, len(stored), len(server)) == (4096, b"0123456789abcdef", 32, 32)
    assert scram_matches(verifier, "correct horse")
    assert not scram_matches(verifier, "correct horsE")
    assert not scram_matches("md5" + "0" * 32, "correct horse")


def test_known_vector() -> None:
    # independent recomputation of RFC 5802's keys for a fixed salt
    salt = b"\x01" * 16
    salted = hashlib.pbkdf2_hmac("sha256", b"pw", salt, 4096)
    import hmac

    client = hmac.new(salted, b"Client Key", "sha256").digest()
    stored = base64.b64encode(hashlib.sha256(client).digest()).decode()
    server = base64.b64encode(hmac.new(salted, b"Server Key", "sha256").digest()).decode()
    assert scram_verifier("pw", salt=salt).endswith(f"${stored}:{server}")


def test_salts_differ() -> None:
    assert scram_verifier("same") != scram_verifier("same")


@pytest.mark.parametrize("bad", ["", "tab\there", "é", "x\x00"])
def test_needs_saslprep_is_refused(bad: str) -> None:
    assert not is_plain_ascii(bad)
    with pytest.raises(ValueError):
        scram_verifier(bad)


def test_verifiers_ahead_come_in_order_each_of_its_password() -> None:
    passwords = [f"password-{i}" for i in range(20)]
    with VerifiersAhead(passwords, iterations=64, workers=3) as made:
        got = [made.take() for _ in passwords]
    assert all(scram_matches(v, p) for v, p in zip(got, passwords, strict=True))
    assert all(parse_verifier(v)[0] == 64 for v in got)


def test_verifiers_ahead_left_early_stops_cleanly() -> None:
    with VerifiersAhead([f"p{i}" for i in range(50)], iterations=4096, workers=2) as made:
        first = made.take()
    assert scram_matches(first, "p0")


@pytest.mark.parametrize("junk", ["", "SCRAM-SHA-256$x", "SCRAM-SHA-256$4096:!!$a:b", "md5abc"])
def test_parse_rejects_junk(junk: str) -> None:
    with pytest.raises(ValueError):
        parse_verifier(junk)


def test_libpq_verifier_checks_offline(pg: Cluster) -> None:
    with psycopg.connect(pg.admin_conninfo()) as conn:
        made = conn.pgconn.encrypt_password(b"libpq-made", b"whoever", b"scram-sha-256")
    assert scram_matches(made.decode(), "libpq-made")
    assert not scram_matches(made.decode(), "libpq-madE")


def test_server_accepts_our_verifier(pg_clean: Cluster) -> None:
    password = "Ours-4096-verifier"
    verifier = scram_verifier(password)
    with psycopg.connect(pg_clean.admin_conninfo(), autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE ROLE scram_probe LOGIN PASSWORD {}").format(sql.Literal(verifier))
        )
        stored = conn.execute(
            "SELECT rolpassword FROM pg_authid WHERE rolname = 'scram_probe'"
        ).fetchone()
    assert stored == (verifier,)
    tcp = {"host": "127.0.0.1", "port": pg_clean.port, "user": "scram_probe", "dbname": "postgres"}
    with psycopg.connect(**tcp, password=password, require_auth="scram-sha-256") as conn:
        assert conn.pgconn.used_password
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(**tcp, password=password + "x")
