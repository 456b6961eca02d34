"""The private redis-py internals meshtui relies on, in one place.

redis-py has no public way to do these three things:

* connect over TLS with an ``ssl.SSLContext`` we built (trusting the declared CA and nothing
  else): its ``SSLConnection`` always starts from ``ssl.create_default_context()``, which loads
  the system's trust store (and ``SSL_CERT_FILE``), inside the private
  ``_wrap_socket_with_ssl``;
* read on after a ``-NOAUTH`` or ``-WRONGPASS`` reply: its RESP2 parser (private
  ``redis._parsers._RESP2Parser``) maps them to ``AuthenticationError``, a ConnectionError,
  which ends the connection, so the probe could not read the replies pipelined after them;
* tell this end's address of a connection (its socket is the private ``_sock``): what the
  probe names when the login may not run ``CLIENT INFO``.

tests/kinds/redis/test_redis_private.py checks every name and behaviour used here against the
installed redis-py (pinned below), so an upgrade that changes them fails loudly there instead
of quietly trusting the system's CAs or breaking the probe.
"""

from __future__ import annotations

import socket
import ssl
from typing import Any

import redis
from redis._parsers import _RESP2Parser
from redis.connection import SSLConnection

from meshtui import cafile
from meshtui.freeform import LibraryKwargs

PINNED_REDIS_PY = "8.1.0"
"""The redis-py version these internals were checked against."""


class NoAuth(redis.ResponseError):
    """``-NOAUTH``: the server wants AUTH before anything else."""


class WrongPass(redis.ResponseError):
    """``-WRONGPASS``: the only answer that counts as a refusal."""


class ReadOnParser(_RESP2Parser):
    """redis-py's RESP2 parser, but NOAUTH and WRONGPASS are replies to read on, not errors
    that end the connection."""

    EXCEPTION_CLASSES = {
        **_RESP2Parser.EXCEPTION_CLASSES,
        "NOAUTH": NoAuth,
        "WRONGPASS": WrongPass,
    }


def tls_context(ca: str) -> ssl.SSLContext:
    """A client context trusting the CA file ``ca`` and nothing else (no system store, no
    SSL_CERT_FILE), checking the host name; the file read as root reads a credential file
    (:func:`meshtui.cafile.context`)."""
    return cafile.context(ca)


class ContextTLSConnection(SSLConnection):
    """redis-py's TLS connection, wrapped with the given context instead of one that starts
    from the system's trust store."""

    def __init__(self, *, context: ssl.SSLContext, **kwargs: Any) -> None:
        self._mesh_context = context
        super().__init__(**kwargs)

    def _wrap_socket_with_ssl(self, sock: socket.socket) -> ssl.SSLSocket:
        return self._mesh_context.wrap_socket(sock, server_hostname=self.host)


def only_ca(kwargs: LibraryKwargs) -> LibraryKwargs:
    """Connection arguments parsed from a ``rediss://`` URL whose only TLS option is
    ``ssl_ca_certs``, switched to a context trusting that CA alone; others unchanged."""
    tls = {k for k in kwargs if k.startswith("ssl_")}
    if kwargs.get("connection_class") is not SSLConnection or tls != {"ssl_ca_certs"}:
        return kwargs
    out = {k: v for k, v in kwargs.items() if k != "ssl_ca_certs"}
    out["connection_class"] = ContextTLSConnection
    out["context"] = tls_context(str(kwargs["ssl_ca_certs"]))
    return out


def local_address(conn: Any) -> str | None:
    """This end's address of a connected redis-py connection, or None when it cannot be read."""
    sock = getattr(conn, "_sock", None)
    try:
        return str(sock.getsockname()[0]) if sock is not None else None
    except (OSError, IndexError, TypeError):
        return None
