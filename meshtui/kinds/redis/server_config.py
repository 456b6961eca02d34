"""A Redis configured for the mesh (``Kind.server_config``): TLS only, an aclfile with
``default`` off, and the provisioner's admin ACL user allowed the ACL and nothing else.

The admin reads and writes the ACL (``ACL LIST``, ``GETUSER``, ``SETUSER``, ``DELUSER``,
``SAVE``, ``WHOAMI``, ``CAT``), reads two settings (``CONFIG GET aclfile``, ``INFO server``:
where to persist), may ``CONFIG REWRITE`` a Redis started without an aclfile, and may end or count a
login's connections (``CLIENT KILL USER``, ``CLIENT LIST``). It reaches no
key and no channel and cannot ``FLUSHALL``, ``CONFIG SET`` or ``SHUTDOWN``. It can still make
any user it likes (``ACL SETUSER`` is all-or-nothing in Redis): keep its file as guarded as any
admin credential. The lab's Redis (``lab.py``) writes these same lines.
"""

from __future__ import annotations

from urllib.parse import quote

from meshtui.contracts.server_config import (
    PASSWORD,
    PASSWORD_SHA256,
    ConfigFile,
    ServerConfig,
    ServerPlace,
    ServerRecipe,
)

ADMIN_RULES = (
    "resetkeys resetchannels -@all +acl +config|get +config|rewrite +info +ping +hello +auth "
    "+client|kill +client|list"
)
"""What the provisioner's admin may run: the ACL, reading where Redis persists it, and ending
or counting a login's connections (``CLIENT KILL USER`` after a leaked password is rotated,
``CLIENT LIST`` for the sessions left to drain: addresses and user names, no secret)."""

DEFAULT_USER = "user default off resetkeys resetchannels -@all"
"""``default`` switched off: nobody uses Redis without an ACL user and its password."""


def acl_line(admin: str, sha256: str) -> str:
    """The aclfile line of the provisioner's admin, its password as its hex SHA-256."""
    return f"user {admin} on #{sha256} {ADMIN_RULES}"


def conf_lines(place: ServerPlace, aclfile: str) -> list[str]:
    """``redis.conf``'s lines for the mesh: TLS only on the private address, the aclfile."""
    return [
        f"bind {place.address}",
        "protected-mode yes",
        "port 0",
        f"tls-port {place.port}",
        f"tls-cert-file {place.cert}",
        f"tls-key-file {place.key}",
        f"tls-ca-cert-file {place.ca}",
        "tls-auth-clients no",
        f"aclfile {aclfile}",
    ]


def admin_url(place: ServerPlace, password: str) -> str:
    """The provisioner's admin file: a rediss:// URL verifying the server against the CA."""
    return (
        f"rediss://{place.admin}:{quote(password, safe='')}@{place.address}:{place.port}/0"
        f"?ssl_ca_certs={quote(place.ca, safe='/')}"
    )


def build(place: ServerPlace) -> ServerConfig:
    """Redis's files for ``place`` (see the module docstring)."""
    aclfile = f"{place.conf}/users.acl"
    make = (
        "make a password (head -c 32 /dev/urandom | base64 | tr -d '/+='); put its SHA-256 "
        "(printf %s PASSWORD | sha256sum) in users.acl and the password itself in "
        f"{place.admin_file}; never on a command line you keep"
    )
    return ServerConfig(
        title="Redis",
        files=(
            ConfigFile(
                "meshtui.conf",
                "included last by redis.conf: TLS only on the private address, the aclfile "
                "the provisioner saves to",
                "\n".join(conf_lines(place, aclfile)) + "\n",
                f"{place.conf}/meshtui.conf",
                0o644,
            ),
            ConfigFile(
                "users.acl",
                "default off; the provisioner's admin may use the ACL and nothing else "
                "(owner redis, Redis rewrites it on ACL SAVE)",
                f"{DEFAULT_USER}\n{acl_line(place.admin, PASSWORD_SHA256)}\n",
                aclfile,
                0o600,
                make,
            ),
            ConfigFile(
                "admin.url",
                "the provisioner's admin file (the declaration's admin), owned by the agent's user",
                admin_url(place, "").replace(":@", f":{PASSWORD}@", 1) + "\n",
                place.admin_file,
                0o600,
                make,
            ),
        ),
        steps=(
            f"echo 'include {place.conf}/meshtui.conf' >> {place.conf}/redis.conf",
            f"chown redis:redis {aclfile}",
            "systemctl restart redis-server",
        ),
        expires=(
            "nothing of Redis's own expires; the server certificate does (make a new one with "
            "the same CA and restart redis-server)",
        ),
    )


DEFAULT = ServerPlace(
    address="10.0.0.2",
    port=6379,
    cert="/etc/redis/tls/server.pem",
    key="/etc/redis/tls/server.key",
    ca="/etc/ssl/meshtui/ca.pem",
    conf="/etc/redis",
    data="/var/lib/redis",
    admin="meshtui-admin",
    admin_file="/var/lib/meshtui/db1/redis/admin.url",
)
"""The walk's Redis on db1."""

RECIPE = ServerRecipe(DEFAULT, build)
"""What ``Kind.server_config`` names."""
