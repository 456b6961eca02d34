"""The private redis-py internals behind meshtui/host/redis_private.py still exist and work.

When a redis-py upgrade renames or reshapes one of them, this fails and names it; fix the
adapter (or use the public API that replaced it) before upgrading.
"""

from __future__ import annotations

import inspect
import ssl
from pathlib import Path
from typing import Any

import pytest
import redis
from redis._parsers import _RESP2Parser
from redis.connection import SSLConnection, parse_url

from meshtui.kinds.redis import lab as lab_redis
from meshtui.kinds.redis import private as redis_private
from meshtui.kinds.redis import probe as probe_redis
from meshtui.kinds.redis.private import (
    ContextTLSConnection,
    NoAuth,
    ReadOnParser,
    WrongPass,
    only_ca,
    tls_context,
)
from meshtui.lab.certificates import make_certificates


def test_ssl_connection_wraps_its_socket_in_the_private_hook() -> None:
    hook = SSLConnection.__dict__.get("_wrap_socket_with_ssl")
    assert callable(hook), "SSLConnection._wrap_socket_with_ssl is gone"
    assert list(inspect.signature(hook).parameters) == ["self", "sock"], (
        "SSLConnection._wrap_socket_with_ssl takes other arguments now"
    )
    assert "_wrap_socket_with_ssl(" in inspect.getsource(SSLConnection._connect), (
        "SSLConnection._connect no longer calls _wrap_socket_with_ssl: our context is not used"
    )


def test_resp2_parser_still_maps_error_codes_through_its_class_table() -> None:
    table = _RESP2Parser.__dict__.get("EXCEPTION_CLASSES") or _RESP2Parser.EXCEPTION_CLASSES
    assert isinstance(table, dict) and "WRONGPASS" in table, "EXCEPTION_CLASSES changed shape"
    parser: Any = ReadOnParser(65536)
    assert type(parser.parse_error("NOAUTH Authentication required.")) is NoAuth
    assert type(parser.parse_error("WRONGPASS invalid username-password pair")) is WrongPass
    assert not isinstance(parser.parse_error("WRONGPASS x"), redis.ConnectionError)


def test_a_context_connection_trusts_our_context_only(
    redis_server: lab_redis.RedisServer, tmp_path: Path
) -> None:
    """With no ssl_ca_certs, only the context we pass can make the lab CA trusted."""
    common: dict[str, Any] = {
        "host": redis_server.address,
        "port": redis_server.port,
        "protocol": 2,
        "socket_timeout": 5,
        "parser_class": ReadOnParser,
    }
    conn: Any = ContextTLSConnection(context=tls_context(str(redis_server.ca)), **common)
    try:
        conn.connect()
        conn.send_packed_command(
            conn.pack_commands([("PING",), ("AUTH", "nobody", "x"), ("PING",)])
        )
        replies = []
        for _ in range(3):
            try:
                replies.append(conn.read_response())
            except redis.ResponseError as exc:
                replies.append(exc)
    finally:
        conn.disconnect()
    assert [type(r) for r in replies] == [NoAuth, WrongPass, NoAuth], replies
    (tmp_path / "other").mkdir()
    make_certificates(tmp_path / "other", "127.0.0.1", server="Redis")
    other = tmp_path / "other" / "ca.pem"  # a CA that did not sign the server's certificate
    stranger: Any = ContextTLSConnection(context=tls_context(str(other)), **common)
    with pytest.raises(redis.ConnectionError, match="certificate verify failed"):
        stranger.connect()
    stranger.disconnect()


def test_only_ca_switches_a_ca_only_url_and_leaves_the_rest(tmp_path: Path) -> None:
    (tmp_path / "pki").mkdir()
    make_certificates(tmp_path / "pki", "127.0.0.1", server="Redis")
    ca = tmp_path / "pki" / "ca.pem"
    switched = only_ca(dict(parse_url(f"rediss://a:b@127.0.0.1:1/0?ssl_ca_certs={ca}")))
    assert switched["connection_class"] is ContextTLSConnection
    assert isinstance(switched["context"], ssl.SSLContext) and "ssl_ca_certs" not in switched
    with_cert = dict(parse_url(f"rediss://a:b@h:1/0?ssl_ca_certs={ca}&ssl_certfile=/c.pem"))
    assert only_ca(with_cert) == with_cert  # client certificates: redis-py's own path
    plain = dict(parse_url("redis://a:b@h:1/0"))
    assert only_ca(plain) == plain
    with pytest.raises(OSError):
        only_ca(dict(parse_url(f"rediss://a:b@h:1/0?ssl_ca_certs={tmp_path}/missing.pem")))


def test_the_pin_names_a_redis_py_with_these_internals() -> None:
    major = int(redis_private.PINNED_REDIS_PY.split(".")[0])
    assert major >= 5  # redis._parsers exists from redis-py 5


def test_a_connection_keeps_its_socket_in_the_private_sock() -> None:
    import socket

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        conn: Any = redis.connection.Connection(
            host="127.0.0.1",
            port=listener.getsockname()[1],
            socket_connect_timeout=2,
            protocol=2,
            **probe_redis._NO_LIB_INFO,
        )
        assert redis_private.local_address(conn) is None  # not connected yet
        conn.connect()  # sends nothing: no password, no name, no library info
        try:
            assert redis_private.local_address(conn) == "127.0.0.1"
        finally:
            conn.disconnect()
