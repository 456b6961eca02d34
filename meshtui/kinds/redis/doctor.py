"""doctor's check of a Redis provider's admin file (``Kind.doctor``), run on its node: the
admin URL logs in (TLS verified against the URL's CA) and its ACL user may read and write the
ACL, as the provisioner will. Problems come with a command that fixes them."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import redis

from meshtui.contracts.provider_files import read_admin
from meshtui.errors import MeshtuiError
from meshtui.kinds.redis.adapter import admin_session
from meshtui.kinds.redis.server_config import ADMIN_RULES
from meshtui.protocol.messages import CheckProvider

GRANT = "ACL SETUSER {user} on " + ADMIN_RULES + " (and the same line in the aclfile)"


def _user_of(url: str) -> str | None:
    """The ACL user the admin URL names (never its password), or None."""
    try:
        return urlsplit(url).username
    except ValueError:
        return None


def admin_rights(item: CheckProvider, path: Path, timeout: float) -> list[tuple[str, str]]:
    """What the admin URL cannot do for the built-in provisioner, as (problem, fix) pairs."""
    user = "ADMIN"
    try:
        url = read_admin(path)
        user = _user_of(url) or user
        session = admin_session(url, item["provider"])
    except MeshtuiError as exc:
        said = str(exc)
        if "WRONGPASS" in said or "invalid username-password" in said:
            fix = (
                f"write {user}'s password into {path}, or set it in Redis: "
                f"ACL SETUSER {user} on >PASSWORD (the aclfile keeps its #sha256)"
            )
        elif "NOPERM" in said or "no permissions" in said:
            fix = GRANT.format(user=user)
        else:
            fix = f"check the server is up, its TLS and the URL in {path}"
        return [(f"the admin {user} cannot use Redis: {said}", fix)]
    try:
        session.client.acl_list()
        session.client.acl_getuser(session.admin)
    except redis.RedisError as exc:
        why = " ".join(str(exc).split())[:200]
        return [
            (
                f"admin user {session.admin} may not read the ACL ({why})",
                GRANT.format(user=session.admin),
            )
        ]
    finally:
        session.close()
    return []
