"""A credential file holding the login with the password: what each format writes, that the
password read back is the one written, and that a unit whose other lines changed is written
again (its login moved to the other alternate, its host changed)."""

from __future__ import annotations

import configparser

import pytest

from meshtui.credential_unit import held_password, password_of, render, unchanged, unit_fields
from meshtui.kinds.kind import ConnectionFacts
from meshtui.kinds.postgres.connection import connection as pg_connection
from meshtui.kinds.seaweedfs.connection import connection as s3_connection

FACTS = ConnectionFacts(
    login="gitea_app1_d1fc15_b",
    host="10.0.0.2",
    port=5432,
    values={"database": "gitea"},
    ca="/etc/ssl/ca.pem",
    tls=True,
    password_file="/etc/gitea/db.service",
)


def test_a_pg_service_unit_is_one_libpq_service_with_the_login_and_the_password() -> None:
    fields = unit_fields("pg_service", pg_connection(FACTS))
    data = render("pg_service", fields, b"s3cr3t-Pw")
    assert data.decode().splitlines() == [
        "[meshtui]",
        "user=gitea_app1_d1fc15_b",
        "host=10.0.0.2",
        "port=5432",
        "dbname=gitea",
        "sslmode=verify-full",
        "sslrootcert=/etc/ssl/ca.pem",
        "password=s3cr3t-Pw",
    ]
    assert password_of("pg_service", data) == b"s3cr3t-Pw"
    assert unchanged("pg_service", fields, data) == b"s3cr3t-Pw"
    moved = dict(fields, user="gitea_app1_d1fc15_a")
    assert unchanged("pg_service", moved, data) is None  # the other login: written again


def test_an_aws_unit_is_a_shared_credentials_file_boto3_reads() -> None:
    facts = ConnectionFacts(**{**FACTS.__dict__, "login": "gitea_app1_d1fc15", "port": 8333})
    fields = unit_fields("aws", s3_connection(facts))
    data = render("aws", fields, b"Secret/Key+1")
    parsed = configparser.ConfigParser()
    parsed.read_string(data.decode())
    assert dict(parsed["default"]) == {
        "aws_access_key_id": "gitea_app1_d1fc15",
        "aws_secret_access_key": "Secret/Key+1",
    }
    assert password_of("aws", data) == b"Secret/Key+1"


@pytest.mark.parametrize(
    ("password", "said"),
    [
        (b"two\nlines", "the password cannot be written on one line of a credential file"),
        (b" spaced", "the password cannot be written on one line of a credential file"),
        (b"", "the password cannot be written on one line of a credential file"),
        (b"\xff\xfe-secret", "the password is not UTF-8 text"),
    ],
)
def test_a_password_a_line_cannot_hold_is_refused_not_cut(password: bytes, said: str) -> None:
    with pytest.raises(ValueError) as caught:
        render("pg_service", {"user": "u"}, password)
    assert str(caught.value) == said and caught.value.__cause__ is None  # no byte of it said


def test_a_line_that_would_add_a_line_is_refused_naming_its_key() -> None:
    with pytest.raises(ValueError, match="^dbname cannot be written"):
        render("pg_service", {"dbname": "x\npassword=guess"}, b"pw")


def test_a_file_of_the_password_alone_is_its_password() -> None:
    assert held_password(None, b"abc") == b"abc" and held_password("password", b"abc") == b"abc"
    assert held_password("pg_service", b"abc") is None
