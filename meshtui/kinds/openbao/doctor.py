"""doctor's check of an OpenBao provider's admin file (``Kind.doctor``), run on the vault's
node: the file names an address, a CA and a token; OpenBao answers over TLS verified against
that CA, is unsealed, has AppRole and the KV v2 mount, and the token holds every capability the
provisioner and the own-secret writes use (asked of OpenBao itself, ``sys/capabilities-self``).
Nothing is written."""

from __future__ import annotations

from pathlib import Path

from meshtui.contracts.provider_files import read_admin as read_admin_file
from meshtui.errors import MeshtuiError
from meshtui.kinds.openbao.client import APPROLE_MOUNT, KV_MOUNT, SEALED, Bao, BaoError, read_admin
from meshtui.protocol.messages import CheckProvider

NEEDED: dict[str, tuple[str, ...]] = {
    f"auth/{APPROLE_MOUNT}/role": ("list",),
    f"auth/{APPROLE_MOUNT}/role/meshtui-x": ("create", "read", "update", "delete"),
    f"auth/{APPROLE_MOUNT}/role/meshtui-x/custom-secret-id": ("update",),
    "sys/policies/acl": ("list",),
    "sys/policies/acl/meshtui-x": ("create", "read", "update", "delete"),
    "auth/token/accessors": ("list", "sudo"),
    "auth/token/lookup-accessor": ("update",),
    "auth/token/revoke-accessor": ("update",),
    "sys/auth": ("read",),
    f"sys/mounts/{KV_MOUNT}": ("read",),
    f"{KV_MOUNT}/data/x/y": ("create", "update"),
    f"{KV_MOUNT}/metadata/x/y": ("read", "update"),
}
"""Each path the built-in provisioner (and the own-secret writes) use, and what it needs there."""

FIX = (
    "make a new admin token with the lines `meshtui kind config openbao` prints (its policy "
    "meshtui_provisioner, then bao token create -orphan -policy=meshtui_provisioner "
    "-period=768h … written straight into the admin file), logged in with a root or operator "
    "token; renew it weekly so it never expires (docs: A real mesh of every kind, step 6)"
)


def admin_rights(item: CheckProvider, path: Path, timeout: float) -> list[tuple[str, str]]:
    """What the admin file or its token lacks, as (problem, fix) pairs."""
    try:
        fields = read_admin(read_admin_file(path))
    except MeshtuiError as exc:
        return [(str(exc), f"fix {path}")]
    missing = [k for k in ("address", "ca", "token") if not fields.get(k)]
    if missing:
        return [(f"admin file {path} lacks {', '.join(missing)}", f"add them to {path}")]
    try:
        bao = Bao(fields["address"], ca=fields["ca"], token=fields["token"], timeout=timeout)
    except MeshtuiError as exc:
        return [(str(exc), f"fix {path}")]
    with bao:
        try:
            health = bao.send("GET", "sys/health")
            if health.status_code == SEALED:
                return [("OpenBao is sealed", "unseal it (bao operator unseal)")]
            me = bao.send("GET", "auth/token/lookup-self")
            if me.status_code == 403:
                return [("OpenBao refuses the admin token (expired or revoked)", FIX)]
            answer = bao.call("POST", "sys/capabilities-self", {"paths": list(NEEDED)}) or {}
        except BaoError as exc:
            return [(f"cannot ask OpenBao: {exc}", f"check the server is up and {path}")]
        out: list[tuple[str, str]] = []
        for where, needs in NEEDED.items():
            held = set(answer.get(where) or (answer.get("data") or {}).get(where) or [])
            lacking = [c for c in needs if c not in held and "root" not in held]
            if lacking:
                out.append((f"the admin token lacks {', '.join(lacking)} on {where}", FIX))
        try:
            auths = bao.data("GET", "sys/auth") or {}
            if f"{APPROLE_MOUNT}/" not in auths:
                out.append(
                    (f"AppRole is not enabled at auth/{APPROLE_MOUNT}", "bao auth enable approle")
                )
            mount = bao.call("GET", f"sys/mounts/{KV_MOUNT}", missing_ok=True) or {}
            if mount.get("type") != "kv" or str((mount.get("options") or {}).get("version")) != "2":
                out.append(
                    (
                        f"no KV version 2 mount at {KV_MOUNT}/",
                        f"bao secrets enable -path={KV_MOUNT} -version=2 kv",
                    )
                )
        except BaoError as exc:
            if exc.status not in (400, 403, 404):
                raise
            if exc.status in (400, 404):
                out.append(
                    (
                        f"no KV version 2 mount at {KV_MOUNT}/",
                        f"bao secrets enable -path={KV_MOUNT} -version=2 kv",
                    )
                )
        return out
