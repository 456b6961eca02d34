"""What a kind's server must be told to serve a mesh: :class:`ServerConfig`, built by the
kind's ``Kind.server_config`` from a :class:`ServerPlace`.

One function per kind writes each file a real server of that kind needs (its configuration with
TLS, the least-privilege admin the provisioner logs in as, the admin file's shape) and says what
to run once and what expires. ``meshtui kind config KIND`` prints or writes it for an operator;
the kind's ``lab.py`` writes its lab server's files with the same function, so the printed
configuration is the one the lab tests run.

No file holds a secret: where one needs a secret (an admin password, a token), its text holds a
placeholder from :data:`PLACEHOLDERS` and its ``secret`` says how to make the secret and where
it goes. Imports nothing of meshtui.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

PASSWORD = "<ADMIN-PASSWORD>"
"""Stands for the admin's password in a printed file (never a real one)."""

PASSWORD_SHA256 = "<SHA256-OF-ADMIN-PASSWORD>"
"""Stands for the hex SHA-256 of the admin's password (Redis's aclfile)."""

TOKEN = "<ADMIN-TOKEN>"
"""Stands for the admin's token (OpenBao)."""

SECRET_KEY = "<ADMIN-SECRET-KEY>"
"""Stands for a static identity's secret key (SeaweedFS)."""

PLACEHOLDERS = (PASSWORD, PASSWORD_SHA256, TOKEN, SECRET_KEY)
"""Every placeholder a printed file may hold in place of a secret."""


@dataclass(frozen=True)
class ServerPlace:
    """Where one server lives on its node: the inputs of a kind's ``server_config``.

    ``address``: the private address it listens on (its certificate names it); ``port``: the
    port consumers reach; ``cert``/``key``: its TLS certificate and key; ``ca``: the CA that
    signed it (what consumers and the admin file verify against); ``conf``: the folder its
    configuration files go in; ``data``: the folder it keeps its data in; ``admin``: the name of
    the provisioner's admin (a role, an ACL user, a policy, an identity); ``admin_file``: the
    provisioner's admin file on the node (what the declaration's ``admin`` names); ``networks``:
    where consumers connect from (CIDRs).
    """

    address: str
    port: int
    cert: str
    key: str
    ca: str
    conf: str
    data: str
    admin: str
    admin_file: str
    networks: tuple[str, ...] = ()


@dataclass(frozen=True)
class ConfigFile:
    """One file of a server's configuration.

    ``name``: its file name (in ``place.conf`` unless ``path`` says otherwise); ``purpose``: one
    line saying why it exists; ``text``: its whole content; ``mode``: the mode to write it with
    (0600 for anything that holds, or will hold, a secret); ``secret``: empty, or how to make the
    secret its placeholder stands for and put it in; ``path``: where it goes on the node.
    """

    name: str
    purpose: str
    text: str
    path: str
    mode: int = 0o644
    secret: str = ""


@dataclass(frozen=True)
class ServerConfig:
    """A kind's server, configured for the mesh: its files, the commands to run once (in
    order, none holding a secret), and what expires with how to renew it."""

    title: str
    files: tuple[ConfigFile, ...]
    steps: tuple[str, ...] = ()
    expires: tuple[str, ...] = ()

    def file(self, name: str) -> ConfigFile:
        """The file named ``name`` (KeyError when it has none)."""
        for item in self.files:
            if item.name == name:
                return item
        raise KeyError(name)


@dataclass(frozen=True)
class ServerRecipe:
    """What ``Kind.server_config`` names: the usual place of a kind's server on a node (the
    manual's paths, on the walk's database node) and the function that configures it."""

    default: ServerPlace
    build: Callable[[ServerPlace], ServerConfig]
