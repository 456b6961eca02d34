"""A node's policy: what its agent may do for a declaration, deny by default.

The controller's key and the operator's declaration can ask a node for a credential file, a
manifest, a grants folder, a provider kind, an admin file or a command; the agent does only
what its own policy file allows (``policy.toml`` in its state folder, owned by the agent's user,
writable by nobody else, never a link, never sent by the controller). A request for anything
else is refused for that end (:class:`~meshtui.errors.PolicyRefusal` names the node, the
module, the declaration's key and the entry that would allow it); other ends carry on.

This module reads the file (:func:`load`), decides (:meth:`Policy.consumer`,
:meth:`Policy.provider`) and writes the commented deny-by-default one ``meshtui host init``
leaves (:func:`write_default`). Running an allowed command as its user is
:mod:`meshtui.host.policy.commands`'s job.
"""

from __future__ import annotations

import grp
import ipaddress
import json
import os
import pwd
import re
import stat
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from meshtui.atomic import write_private
from meshtui.errors import PolicyFileError, PolicyRefusal, UnknownKindError
from meshtui.freeform import TomlTable
from meshtui.kinds import registry
from meshtui.model import is_builtin
from meshtui.protocol.messages import Target

POLICY_FILE = "policy.toml"
"""The policy's name in the agent's state folder."""
VERSION = 1
MAX_POLICY = 1024 * 1024
_KIND = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
_TABLES = ("credentials", "providers", "servers", "reload", "provisioner")


def normal(text: str) -> str:
    """``text`` as the agent walks it: absolute, no empty or ``.`` parts; ValueError for a
    relative path, a ``..`` or a NUL (the walk from ``/`` refuses links on its own)."""
    if not text.startswith("/") or "\x00" in text:
        raise ValueError(f"{text!r} is not an absolute path")
    parts = [p for p in text.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ValueError(f"{text!r} climbs with '..'")
    return "/" + "/".join(parts)


def below(path: str, folder: str, *, or_at: bool = False) -> bool:
    """Whether normal ``path`` is inside normal ``folder`` (or is it, with ``or_at``)."""
    if path == folder:
        return or_at
    return path.startswith(folder.rstrip("/") + "/")


@dataclass(frozen=True)
class Command:
    """One command the policy allows: its exact argv and the user (and group) it runs as."""

    argv: tuple[str, ...]
    user: str
    group: str | None = None

    def entry(self, table: str) -> str:
        """This command as the policy entry that allows it."""
        lines = [f"[[{table}]]", f"argv = {_list(self.argv)}", f"user = {_q(self.user)}"]
        if self.group is not None:
            lines.append(f"group = {_q(self.group)}")
        return "\n".join(lines)


@dataclass(frozen=True)
class CredentialRoot:
    """Consumer credential files may go strictly below ``under``, for these owners and groups."""

    under: str
    owners: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset()

    def entry(self) -> str:
        """This root as the policy entry that allows it."""
        return "\n".join(
            [
                "[[credentials]]",
                f"under = {_q(self.under)}",
                f"owners = {_list(sorted(self.owners))}",
                f"groups = {_list(sorted(self.groups))}",
            ]
        )


@dataclass(frozen=True)
class ProviderRoot:
    """Manifests and grants folders may go below ``under``, for these kinds and admin files."""

    under: str
    kinds: frozenset[str] = frozenset()
    admin: frozenset[str] = frozenset()

    def entry(self) -> str:
        """This root as the policy entry that allows it."""
        return "\n".join(
            [
                "[[providers]]",
                f"under = {_q(self.under)}",
                f"kinds = {_list(sorted(self.kinds))}",
                f"admin = {_list(sorted(self.admin))}",
            ]
        )


@dataclass(frozen=True)
class Server:
    """A server this node's credentials of one kind may be sent to: a kind whose login hands
    the server the credential itself (a vault's AppRole login, Redis's AUTH), at this address
    and port, its certificate checked against this CA file alone (None: a server without TLS).
    Nothing else is sent such a credential, nor trusted for it."""

    kind: str
    address: str
    port: int
    ca: str | None

    def entry(self) -> str:
        """This server as the policy entry that allows it."""
        lines = [
            "[[servers]]",
            f"kind = {_q(self.kind)}",
            f"address = {_q(self.address)}",
            f"port = {self.port}",
        ]
        if self.ca is not None:
            lines.append(f"ca = {_q(self.ca)}")
        return "\n".join(lines)

    def at(self, kind: str, host: str, port: int) -> bool:
        """Whether ``host``:``port`` is this server (addresses compared as addresses)."""
        return kind == self.kind and port == self.port and _same_host(host, self.address)


def _same_host(a: str, b: str) -> bool:
    try:
        return ipaddress.ip_address(a.strip("[]")) == ipaddress.ip_address(b.strip("[]"))
    except ValueError:
        return a.lower().rstrip(".") == b.lower().rstrip(".")


@dataclass(frozen=True)
class ConsumerAsk:
    """What one consumer end asks of its node (a delivery's item, or doctor's)."""

    module: str
    provision: str
    file: str
    owner: str | None
    group: str | None
    reload: Sequence[str]
    connection: str | None = None  # its connection file, when the requirement declares one


@dataclass(frozen=True)
class ProviderAsk:
    """What one provider end asks of its node: where its manifest and grants go, its kind,
    its admin file and its provisioner (None or ``builtin``: the built-in one)."""

    module: str
    provision: str
    kind: str
    receives: str
    grants: str
    admin: str | None
    provisioner: Sequence[str] | None


@dataclass(frozen=True)
class Policy:
    """A node's policy as read from its file; every decision names that file."""

    path: Path
    node: str
    credentials: tuple[CredentialRoot, ...] = ()
    providers: tuple[ProviderRoot, ...] = ()
    servers: tuple[Server, ...] = ()
    reload: tuple[Command, ...] = ()
    provisioner: tuple[Command, ...] = ()

    # ---- deciding ---------------------------------------------------------------------------
    def consumer(self, ask: ConsumerAsk) -> Command | None:
        """The reload command to run (None: none declared); PolicyRefusal for the first thing
        the policy does not allow."""
        refused = self.consumer_refusals(ask)
        if refused:
            raise refused[0]
        return self._command(self.reload, ask.reload)

    def consumer_refusals(self, ask: ConsumerAsk) -> list[PolicyRefusal]:
        """Everything of a consumer end the policy does not allow (doctor shows them all)."""
        where = f"{ask.module} requires {ask.provision}"
        try:
            path = normal(ask.file)
        except ValueError as exc:
            return [self._refuse(where, "file", str(exc), "name an absolute path")]
        out: list[PolicyRefusal] = []
        roots = [r for r in self.credentials if below(path, r.under)]
        if not roots:
            root = CredentialRoot(
                os.path.dirname(path),
                frozenset([ask.owner] if ask.owner else []),
                frozenset([ask.group] if ask.group else []),
            )
            out.append(
                self._refuse(
                    where,
                    "file",
                    f"{path} is not below a folder this node allows for credential files",
                    self._add(root.entry()),
                )
            )
        else:
            for key, name, allowed in (
                ("owner", ask.owner, [r.owners for r in roots]),
                ("group", ask.group, [r.groups for r in roots]),
            ):
                if name and not any(name in names for names in allowed):
                    out.append(
                        self._refuse(
                            where,
                            key,
                            f"{key} {name!r} of {path} is not allowed under {roots[0].under}",
                            f'add "{name}" to {key}s of the [[credentials]] entry with '
                            f"under = {_q(roots[0].under)} in {self.path}",
                        )
                    )
        if ask.connection is not None:
            out += self._connection_refusals(where, ask.connection)
        out += self._command_refusals(where, "reload", self.reload, ask.reload, ask.owner)
        return out

    def _connection_refusals(self, where: str, text: str) -> list[PolicyRefusal]:
        """A connection file goes where a credential file may (no secret in it, but an app
        reads it: a wrong path must not overwrite another file either)."""
        try:
            path = normal(text)
        except ValueError as exc:
            return [self._refuse(where, "connection", str(exc), "name an absolute path")]
        if any(below(path, r.under) for r in self.credentials):
            return []
        root = CredentialRoot(os.path.dirname(path))
        return [
            self._refuse(
                where,
                "connection",
                f"{path} is not below a folder this node allows for credential files",
                self._add(root.entry()),
            )
        ]

    def provider(self, ask: ProviderAsk) -> Command | None:
        """The provisioner command to run (None: the built-in one); PolicyRefusal for the first
        thing the policy does not allow."""
        refused = self.provider_refusals(ask)
        if refused:
            raise refused[0]
        if is_builtin(ask.provisioner):
            return None
        return self._command(self.provisioner, ask.provisioner or ())

    def provider_refusals(self, ask: ProviderAsk) -> list[PolicyRefusal]:
        """Everything of a provider end the policy does not allow (doctor shows them all)."""
        where = f"{ask.module} provides {ask.provision}"
        out: list[PolicyRefusal] = []
        try:
            receives, grants = normal(ask.receives), normal(ask.grants)
        except ValueError as exc:
            return [self._refuse(where, "receives", str(exc), "name absolute paths")]
        roots = [
            r
            for r in self.providers
            if below(receives, r.under) and below(grants, r.under, or_at=True)
        ]
        if not roots:
            root = ProviderRoot(
                os.path.dirname(receives),
                frozenset([ask.kind]),
                frozenset([ask.admin] if ask.admin else []),
            )
            key = (
                "receives"
                if not any(below(receives, r.under) for r in self.providers)
                else "grants"
            )
            path = receives if key == "receives" else grants
            out.append(
                self._refuse(
                    where,
                    key,
                    f"{path} is not below a folder this node allows for manifests and grants",
                    self._add(root.entry()),
                )
            )
        else:
            first = roots[0]
            if not any(ask.kind in r.kinds for r in roots):
                out.append(
                    self._refuse(
                        where,
                        "kind",
                        f"kind {ask.kind!r} is not allowed under {first.under}",
                        f'add "{ask.kind}" to kinds of the [[providers]] entry with '
                        f"under = {_q(first.under)} in {self.path}",
                    )
                )
            if ask.admin is not None:
                try:
                    admin = normal(ask.admin)
                except ValueError as exc:
                    admin = ""
                    out.append(self._refuse(where, "admin", str(exc), "name an absolute path"))
                # kind and admin file allowed by one entry, not each by another
                same = [r for r in roots if ask.kind in r.kinds] or roots
                if admin and not any(admin in r.admin for r in same):
                    out.append(
                        self._refuse(
                            where,
                            "admin",
                            f"admin file {admin} is not allowed under {first.under}",
                            f'add "{admin}" to admin of the [[providers]] entry with '
                            f"under = {_q(first.under)} in {self.path}",
                        )
                    )
        if not is_builtin(ask.provisioner):
            out += self._command_refusals(
                where, "provisioner", self.provisioner, ask.provisioner or (), None
            )
        return out

    def server(self, kind: str, where: str, host: str, port: int, ca: str | None) -> Server:
        """The listed server of ``kind`` at ``host``:``port`` with CA file ``ca`` (the
        request's), the only one this node's credential of that kind is sent to; PolicyRefusal
        (``where``: the module or pair asking) naming the entry to add when it lists none,
        before anything is read or connected."""
        try:
            path = normal(ca) if ca else None
        except ValueError as exc:
            raise self._refuse(where, "ca", str(exc), "name an absolute path") from None
        found = next((v for v in self.servers if v.at(kind, host, port) and v.ca == path), None)
        if found is not None:
            return found
        at = [v for v in self.servers if v.at(kind, host, port)]
        if at:
            trusted = f"CA file {at[0].ca}" if at[0].ca else "no CA (no TLS)"
            problem = f"the {kind} server at {host}:{port} is trusted here only with {trusted}"
            key = "ca"
        else:
            problem = f"{host}:{port} is not a server this node sends its {kind} credentials to"
            key = "server"
        entry = Server(kind, host.strip("[]"), port, path).entry()
        raise self._refuse(where, key, problem, self._add(entry))

    def send_refusal(self, pair: str, target: Target) -> PolicyRefusal | None:
        """Why this node's credential for ``pair`` may not go to a probe's ``target``: its kind's
        login hands the server the credential itself and the policy lists no such server (with
        that CA); None otherwise (SCRAM and SigV4 logins prove a credential without handing it
        over, and an unknown kind is not probed at all)."""
        try:
            kind = registry.kind_of(target.get("kind"))
        except UnknownKindError:
            return None
        if not kind.hands_over:
            return None
        ca = target.get("ca") if target.get("tls", True) else None
        try:
            self.server(kind.name, pair, target["host"], target["port"], ca)
        except PolicyRefusal as exc:
            return exc
        return None

    def lists_admin(self, admin: str) -> bool:
        """Whether ``admin`` is an admin file some ``[[providers]]`` entry lists (the only
        admin files the agent opens, doctor's checks included)."""
        try:
            path = normal(admin)
        except ValueError:
            return False
        return any(path in r.admin for r in self.providers)

    def inspect_refusal(
        self, module: str, provision: str, receives: str, admin: str | None
    ) -> PolicyRefusal | None:
        """Why the read-only inspection of a provider may not read its manifest or admin file
        (neither below an allowed folder), or None."""
        where = f"{module} provides {provision}"
        try:
            path = normal(receives)
            admin_path = normal(admin) if admin else None
        except ValueError as exc:
            return self._refuse(where, "receives", str(exc), "name absolute paths")
        roots = [r for r in self.providers if below(path, r.under)]
        if not roots:
            return self._refuse(
                where,
                "receives",
                f"{path} is not below a folder this node allows for manifests",
                self._add(ProviderRoot(os.path.dirname(path)).entry()),
            )
        if admin_path is not None and not any(admin_path in r.admin for r in roots):
            return self._refuse(
                where,
                "admin",
                f"admin file {admin_path} is not allowed under {roots[0].under}",
                f'add "{admin_path}" to admin of the [[providers]] entry with '
                f"under = {_q(roots[0].under)} in {self.path}",
            )
        return None

    # ---- wording ----------------------------------------------------------------------------
    def _refuse(self, where: str, key: str, problem: str, allow: str) -> PolicyRefusal:
        return PolicyRefusal(self.node, where, key, problem, allow)

    def _add(self, entry: str) -> str:
        return f"add to {self.path}: " + " ".join(
            line if line.startswith("[[") else f"{line};" for line in entry.splitlines()
        ).rstrip(";")

    @staticmethod
    def _command(allowed: Sequence[Command], argv: Sequence[str]) -> Command | None:
        if not argv:
            return None
        want = tuple(argv)
        return next((c for c in allowed if c.argv == want), None)

    def _command_refusals(
        self,
        where: str,
        table: str,
        allowed: Sequence[Command],
        argv: Sequence[str],
        user: str | None,
    ) -> list[PolicyRefusal]:
        if not argv or self._command(allowed, argv) is not None:
            return []
        suggestion = Command(tuple(argv), user or "USER")
        return [
            self._refuse(
                where,
                table,
                f"command {list(argv)} is not one this node runs (only an exact argv its "
                f"policy lists runs, as the user it names)",
                self._add(suggestion.entry(table)),
            )
        ]


# ---- reading ---------------------------------------------------------------------------------


def path_of(state_dir: Path) -> Path:
    """Where a node's policy lives: beside its keys, in its state folder."""
    return Path(os.path.abspath(state_dir)) / POLICY_FILE


def load(state_dir: Path, node: str) -> Policy:
    """The policy of the agent whose state folder is ``state_dir``; PolicyFileError naming the
    file, the key and the fix when it is missing, unsafe or malformed (the agent then refuses
    to start)."""
    path = path_of(state_dir)
    data = _read_own(path)
    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise PolicyFileError(str(path), "", "is not UTF-8 text", "write it as UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        raise PolicyFileError(
            str(path), "", f"is not valid TOML ({exc})", "fix the line named"
        ) from None
    return _parse(path, node, doc)


def _read_own(path: Path) -> bytes:
    """The policy file's bytes, if it is a regular file of the agent's user nobody else may write."""
    init = (
        "write one with meshtui host init --name NODE --state DIR --controller PUBFILE "
        "(a commented, deny-by-default policy.toml), then allow what this node needs"
    )
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise PolicyFileError(
            str(path), "", "no node policy: the agent refuses to start without one", init
        ) from None
    except OSError as exc:
        if os.path.islink(path):
            raise PolicyFileError(
                str(path), "", "is a symbolic link", "make it a regular file (not a link)"
            ) from None
        raise PolicyFileError(str(path), "", f"cannot be read ({exc.strerror})", init) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise PolicyFileError(str(path), "", "is not a regular file", init)
        me = os.geteuid()
        if st.st_uid != me:
            raise PolicyFileError(
                str(path),
                "",
                f"is owned by {_user(st.st_uid)}, not by the agent's user {_user(me)}",
                f"chown {_user(me)} {path}",
            )
        if st.st_mode & 0o022:
            raise PolicyFileError(
                str(path),
                "",
                f"can be written by others (mode {stat.S_IMODE(st.st_mode):04o})",
                f"chmod 600 {path}",
            )
        if st.st_size > MAX_POLICY:
            raise PolicyFileError(
                str(path), "", "is larger than 1 MiB", "keep only the policy in it"
            )
        return os.read(fd, MAX_POLICY + 1)
    finally:
        os.close(fd)


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


class _Reader:
    """The parse of one policy document, every error naming the file and the key."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, key: str, problem: str, fix: str) -> PolicyFileError:
        return PolicyFileError(str(self.path), key, problem, fix)

    def table(self, key: str, value: object, known: Sequence[str]) -> TomlTable:
        if not isinstance(value, dict):
            raise self.fail(key, "must be a table", f"write it as [[{key.split('[')[0]}]]")
        for k in value:
            if k not in known:
                raise self.fail(
                    f"{key}.{k}", "is not a policy key", f"use one of: {', '.join(known)}"
                )
        return value

    def entries(self, doc: TomlTable, name: str, known: Sequence[str]) -> list[TomlTable]:
        value = doc.get(name, [])
        if not isinstance(value, list):
            raise self.fail(name, "must be a list of tables", f"write each as [[{name}]]")
        return [self.table(f"{name}[{i}]", v, known) for i, v in enumerate(value)]

    def text(self, key: str, value: object) -> str:
        if not isinstance(value, str) or not value or "\x00" in value:
            raise self.fail(key, "must be a non-empty string", f'write {key} = "..."')
        return value

    def names(self, key: str, value: object) -> frozenset[str]:
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise self.fail(key, "must be a list of names", f'write {key} = ["name", ...]')
        return frozenset(value)

    def folder(self, key: str, value: object) -> str:
        text = self.text(key, value)
        try:
            path = normal(text)
        except ValueError as exc:
            raise self.fail(key, str(exc), "name an absolute folder without '..'") from None
        if path == "/":
            raise self.fail(key, "may not be /", "name the folder the agent may write in")
        return path

    def file(self, key: str, value: object) -> str:
        text = self.text(key, value)
        try:
            return normal(text)
        except ValueError as exc:
            raise self.fail(key, str(exc), "name an absolute file path without '..'") from None

    def kind(self, key: str, value: object) -> str:
        text = self.text(key, value)
        if not _KIND.match(text):
            raise self.fail(key, f"{text!r} is not a kind name", 'e.g. "openbao"')
        return text

    def address(self, key: str, value: object) -> str:
        text = self.text(key, value)
        if not re.fullmatch(r"[A-Za-z0-9.:\[\]-]{1,253}", text):
            raise self.fail(key, f"{text!r} is not a host name or address", 'e.g. "10.0.0.2"')
        return text.strip("[]")

    def port(self, key: str, value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 65536:
            raise self.fail(
                key, "must be a port number (1 to 65535)", f"write {key.split('.')[-1]} = 8200"
            )
        return value

    def command(self, key: str, entry: TomlTable) -> Command:
        argv = entry.get("argv")
        if (
            not isinstance(argv, list)
            or not argv
            or not all(isinstance(a, str) and a and "\x00" not in a for a in argv)
        ):
            raise self.fail(
                f"{key}.argv", "must be a non-empty list of strings", 'write argv = ["cmd", "arg"]'
            )
        if "user" not in entry:
            raise self.fail(
                f"{key}.user",
                "is missing: every command names the user it runs as",
                'add user = "NAME" (root only for a command that must run as root)',
            )
        user = self.text(f"{key}.user", entry["user"])
        try:
            pwd.getpwnam(user)
        except KeyError:
            raise self.fail(
                f"{key}.user", f"{user!r} is not a user on this node", "create it, or name another"
            ) from None
        group = None
        if "group" in entry:
            group = self.text(f"{key}.group", entry["group"])
            try:
                grp.getgrnam(group)
            except KeyError:
                raise self.fail(
                    f"{key}.group",
                    f"{group!r} is not a group on this node",
                    "create it, or name another",
                ) from None
        return Command(tuple(argv), user, group)


def _parse(path: Path, node: str, doc: TomlTable) -> Policy:
    r = _Reader(path)
    for key in doc:
        if key not in ("version", *_TABLES):
            raise r.fail(key, "is not a policy key", f"use one of: version, {', '.join(_TABLES)}")
    if doc.get("version", VERSION) != VERSION:
        raise r.fail("version", f"must be {VERSION}", "this meshtui reads policy version 1")
    credentials = tuple(
        CredentialRoot(
            r.folder(f"credentials[{i}].under", e.get("under")),
            r.names(f"credentials[{i}].owners", e.get("owners", [])),
            r.names(f"credentials[{i}].groups", e.get("groups", [])),
        )
        for i, e in enumerate(r.entries(doc, "credentials", ("under", "owners", "groups")))
    )
    providers: list[ProviderRoot] = []
    for i, e in enumerate(r.entries(doc, "providers", ("under", "kinds", "admin"))):
        kinds = r.names(f"providers[{i}].kinds", e.get("kinds", []))
        bad = sorted(k for k in kinds if not _KIND.match(k))
        if bad:
            raise r.fail(f"providers[{i}].kinds", f"{bad[0]!r} is not a kind name", "e.g. postgres")
        admin = r.names(f"providers[{i}].admin", e.get("admin", []))
        try:
            admin = frozenset(normal(a) for a in admin)
        except ValueError as exc:
            raise r.fail(f"providers[{i}].admin", str(exc), "name absolute file paths") from None
        providers.append(
            ProviderRoot(r.folder(f"providers[{i}].under", e.get("under")), kinds, admin)
        )
    servers = tuple(
        Server(
            r.kind(f"servers[{i}].kind", e.get("kind")),
            r.address(f"servers[{i}].address", e.get("address")),
            r.port(f"servers[{i}].port", e.get("port")),
            r.file(f"servers[{i}].ca", e["ca"]) if "ca" in e else None,
        )
        for i, e in enumerate(r.entries(doc, "servers", ("kind", "address", "port", "ca")))
    )
    commands = {
        name: tuple(
            r.command(f"{name}[{i}]", e)
            for i, e in enumerate(r.entries(doc, name, ("argv", "user", "group")))
        )
        for name in ("reload", "provisioner")
    }
    return Policy(
        path=path,
        node=node,
        credentials=credentials,
        providers=tuple(providers),
        servers=servers,
        reload=commands["reload"],
        provisioner=commands["provisioner"],
    )


# ---- writing ---------------------------------------------------------------------------------

HEADER = """\
# meshtui node policy of node {node}: what this node's agent may do when the controller asks.
#
# Deny by default. The controller's key and the operator's declaration can ask this node for a
# credential file, a manifest, a grants folder, a provider kind, an admin file, a server or a
# command; the agent does only what this file allows, and refuses the rest for that end alone (naming
# the entry that would allow it). Nothing the controller sends can change this file: edit it
# here, keep it owned by the agent's user and writable by nobody else (0600), and restart the
# agent. `meshtui doctor` and `meshtui declare FILE --check-nodes` name what a declaration needs.
version = 1
"""

EXAMPLES = """
# Consumer credential files (`requires = [{ ..., file = "..." }]`, and their `connection`
# files): only strictly below one of these folders, and only for the owners and groups listed
# with it (a file whose declaration names no owner or group stays the agent's own). An existing
# file is replaced only when it is one this agent wrote.
#
# [[credentials]]
# under  = "/etc/gitea"
# owners = ["git"]
# groups = ["git"]

# Provider ends (a module that `provides`): its manifest (`receives`) and grants folder
# (`grants`) only below one of these folders, only for these kinds and admin files. A manifest
# replaces only a manifest; a grants folder is one the agent made (0700), never chmod-ed.
#
# [[providers]]
# under = "/var/lib/meshtui/db1"
# kinds = ["postgres"]
# admin = ["/var/lib/meshtui/db1/postgres/admin.conninfo"]

# Servers this node sends a credential to, for kinds whose login hands the server the
# credential itself: a vault (`kind = "openbao"`: a module's AppRole credential, for probes and
# to read its own secrets) and Redis (`kind = "redis"`: AUTH). The agent sends such a
# credential (only a file it wrote for that pair) to no address, port or CA file but one listed
# here. `address` is the provider node's `address`, `port` and `ca` those its `provides` entry
# declares (no `ca`: a server without TLS).
#
# [[servers]]
# kind    = "openbao"
# address = "10.0.0.2"
# port    = 8200
# ca      = "/etc/ssl/meshtui/ca.pem"

# Commands: only these exact argv run, as `user` (and `group`: default the user's own), in a
# new session with no terminal. Name root only for a command that must run as root.
#
# [[reload]]
# argv = ["systemctl", "reload", "gitea"]
# user = "root"
#
# [[provisioner]]            # the manifest's path is appended when it runs
# argv  = ["/usr/local/bin/provision-mydb", "{admin}"]
# user  = "mydb"
# group = "mydb"
"""


def render(
    node: str,
    *,
    credentials: Sequence[CredentialRoot] = (),
    providers: Sequence[ProviderRoot] = (),
    servers: Sequence[Server] = (),
    reload: Sequence[Command] = (),
    provisioner: Sequence[Command] = (),
) -> str:
    """A policy file allowing exactly these entries (the lab's and the tests'), commented."""
    parts = [HEADER.format(node=node)]
    parts += [root.entry() for root in credentials]
    parts += [root.entry() for root in providers]
    parts += [server.entry() for server in servers]
    parts += [c.entry("reload") for c in reload]
    parts += [c.entry("provisioner") for c in provisioner]
    return "\n\n".join(parts) + "\n"


def write(state_dir: Path, text: str) -> Path:
    """Write ``text`` as the node's policy (0600, the agent's user's), replacing it."""
    path = path_of(state_dir)
    write_private(path, text.encode())
    return path


def write_default(state_dir: Path, node: str) -> tuple[Path, bool]:
    """The commented deny-by-default policy, unless the node has one; (path, written)."""
    path = path_of(state_dir)
    if os.path.lexists(path):
        return path, False
    return write(state_dir, HEADER.format(node=node) + EXAMPLES), True


def _q(text: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(text)


def _list(items: Sequence[str]) -> str:
    return "[" + ", ".join(_q(i) for i in items) + "]"
