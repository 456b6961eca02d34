"""Login derivation: deterministic from (consumer node, consumer module), unique, <= 63 bytes.

A login reads ``<module>_<node>_<hash>``: readable first, with a hash of the exact names so two
consumers whose names fold to the same text still get different logins. Names are shortened
with the hash kept, never truncated blindly, so a login never exceeds PostgreSQL's 63 bytes.
"""

from __future__ import annotations

import hashlib
import re

MAX_LOGIN_BYTES = 63
HASH_CHARS = 6
_UNSAFE = re.compile(r"[^a-z0-9_]+")


def _fold(text: str) -> str:
    """Lower-case, with every run of non-identifier characters turned into one underscore."""
    return _UNSAFE.sub("_", text.lower()).strip("_") or "x"


def login_hash(node: str, module: str) -> str:
    """The suffix that makes a login unique: a hash of the exact ``node/module``."""
    return hashlib.blake2b(f"{node}/{module}".encode(), digest_size=8).hexdigest()[:HASH_CHARS]


def derive_login(node: str, module: str) -> str:
    """The login of ``node/module`` at any provider; a valid lower-case identifier."""
    suffix = login_hash(node, module)
    mod, nod = _fold(module), _fold(node)
    if mod[0].isdigit():
        mod = "m" + mod  # an identifier cannot start with a digit
    budget = MAX_LOGIN_BYTES - len(suffix) - 2  # two underscores
    if len(mod) + len(nod) > budget:
        half = budget // 2
        if len(mod) <= half:
            nod = nod[: budget - len(mod)]
        elif len(nod) <= half:
            mod = mod[: budget - len(nod)]
        else:
            mod, nod = mod[:half], nod[: budget - half]
        mod, nod = mod.rstrip("_") or "x", nod.rstrip("_") or "x"
    return f"{mod}_{nod}_{suffix}"


def is_safe_login(login: str) -> bool:
    """True for a login the mesh would derive: lower-case identifier, <= 63 bytes."""
    return bool(re.fullmatch(r"[a-z_][a-z0-9_]*", login)) and len(login.encode()) <= MAX_LOGIN_BYTES
