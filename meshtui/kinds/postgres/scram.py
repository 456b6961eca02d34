"""Client-side SCRAM-SHA-256 verifiers (RFC 5802/7677, PostgreSQL's stored format).

The provisioner hands PostgreSQL a verifier, never the password, so the plaintext cannot reach
a server log, ``pg_stat_statements`` or a replica. ``scram_matches`` checks a stored verifier
against a password offline (used by tests and audits; it costs one PBKDF2, ~0.7 ms).

PostgreSQL runs SASLprep over the password before hashing; SASLprep leaves printable ASCII
unchanged, which is what :func:`is_plain_ascii` tests. For anything else callers must let libpq
(``PGconn.encrypt_password``) build the verifier, since it applies SASLprep exactly as the
server does.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

PREFIX = "SCRAM-SHA-256"
DEFAULT_ITERATIONS = 4096  # PostgreSQL's default scram_iterations
SALT_BYTES = 16  # PostgreSQL's SCRAM_DEFAULT_SALT_LEN


def is_plain_ascii(password: str) -> bool:
    """True when SASLprep is the identity on ``password`` (non-empty printable ASCII)."""
    return bool(password) and all(0x20 <= ord(ch) <= 0x7E for ch in password)


def _keys(salted: bytes) -> tuple[bytes, bytes]:
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    stored_key = hashlib.sha256(client_key).digest()
    server_key = hmac.new(salted, b"Server Key", hashlib.sha256).digest()
    return stored_key, server_key


def scram_verifier(
    password: str, *, iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None
) -> str:
    """``SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`` for a printable-ASCII password.

    A fresh random salt is drawn unless one is given (tests only). Raises ValueError for a
    password that needs SASLprep (use libpq for those) or a silly iteration count.
    """
    if not is_plain_ascii(password):
        raise ValueError("password needs SASLprep: build its verifier with libpq")
    if not 1 <= iterations <= 10_000_000:
        raise ValueError(f"iteration count {iterations} out of range")
    salt = os.urandom(SALT_BYTES) if salt is None else salt
    salted = hashlib.pbkdf2_hmac("sha256", password.encode("ascii"), salt, iterations)
    stored_key, server_key = _keys(salted)
    b64 = base64.b64encode
    return (
        f"{PREFIX}${iterations}:{b64(salt).decode()}"
        f"${b64(stored_key).decode()}:{b64(server_key).decode()}"
    )


def parse_verifier(verifier: str) -> tuple[int, bytes, bytes, bytes]:
    """Split a verifier into (iterations, salt, StoredKey, ServerKey); ValueError if not one."""
    try:
        method, rest = verifier.split("$", 1)
        iter_salt, keys = rest.split("$")
        iterations_text, salt_text = iter_salt.split(":")
        stored_text, server_text = keys.split(":")
        if method != PREFIX:
            raise ValueError(method)
        iterations = int(iterations_text)
        salt = base64.b64decode(salt_text, validate=True)
        stored_key = base64.b64decode(stored_text, validate=True)
        server_key = base64.b64decode(server_text, validate=True)
    except ValueError:
        raise ValueError("not a SCRAM-SHA-256 verifier") from None
    if iterations < 1 or len(stored_key) != 32 or len(server_key) != 32:
        raise ValueError("not a SCRAM-SHA-256 verifier")
    return iterations, salt, stored_key, server_key


def scram_matches(verifier: str, password: str) -> bool:
    """Whether ``verifier`` was made from ``password`` (printable ASCII); False if no verifier."""
    try:
        iterations, salt, stored_key, server_key = parse_verifier(verifier)
    except ValueError:
        return False
    if not is_plain_ascii(password):
        return False
    salted = hashlib.pbkdf2_hmac("sha256", password.encode("ascii"), salt, iterations)
    want_stored, want_server = _keys(salted)
    return hmac.compare_digest(want_stored, stored_key) and hmac.compare_digest(
        want_server, server_key
    )


class VerifiersAhead:
    """Verifiers of many printable-ASCII passwords, handed out in order while worker threads
    compute the next ones (PBKDF2 releases the GIL).

    A batch writes verifiers a few dozen a round trip; the server checks each one with a PBKDF2
    of its own (PostgreSQL's empty-password check), so computing the next ones while it works
    hides this side's hashing instead of adding it in front. Use it with ``with``: leaving
    cancels what was not computed yet.
    """

    def __init__(self, passwords: Sequence[str], *, iterations: int, workers: int) -> None:
        self._pool = ThreadPoolExecutor(max_workers=max(1, workers))
        self._made: list[Future[str]] = [
            self._pool.submit(scram_verifier, p, iterations=iterations) for p in passwords
        ]
        self._next = 0

    def __enter__(self) -> VerifiersAhead:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def take(self) -> str:
        """The next password's verifier (waits until it is computed)."""
        future = self._made[self._next]
        self._made[self._next] = _DONE  # hand it out once, keep no verifier here
        self._next += 1
        return future.result()

    def close(self) -> None:
        """Stop computing; verifiers not taken are dropped."""
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._made.clear()


_DONE: Future[str] = Future()
