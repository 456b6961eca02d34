"""The lab's one inventory for several controllers (``lab up --controllers N``): every lab
controller's settings name one PostgreSQL inventory, so what one declares or delivers the
others see, and the leader lease works between them.

That inventory is the one the lab's own state folder already names (``init --postgres``), or,
when that folder is on SQLite, one the lab raises itself: the embedded PostgreSQL in
``<state>/lab/inventory/pg`` on 127.0.0.1, its conninfo in ``<state>/lab/inventory.conninfo``
(0600, no password: root logs in over the server's socket). ``lab down`` stops it; ``lab down
--purge`` removes it and points the state folder back at its SQLite file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from meshtui.atomic import write_private
from meshtui.contracts.lab_server import LabServer, LabSite
from meshtui.controller.config import load as load_config
from meshtui.controller.config import path_of as config_path
from meshtui.controller.config import save as save_config
from meshtui.errors import LabError
from meshtui.kinds import registry
from meshtui.lab import controllers

FOLDER = "inventory"
"""The lab's own inventory server's folder, in the lab's folder."""
CONNINFO = "inventory.conninfo"
"""Its conninfo file's name, in the lab's folder."""
DATABASE = "meshtui_inventory"
SQLITE = "inventory.db"  # a state folder's SQLite inventory (the controller's INVENTORY)


def share(state_dir: Path, lab_folder: Path, others: Sequence[Path]) -> Path:
    """Point every controller's state folder (``state_dir`` first, then ``others``) at one
    PostgreSQL inventory; its conninfo file. A folder already holding an inventory of its own
    (a SQLite file, or another PostgreSQL) is refused before anything is raised or written."""
    named = check(state_dir, lab_folder, others)
    conninfo = named if named is not None else lab_folder / CONNINFO
    if conninfo == lab_folder / CONNINFO:  # the lab's own: raised, or started again after down
        _raise_own(lab_folder, conninfo)
    for folder in (state_dir, *others):
        settings = load_config(folder)
        if settings.postgres != conninfo:
            save_config(folder, replace(settings, postgres=conninfo))
    return conninfo


def names_own(state_dir: Path, lab_folder: Path) -> bool:
    """True when the state folder's inventory is the one the lab raised itself (a ``lab up
    --controllers N`` before), which every later ``lab up`` starts again."""
    return load_config(state_dir).postgres == lab_folder / CONNINFO


def check(state_dir: Path, lab_folder: Path, others: Sequence[Path]) -> Path | None:
    """LabError unless every controller's state folder can share the lab's inventory (checked
    before anything is raised); the conninfo file ``state_dir`` already names, if any."""
    named = load_config(state_dir).postgres
    conninfo = named if named is not None else lab_folder / CONNINFO
    for folder in (state_dir, *others):
        _check_free(folder, conninfo)
    return named


def _check_free(folder: Path, conninfo: Path) -> None:
    settings = load_config(folder)
    if settings.postgres is not None and settings.postgres != conninfo:
        raise LabError(
            f"{config_path(folder)}: its inventory is the PostgreSQL {settings.postgres} "
            f"names, not the lab's shared one ({conninfo}); the lab's controllers share the "
            f"inventory of the lab's own state folder: remove [inventory] there, or lab up "
            "without --controllers"
        )
    if settings.postgres is None and (folder / SQLITE).exists():
        raise LabError(
            f"{folder / SQLITE}: this controller's inventory is a SQLite file, and the lab's "
            "controllers share one PostgreSQL inventory; move it first (meshtui --state "
            f"{folder} move-inventory --to-postgres FILE) or lab up in a fresh state folder "
            "(nothing was changed)"
        )


def _server() -> LabServer:
    """The default kind's lab server (PostgreSQL's), which raises the inventory's server too."""
    server: LabServer = registry.KINDS[registry.DEFAULT].lab.load()
    return server


def _site(lab_folder: Path) -> LabSite:
    home = lab_folder / FOLDER
    return LabSite(
        folder=home / "pg",
        node_state=home,
        module="lab/inventory",
        files=home / "files",
        address="127.0.0.1",
        netns=None,
        networks=("127.0.0.1/32",),
    )


def _raise_own(lab_folder: Path, conninfo: Path) -> None:
    """Raise (or restart) the lab's own PostgreSQL, make its inventory database once and write
    the conninfo file naming it."""
    site = _site(lab_folder)
    site.node_state.mkdir(mode=0o711, parents=True, exist_ok=True)
    _server().raise_server(site)
    admin = (site.node_state / "admin.conninfo").read_text().strip()
    try:
        with psycopg.connect(admin, autocommit=True, connect_timeout=10) as conn:
            found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE])
            if found.fetchone() is None:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE)))
    except psycopg.Error as exc:
        raise LabError(f"the lab's inventory PostgreSQL in {site.folder}: {exc}") from None
    write_private(conninfo, (make_conninfo(admin, dbname=DATABASE) + "\n").encode())


def stop(state_dir: Path, lab_folder: Path, *, purge: bool) -> list[str]:
    """Stop the lab's own inventory server (if it raised one); ``purge``: the state folders
    that named it go back to their SQLite file (its data goes with the lab's folder)."""
    done: list[str] = []
    site = _site(lab_folder)
    if _server().stop(site.folder, purge=purge, say=lambda _line: None):
        done.append("stopped the controllers' inventory PostgreSQL")
    if purge:
        conninfo = lab_folder / CONNINFO
        for folder in (state_dir, *sorted((lab_folder / controllers.FOLDER).glob("*"))):
            if config_path(folder).exists() and load_config(folder).postgres == conninfo:
                save_config(folder, replace(load_config(folder), postgres=None))
    return done
