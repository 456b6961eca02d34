"""An OpenBao configured for the mesh (``Kind.server_config``): raft storage, a TLS listener on
the private address, a file audit device, and the provisioner's policy and periodic token.

The policy (:data:`PROVISIONER_POLICY`) allows meshtui's AppRole roles and ACL policies
(``meshtui-*``), the accessors of the tokens they issued (to revoke them on removal), reading
what is mounted, and writing (never reading) modules' own secrets. It reads nothing else under
``sys/`` and no secret's value. The admin token is periodic (:data:`ADMIN_PERIOD`): it lives
as long as it is renewed within each period. The lab's OpenBao (``lab.py``) writes the same
server blocks and policy and makes its token the same way.
"""

from __future__ import annotations

import json

from meshtui.contracts.server_config import (
    TOKEN,
    ConfigFile,
    ServerConfig,
    ServerPlace,
    ServerRecipe,
)
from meshtui.model import KV_MOUNT

APPROLE_MOUNT = "approle"
"""Where AppRole is enabled: the provisioner writes roles there, probes and modules log in."""

PROVISIONER_POLICY_NAME = "meshtui_provisioner"
ADMIN_PERIOD = "768h"
"""The admin token's period: renewed within 32 days, it never expires."""

PROVISIONER_POLICY = f"""\
# meshtui's provisioner: AppRole roles and ACL policies named meshtui-*, the accessors of the
# tokens they issued (to revoke them on removal), and reading what is mounted (to say what is
# missing). No secret's value is readable with this token.
path "auth/{APPROLE_MOUNT}/role" {{ capabilities = ["list"] }}
path "auth/{APPROLE_MOUNT}/role/meshtui-*" {{
  capabilities = ["create", "read", "update", "delete", "list"]
}}
path "sys/policies/acl" {{ capabilities = ["list"] }}
path "sys/policies/acl/meshtui-*" {{ capabilities = ["create", "read", "update", "delete"] }}
path "auth/token/accessors" {{ capabilities = ["list", "sudo"] }}
path "auth/token/lookup-accessor" {{ capabilities = ["update"] }}
path "auth/token/revoke-accessor" {{ capabilities = ["update"] }}
path "sys/auth" {{ capabilities = ["read"] }}
path "sys/mounts/{KV_MOUNT}" {{ capabilities = ["read"] }}
# a module's own secrets: the vault node's agent writes them (never reads a value back)
path "{KV_MOUNT}/data/*" {{ capabilities = ["create", "update"] }}
path "{KV_MOUNT}/metadata/*" {{ capabilities = ["read", "create", "update"] }}
"""

TOKEN_FIELDS = {
    "policies": [PROVISIONER_POLICY_NAME],
    "period": ADMIN_PERIOD,
    "display_name": PROVISIONER_POLICY_NAME,
    "renewable": True,
}
"""``auth/token/create-orphan``'s body for the admin token (the lab sends exactly this)."""


def hcl_string(text: str) -> str:
    """``text`` as an HCL string (JSON's quoting); ValueError if HCL could read more into it."""
    if "${" in text or "%{" in text or any(ord(c) < 32 for c in text):
        raise ValueError(f"{text!r} cannot go into OpenBao's configuration; use a plainer path")
    return json.dumps(text)


def server_blocks(place: ServerPlace, *, cluster_port: int, node_id: str) -> str:
    """The server's configuration: raft in ``place.data`` at its production timing (the default
    multiplier has a lone node wait 5 to 10 s before it elects itself, at every start), the TLS
    listener, the audit device in ``audit/`` beside the data folder (OpenBao 2.7 takes one only
    from its configuration), its addresses."""
    q = hcl_string
    return f"""\
storage "raft" {{
  path    = {q(place.data)}
  node_id = {q(node_id)}
  performance_multiplier = 1
}}
listener "tcp" {{
  address         = {q(f"{place.address}:{place.port}")}
  cluster_address = {q(f"{place.address}:{cluster_port}")}
  tls_cert_file   = {q(place.cert)}
  tls_key_file    = {q(place.key)}
  tls_min_version = "tls12"
}}
audit "file" "meshtui" {{
  options {{
    file_path = {q(place.data.rstrip("/").rsplit("/", 1)[0] + "/audit/audit.log")}
    mode      = "0600"
  }}
}}
api_addr      = {q(f"https://{place.address}:{place.port}")}
cluster_addr  = {q(f"https://{place.address}:{cluster_port}")}
disable_mlock = true
ui            = false
"""


def admin_text(address: str, ca: str, token: str) -> str:
    """The provisioner's admin file: TOML naming the address, the CA and the token."""
    fields = {"address": address, "ca": ca, "token": token}
    return "".join(f"{k} = {json.dumps(v)}\n" for k, v in fields.items())


def token_into_file(url: str, ca: str, admin_file: str) -> str:
    """The shell that takes a token on its standard input and writes the admin file (0600)
    around it; it writes nothing when no token came (``bao token create`` failed, the vault
    sealed), so a failure never leaves an admin file with an empty token."""
    fields = f'address = "{url}"\\nca = "{ca}"\\ntoken = "%s"\\n'
    return f'(umask 077; {{ read -r T; [ -n "$T" ]; }} && printf \'{fields}\' "$T" > {admin_file})'


def renew_command(url: str, ca: str, admin_file: str) -> str:
    """One line that renews the admin token read from ``admin_file``: the token goes to curl as
    a header on its standard input, never on a command line or in the environment; it prints
    OpenBao's status code, and fails (curl's 22) unless it is 200."""
    header = 's/^token = "\\(.*\\)"$/X-Vault-Token: \\1/p'
    return (
        f"sed -n '{header}' {admin_file} | curl -fsS -o /dev/null -w '%{{http_code}}\\n' "
        f"--cacert {ca} -H @- -X POST {url}/v1/auth/token/renew-self"
    )


def build(place: ServerPlace) -> ServerConfig:
    """OpenBao's files for ``place`` (see the module docstring)."""
    url = f"https://{place.address}:{place.port}"
    policy = place.admin
    policy_file = f"{place.conf}/{policy}.hcl"
    env = f"export BAO_ADDR={url} BAO_CACERT={place.ca}"
    token_fields = f"-policy={policy} -period={ADMIN_PERIOD} -display-name={policy}"
    return ServerConfig(
        title="OpenBao",
        files=(
            ConfigFile(
                "bao.hcl",
                "the server: raft storage, TLS on the private address, the file audit device",
                server_blocks(place, cluster_port=place.port + 1, node_id="meshtui"),
                f"{place.conf}/bao.hcl",
                0o644,
            ),
            ConfigFile(
                f"{policy}.hcl",
                "the provisioner's policy: meshtui-* roles and policies, token accessors, "
                "what is mounted; no secret's value",
                PROVISIONER_POLICY,
                policy_file,
                0o644,
            ),
            ConfigFile(
                "admin.toml",
                "the provisioner's admin file (the declaration's admin): address, CA, token",
                admin_text(url, place.ca, TOKEN),
                place.admin_file,
                0o600,
                f"made by `bao token create -orphan {token_fields} -field=token` (a root or "
                f'operator token logged in); put it in {place.admin_file} as token = "…" '
                "without typing it (pipe it in, umask 077)",
            ),
        ),
        steps=(
            env,
            "bao operator init -key-shares=1 -key-threshold=1   # keep the unseal key and root "
            "token OFF this machine",
            "bao operator unseal",
            "bao login",
            f"bao auth enable {APPROLE_MOUNT}",
            f"bao secrets enable -path={KV_MOUNT} -version=2 kv",
            f"bao policy write {policy} {policy_file}",
            f"bao token create -orphan {token_fields} -field=token | "
            + token_into_file(url, place.ca, place.admin_file),
            "bao token revoke -self",
        ),
        expires=(
            f"the admin token: periodic ({ADMIN_PERIOD}), it expires unless renewed within "
            "each period; renew it weekly from a root cron job or timer, the token handed "
            "from the admin file to curl on its standard input (never an argument or the "
            f"environment): {renew_command(url, place.ca, place.admin_file)}",
            "an expired token is refused before anything changes and `meshtui doctor` names "
            "it: make a new one as above and write it into the admin file",
            "the server certificate: make a new one with the same CA, then restart openbao",
        ),
    )


DEFAULT = ServerPlace(
    address="10.0.0.2",
    port=8200,
    cert="/etc/openbao/tls/server.pem",
    key="/etc/openbao/tls/server.key",
    ca="/etc/ssl/meshtui/ca.pem",
    conf="/etc/openbao",
    data="/var/lib/openbao/data",
    admin=PROVISIONER_POLICY_NAME,
    admin_file="/var/lib/meshtui/db1/openbao/admin.toml",
)
"""The walk's OpenBao on db1."""

RECIPE = ServerRecipe(DEFAULT, build)
"""What ``Kind.server_config`` names."""
