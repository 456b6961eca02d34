"""doctor's check of an object store's admin file (``Kind.doctor``), run on the store's node:
the file names a master and a filer that ``weed shell`` reaches, and the store holds a static
identity of its own (without one, removing meshtui's last identity would be held back forever,
and a store that has none accepts any request)."""

from __future__ import annotations

from pathlib import Path

from meshtui.contracts.provider_files import read_admin
from meshtui.errors import MeshtuiError
from meshtui.kinds.seaweedfs.adapter import Admin
from meshtui.kinds.seaweedfs.shell import Session, find_weed
from meshtui.protocol.messages import CheckProvider


def admin_rights(item: CheckProvider, path: Path, timeout: float) -> list[tuple[str, str]]:
    """What the admin file or the store lacks for the built-in provisioner, as (problem, fix)."""
    try:
        admin = Admin.parse(read_admin(path))
        session = Session(admin.master, admin.filer, admin.config, admin.weed or find_weed())
        data, _buckets = session.export()
    except MeshtuiError as exc:
        return [(str(exc), f"fix {path}, or start the store")]
    identities = [i for i in data.get("identities") or [] if isinstance(i, dict)]
    static = [i.get("name") for i in identities if i.get("isStatic")]
    if admin.admin not in static:
        return [
            (
                f"the store holds no static identity {admin.admin!r}: meshtui will not remove "
                "its last identity, and a store with none accepts any request",
                "start weed with -s3.config naming a file that holds that identity "
                "(README: Object storage)",
            )
        ]
    return []
