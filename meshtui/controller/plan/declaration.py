"""TOML declaration -> model: nodes, modules, and the pairs they imply.

Every error names the file, the table or key, and the fix. Fan-out is per consumer module, each
``requires`` resolves to exactly one provider module, and logins are derived here (never by the
provider), so a collision is caught before anything is minted.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from meshtui import crypto
from meshtui.controller.plan.naming import derive_login
from meshtui.credential_unit import PASSWORD, UNIT_FORMATS
from meshtui.errors import DeclarationError, KeyFileError, UnknownKindError
from meshtui.freeform import TomlTable
from meshtui.kinds import registry
from meshtui.kinds.kind import Kind, ValuesError
from meshtui.model import (
    ACCOUNT_RE,
    ALPHABETS,
    BUILTIN,
    BUILTIN_ARGV,
    CONNECTION_FORMATS,
    DEFAULT_GRACE_S,
    DEFAULT_MODE,
    NAME_RE,
    OVERLAP,
    ROTATIONS,
    SWAP,
    VAULT_PROVISION,
    ConnectionFile,
    Declaration,
    Module,
    Node,
    Offer,
    OwnSecret,
    Pair,
    PolicySettings,
    Requirement,
    RotationMode,
    Sessions,
    effective_policy,
    file_mode,
    format_duration,
    is_builtin,
    parse_duration,
    plain_address,
)
from meshtui.protocol.agent_url import one_token

NODE_KEYS = {"address", "agent", "keys"}
MODULE_KEYS = {
    "provides", "requires", "receives", "grants", "admin", "provisioner", "pin", "secrets",
}  # fmt: skip
SECRET_KEYS = {"name", "mint", "supplied", "file", "reload", "owner", "group", "mode", "max_age"}
MINT_KEYS = {"length", "alphabet"}
REQUIRE_KEYS = {
    "name",
    "values",
    "file",
    "reload",
    "from",
    "owner",
    "group",
    "mode",
    "connection",
    "sessions",
    "drain",
    "rotation",
    "grace",
    "format",
}
CONNECTION_KEYS = {"file", "format", "ca"}
PROVIDE_KEYS = {"name", "port", "kind", "ca", "tls", "sessions", "drain", "rotation", "grace"}
POLICY_KEYS = {"rotate_every", "probe_every"}
"""Allowed in [policy], on a provider module (all its pairs) and on a requires entry."""
_TWICE = re.compile(r"Cannot declare \((?P<key>.*)\) twice (?P<where>\(at line \d+, column \d+\))")


class _Reader:
    """Validation state for one file: resolves paths and raises errors that name it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.folder = path.parent

    def fail(self, key: str, problem: str, fix: str = "") -> DeclarationError:
        return DeclarationError(str(self.path), key, problem, fix)

    def table(self, data: Any, key: str) -> TomlTable:
        if not isinstance(data, dict):
            raise self.fail(key, "must be a table", f"write it as [{key}] or {{ ... }}")
        return data

    def string(self, data: Mapping[str, Any], key: str, where: str) -> str:
        value = data.get(key)
        if not isinstance(value, str) or not value:
            raise self.fail(f"{where}.{key}", "must be a non-empty string")
        if "\x00" in value:
            raise self.fail(f"{where}.{key}", "contains a NUL byte")
        return value

    def path_on_node(self, data: Mapping[str, Any], key: str, where: str) -> str:
        """A path on a node; relative paths are taken from the declaration's folder."""
        raw = self.string(data, key, where)
        if ".." in raw.split("/"):
            raise self.fail(
                f"{where}.{key}", f"{raw!r} climbs out with '..'", "write the path without '..'"
            )
        if raw.startswith("/") and not ("//" in raw or "/./" in raw or raw.endswith(("/", "/."))):
            return raw  # already what str(Path(raw)) gives; Path costs more than sealing here
        path = Path(raw)
        return str(path if path.is_absolute() else (self.folder / path).resolve())

    def unknown(self, data: Mapping[str, Any], allowed: set[str], where: str) -> None:
        extra = sorted(set(data) - allowed)
        if extra:
            raise self.fail(
                f"{where}.{extra[0]}",
                "is not a known key",
                "known keys: " + ", ".join(sorted(allowed)),
            )

    def name(self, value: str, key: str, what: str) -> str:
        if not NAME_RE.match(value):
            raise self.fail(
                key,
                f"{what} name {value!r} is not allowed",
                "use 1-32 characters: lower-case letters, digits, '-' or '_', "
                "starting with a letter or digit",
            )
        return value


def load(path: Path | str) -> Declaration:
    """Read and resolve a declaration file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise DeclarationError(str(path), "", f"cannot read: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise DeclarationError(str(path), "", "is not UTF-8 text") from exc
    return parse(text, path)


_AT_LINE = re.compile(r"\(at line (?P<line>\d+), column \d+\)")


def _split_inline_table(text: str, exc: tomllib.TOMLDecodeError) -> str:
    """The fix when the error is an inline table ``{ ... }`` broken over lines (TOML 1.0 allows
    no line break inside one), else ""."""
    at = _AT_LINE.search(str(exc))
    lineno, lines = int(at["line"]) if at else 0, text.splitlines()
    if not 1 <= lineno <= len(lines):
        return ""
    line = lines[lineno - 1].split("#", 1)[0]
    if line.count("{") > line.count("}"):
        return (
            f"line {lineno} opens an inline table {{ ... }} it does not close: TOML allows no "
            'line break inside one; write it on one line, or as a [[modules."node/module".requires]] table'
        )
    return ""


def parse(text: str, path: Path) -> Declaration:
    """Resolve declaration ``text`` read from ``path``."""
    r = _Reader(path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        twice = _TWICE.match(str(exc))
        if twice:
            parts = [p.strip().strip("'\"") for p in twice["key"].split(",") if p.strip()]
            key = ".".join(f'"{p}"' if "/" in p else p for p in parts)
            raise r.fail(
                key,
                f"declared twice {twice['where']}",
                "each node and module is one table: merge the two, or rename one",
            ) from exc
        raise r.fail("", f"not valid TOML: {exc}", _split_inline_table(text, exc)) from exc
    r.unknown(data, {"nodes", "modules", "policy"}, "(top level)")
    top = _policy(r, r.table(data.get("policy", {}), "policy"), "policy")
    nodes = {
        name: _node(r, name, spec) for name, spec in r.table(data.get("nodes", {}), "nodes").items()
    }
    if not nodes:
        raise r.fail("nodes", "no nodes are declared", "add a [nodes.NAME] table per machine")
    modules: dict[str, Module] = {}
    for key, spec in r.table(data.get("modules", {}), "modules").items():
        module = _module(r, key, spec, nodes)
        modules[module.id] = module
    _unique_paths(r, modules)
    pairs = _pairs(r, modules, nodes, top)
    return Declaration(source=str(path), nodes=nodes, modules=modules, pairs=pairs, policy=top)


def _unique_paths(r: _Reader, modules: Mapping[str, Module]) -> None:
    """Two provisions sharing a manifest or a grants folder would delete each other's secrets."""
    seen: dict[tuple[str, str], str] = {}
    for module in modules.values():
        for label, table in (("receives", module.receives), ("grants", module.grants)):
            for provision, path in table.items():
                key = f'modules."{module.id}".{label}.{provision}'
                other = seen.setdefault((module.node, path), key)
                if other != key:
                    raise r.fail(
                        key,
                        f"{path} on {module.node} is already {other}",
                        "give every provision its own manifest and grants folder",
                    )
    _files_apart(r, modules)


def _files_apart(r: _Reader, modules: Mapping[str, Module]) -> None:
    """A credential file is never a provider's manifest or admin file, nor inside a grants
    folder, on the same node: one delivery would overwrite the other's file, and the agent
    deletes stale files in a grants folder."""
    taken: dict[str, list[tuple[Path, str, bool]]] = {}
    for module in modules.values():
        where = f'modules."{module.id}"'
        mine = taken.setdefault(module.node, [])
        mine += [
            (Path(p), f"{where}.receives.{k} (a manifest)", False)
            for k, p in module.receives.items()
        ]
        mine += [
            (Path(p), f"{where}.grants.{k} (a grants folder)", True)
            for k, p in module.grants.items()
        ]
        if module.admin:
            mine.append((Path(module.admin), f"{where}.admin (the admin file)", False))
    for module in modules.values():
        for i, req in enumerate(module.requires):
            file = Path(req.file)
            for path, what, folder in taken.get(module.node, []):
                if file == path or (folder and path in file.parents):
                    raise r.fail(
                        f'modules."{module.id}".requires[{i}].file',
                        f"{req.file} on {module.node} is {what}"
                        + ("" if file == path else " or inside it"),
                        "give the credential a file of its own, outside the provider's files",
                    )


def _node(r: _Reader, name: str, spec: Any) -> Node:
    where = f"nodes.{name}"
    r.name(name, where, "node")
    spec = r.table(spec, where)
    r.unknown(spec, NODE_KEYS, where)
    address = r.string(spec, "address", where)
    if not plain_address(address):
        raise r.fail(
            f"{where}.address",
            f"{address!r} is not an IP address (an IPv6 scope id such as '%eth0' is not taken)",
            "give the node's private address",
        )
    agent = r.string(spec, "agent", where)
    if not agent.startswith(("http://", "https://", "unix:/")) or (
        not agent.startswith("unix:") and not one_token(agent)
    ):
        raise r.fail(
            f"{where}.agent",
            f"{agent!r} is not an agent URL",
            'use "http://ADDRESS:PORT" or "unix:/PATH" (a URL in printable ASCII without '
            "spaces: percent-encode anything else)",
        )
    if "keys" not in spec:
        raise r.fail(
            f"{where}.keys",
            "node has no keys",
            f'run meshtui host init on {name} and set keys = "path/to/{name}.pub"',
        )
    key_path = Path(r.string(spec, "keys", where))
    key_path = key_path if key_path.is_absolute() else r.folder / key_path
    try:
        keys = crypto.load_public(key_path, need_seal=True)
    except KeyFileError as exc:
        raise r.fail(f"{where}.keys", str(exc), f"copy {name}'s node.pub there") from exc
    assert keys.seal is not None
    return Node(name=name, address=address, agent=agent, seal_key=keys.seal, verify_key=keys.verify)


def _module(r: _Reader, key: str, spec: Any, nodes: Mapping[str, Node]) -> Module:
    where = f'modules."{key}"'
    node, slash, name = key.partition("/")
    if not slash:
        raise r.fail(
            where, "module names read node/module", f'e.g. [modules."{next(iter(nodes))}/{key}"]'
        )
    r.name(node, where, "node")
    r.name(name, where, "module")
    if node not in nodes:
        raise r.fail(
            where, f"module is on undeclared node {node!r}", f"add [nodes.{node}] or fix the name"
        )
    spec = r.table(spec, where)
    r.unknown(spec, MODULE_KEYS | POLICY_KEYS, where)
    provides = tuple(
        _offer(r, i, item, where) for i, item in enumerate(_list(r, spec, "provides", where))
    )
    requires = tuple(
        _requirement(r, i, item, where) for i, item in enumerate(_list(r, spec, "requires", where))
    )
    secrets = tuple(
        _own_secret(r, i, item, where) for i, item in enumerate(_list(r, spec, "secrets", where))
    )
    for i, own in enumerate(secrets):
        if own.name in {s.name for s in secrets[:i]}:
            raise r.fail(f"{where}.secrets[{i}].name", f"{own.name!r} is declared twice")
    if secrets and [q.name for q in requires].count(VAULT_PROVISION) != 1:
        raise r.fail(
            f"{where}.secrets",
            f"a module's own secrets live in the vault it requires, and it requires "
            f"{VAULT_PROVISION!r} {[q.name for q in requires].count(VAULT_PROVISION)} times",
            f'add one {{ name = "{VAULT_PROVISION}", file = "..." }} to its requires',
        )
    for i, offer in enumerate(provides):
        if offer.name in {o.name for o in provides[:i]}:
            raise r.fail(
                f"{where}.provides[{i}].name",
                f"{offer.name!r} is provided twice by this module",
                "one entry per provision",
            )
    receives = _paths(r, spec, "receives", where)
    grants = _paths(r, spec, "grants", where)
    for offer in provides:
        for table, fix in (
            (receives, "the manifest path"),
            (grants, "the folder for secret files"),
        ):
            if offer.name not in table:
                label = "receives" if table is receives else "grants"
                raise r.fail(
                    f"{where}.{label}",
                    f"no entry for provided {offer.name!r}",
                    f"add {offer.name} = {fix}",
                )
    for provision, folder in grants.items():
        manifest_dir = Path(receives.get(provision, folder)).parent
        if not Path(folder).is_relative_to(manifest_dir):
            raise r.fail(
                f"{where}.grants.{provision}",
                f"{folder} is not inside {manifest_dir}",
                "put the secret files' folder beside or below the manifest (receives)",
            )
    provisioner: tuple[str, ...] = BUILTIN_ARGV
    if "provisioner" in spec:
        raw = spec["provisioner"]
        if raw in (BUILTIN, *BUILTIN_ARGV):
            provisioner = BUILTIN_ARGV
        elif isinstance(raw, list) and raw and all(isinstance(a, str) and a for a in raw):
            provisioner = tuple(raw)
        else:
            raise r.fail(f"{where}.provisioner", 'must be "builtin" or a list of strings (argv)')
    admin = r.path_on_node(spec, "admin", where) if "admin" in spec else None
    if provides and is_builtin(provisioner) and admin is None:
        kind = registry.kind_of(provides[0].kind)
        raise r.fail(
            f"{where}.admin",
            f"the built-in provisioner needs an {kind.admin_word} file",
            kind.admin_fix,
        )
    pin = spec.get("pin", False)
    if not isinstance(pin, bool):
        raise r.fail(f"{where}.pin", f"must be true or false, not {pin!r}", "write pin = true")
    if pin and not provides:
        raise r.fail(
            f"{where}.pin",
            "pin confines a provider's logins, but this module provides nothing",
            "move pin = true to the module that provides the database",
        )
    if not provides and POLICY_KEYS & set(spec):
        key = sorted(POLICY_KEYS & set(spec))[0]
        raise r.fail(
            f"{where}.{key}",
            "a module's policy applies to the pairs it provides, and it provides nothing",
            "put the key on its requires entry (one consumer) or in [policy]",
        )
    if len({o.kind for o in provides}) > 1 and is_builtin(provisioner):
        first, other = (registry.kind_of(o.kind) for o in _two_kinds(provides))
        raise r.fail(
            f"{where}.provides",
            f"one module provides both {first.title} and {other.title}, but has one admin file",
            f"declare the {other.title} server as its own module",
        )
    return Module(
        node=node,
        name=name,
        provides=provides,
        requires=requires,
        receives=receives,
        grants=grants,
        admin=admin,
        provisioner=provisioner,
        pin=pin,
        policy=_policy(r, spec, where),
        secrets=secrets,
    )


def _list(r: _Reader, spec: Mapping[str, Any], key: str, where: str) -> list[Any]:
    value = spec.get(key, [])
    if not isinstance(value, list):
        raise r.fail(
            f"{where}.{key}", "must be a list of tables", f'{key} = [{{ name = "database" }}]'
        )
    return value


def _paths(r: _Reader, spec: Mapping[str, Any], key: str, where: str) -> dict[str, str]:
    table = r.table(spec.get(key, {}), f"{where}.{key}")
    return {name: r.path_on_node(table, name, f"{where}.{key}") for name in table}


def _kind(r: _Reader, item: Mapping[str, Any], at: str) -> Kind:
    """The registered kind a ``provides`` entry names (omitted: the default, PostgreSQL)."""
    try:
        return registry.kind_of(item.get("kind"))
    except UnknownKindError as exc:
        known = " or ".join(f'"{k}"' for k in exc.known)
        raise r.fail(f"{at}.kind", str(exc), f"write kind = {known}") from None


def _two_kinds(provides: tuple[Offer, ...]) -> tuple[Offer, Offer]:
    """The first offer and the first one of another kind (the module has several kinds)."""
    first = provides[0]
    return first, next(o for o in provides if o.kind != first.kind)


def _offer(r: _Reader, i: int, item: Any, where: str) -> Offer:
    at = f"{where}.provides[{i}]"
    item = r.table(item, at)
    r.unknown(item, PROVIDE_KEYS, at)
    port = item.get("port")
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
        raise r.fail(f"{at}.port", "must be a TCP port number (1-65535)")
    kind = _kind(r, item, at)
    tls = item.get("tls", True)
    if not isinstance(tls, bool):
        raise r.fail(f"{at}.tls", "must be true or false")
    if not kind.tls:
        for key in ("ca", "tls"):
            if key in item:
                with_tls = " or ".join(
                    f'kind = "{k.name}"' for k in registry.KINDS.values() if k.tls
                )
                raise r.fail(f"{at}.{key}", f"is only for {with_tls}", f"remove {key}")
    ca = None
    if kind.tls and tls:
        if "ca" not in item:
            raise r.fail(
                f"{at}.ca",
                f"a {kind.title} provider with TLS needs the CA that signed its certificate",
                'set ca = "/path/on/each/consumer/node/ca.pem", or tls = false for a '
                f"plain-text {kind.title} (its logins then cross the network readable)",
            )
        ca = r.path_on_node(item, "ca", at)
    elif "ca" in item:
        raise r.fail(f"{at}.ca", "is not used with tls = false", "remove ca, or set tls = true")
    rotation, grace = _rotation(r, item, at)
    if rotation == OVERLAP:
        _can_overlap(r, kind, f"{at}.rotation")
    return Offer(
        name=r.name(r.string(item, "name", at), f"{at}.name", "provision"),
        port=port,
        kind=kind.name,
        ca=ca,
        tls=tls,
        sessions=_sessions(r, item, at),
        rotation=rotation,
        grace=grace,
        drain=_drain(r, item, at),
    )


def _sessions(r: _Reader, item: Mapping[str, Any], at: str) -> Sessions | None:
    """An offer's or a requirement's ``sessions`` (None: not said at this level)."""
    if "sessions" not in item:
        return None
    value = item["sessions"]
    if value not in tuple(Sessions):
        raise r.fail(
            f"{at}.sessions",
            f"{value!r} is not what a rotation can do to the old credential's sessions",
            " or ".join(f'sessions = "{s.value}"' for s in Sessions),
        )
    return Sessions(value)


def _drain(r: _Reader, item: Mapping[str, Any], at: str) -> float | None:
    """An offer's or a requirement's ``drain``: how long sessions left to drain stay open at
    most (None: not said at this level)."""
    if "drain" not in item:
        return None
    seconds = _duration(r, item, "drain", at, 'drain = "10m"')
    if seconds <= 0:
        raise r.fail(f"{at}.drain", "must be longer than 0", 'drain = "10m"')
    return seconds


def _rotation(r: _Reader, item: Mapping[str, Any], at: str) -> tuple[str | None, float | None]:
    """An offer's or a requirement's ``rotation`` and ``grace`` (None: not set at this level)."""
    rotation = item.get("rotation")
    if rotation is not None and rotation not in ROTATIONS:
        raise r.fail(
            f"{at}.rotation",
            f"{rotation!r} is not a rotation",
            " or ".join(f'rotation = "{name}"' for name in ROTATIONS),
        )
    grace = _duration(r, item, "grace", at, 'grace = "5s"') if "grace" in item else None
    return rotation, grace


def _duration(r: _Reader, item: Mapping[str, Any], key: str, at: str, example: str) -> float:
    """``item[key]``, a duration string (``"90d"``), in seconds; refused naming the key."""
    raw = item[key]
    if not isinstance(raw, str):
        raise r.fail(f"{at}.{key}", "must be a duration string", example)
    try:
        return parse_duration(raw)
    except ValueError as exc:
        raise r.fail(f"{at}.{key}", str(exc), example) from exc


def _can_overlap(r: _Reader, kind: Kind, at: str) -> None:
    """Refuse ``rotation = "overlap"`` for a kind whose login holds one credential only and
    that cannot alternate between two logins either."""
    if not registry.rotates_by_overlap(kind):
        able = " or ".join(
            f'kind = "{k.name}"' for k in registry.KINDS.values() if registry.rotates_by_overlap(k)
        )
        raise r.fail(
            at,
            f"a {kind.title} {kind.login_word} cannot hold two credentials at once, so "
            f"{kind.name} cannot rotate by overlap",
            f'rotation = "{SWAP}" (or leave it out)' + (f"; overlap is for {able}" if able else ""),
        )


def _holds_one_login(r: _Reader, kind: Kind, at: str) -> None:
    """Refuse an overlap pair of a kind that alternates between two logins (PostgreSQL) when
    its credential file holds the password alone: the login changes at every rotation, and an
    app that reads it from another file can read one rotation's login with the other's
    password between the agent's two writes, and be refused."""
    if registry.can_alternate(kind) and not registry.can_overlap(kind) and kind.units:
        raise r.fail(
            f"{at}.format",
            f"a {kind.title} pair rotated by overlap alternates between two logins, so its "
            "app must read the login and the password from one file written at once, or it "
            "can hold one of each and be refused",
            f'format = "{kind.units[0]}" (see docs/rotation-overlap.md; or rotation = "swap")',
        )


def _file_format(r: _Reader, kind: Kind, req: Requirement, at: str) -> None:
    """Refuse a credential file format the provider's kind does not write."""
    if req.format == PASSWORD or req.format in kind.units:
        return
    able = " or ".join(f'"{u}"' for u in (PASSWORD, *kind.units))
    raise r.fail(
        f"{at}.format",
        f"{req.format!r} is not a credential file format for a {kind.title}",
        f"write format = {able}",
    )


def _requirement(r: _Reader, i: int, item: Any, where: str) -> Requirement:
    at = f"{where}.requires[{i}]"
    item = r.table(item, at)
    r.unknown(item, REQUIRE_KEYS | POLICY_KEYS, at)
    values = r.table(item.get("values", {}), f"{at}.values")
    for k, v in values.items():
        if not isinstance(v, str) or not v or "\x00" in v:
            raise r.fail(f"{at}.values.{k}", "must be a non-empty string")
    source = r.string(item, "from", at) if "from" in item else None
    file, reload, owner, group, mode = _file_spec(r, item, at)
    rotation, grace = _rotation(r, item, at)
    return Requirement(
        name=r.name(r.string(item, "name", at), f"{at}.name", "provision"),
        file=file,
        values=dict(values),
        reload=reload,
        source=source,
        owner=owner,
        group=group,
        mode=mode,
        policy=_policy(r, item, at),
        connection=_connection(r, item, at, file) if "connection" in item else None,
        sessions=_sessions(r, item, at),
        rotation=rotation,
        grace=grace,
        drain=_drain(r, item, at),
        format=_format(r, item, at),
    )


def _format(r: _Reader, item: Mapping[str, Any], at: str) -> str:
    """The credential file's ``format``: the password alone, or a unit holding the login."""
    shape = r.string(item, "format", at) if "format" in item else PASSWORD
    if shape != PASSWORD and shape not in UNIT_FORMATS:
        raise r.fail(
            f"{at}.format",
            f"{shape!r} is not a credential file format",
            "write format = " + " or ".join(f'"{f}"' for f in (PASSWORD, *UNIT_FORMATS)),
        )
    return shape


def _file_spec(
    r: _Reader, item: Mapping[str, Any], at: str
) -> tuple[str, tuple[str, ...], str | None, str | None, str]:
    """Where a secret is written on its node: file, reload argv, owner, group and mode."""
    reload = item.get("reload", [])
    if not isinstance(reload, list) or not all(isinstance(a, str) and a for a in reload):
        raise r.fail(
            f"{at}.reload",
            "must be a list of strings (argv, no shell)",
            'reload = ["systemctl", "reload", "gitea"]',
        )
    file = r.path_on_node(item, "file", at)
    owner, group = (_account(r, item, key, at) for key in ("owner", "group"))
    mode = r.string(item, "mode", at) if "mode" in item else DEFAULT_MODE
    try:
        file_mode(mode)
    except ValueError as exc:
        raise r.fail(
            f"{at}.mode",
            f"{file}: {exc}",
            'use "0600", or "0640" with a group; never a mode for "other"',
        ) from exc
    return file, tuple(reload), owner, group, mode


def _own_secret(r: _Reader, i: int, item: Any, where: str) -> OwnSecret:
    """One entry of a module's ``secrets``: minted (``mint``) or ``supplied``, and its file."""
    at = f"{where}.secrets[{i}]"
    item = r.table(item, at)
    r.unknown(item, SECRET_KEYS, at)
    name = r.name(r.string(item, "name", at), f"{at}.name", "secret")
    supplied = item.get("supplied", False)
    if not isinstance(supplied, bool):
        raise r.fail(f"{at}.supplied", "must be true or false", "supplied = true")
    if supplied == ("mint" in item):
        raise r.fail(
            at,
            "a secret is either minted by the mesh or supplied by an operator",
            "write mint = { length = 32 } or supplied = true (not both, not neither)",
        )
    length, alphabet = 32, "urlsafe"
    if "mint" in item:
        mint = r.table(item["mint"], f"{at}.mint")
        r.unknown(mint, MINT_KEYS, f"{at}.mint")
        length = mint.get("length", 32)
        if not isinstance(length, int) or isinstance(length, bool) or not 16 <= length <= 1024:
            raise r.fail(f"{at}.mint.length", "must be a whole number from 16 to 1024")
        alphabet = mint.get("alphabet", "urlsafe")
        if alphabet not in ALPHABETS:
            raise r.fail(
                f"{at}.mint.alphabet",
                f"{alphabet!r} is not an alphabet",
                f"write one of {', '.join(repr(a) for a in ALPHABETS)}",
            )
    file, reload, owner, group, mode = _file_spec(r, item, at)
    max_age = None
    if "max_age" in item:
        if not supplied:
            raise r.fail(
                f"{at}.max_age",
                "is for a supplied secret: a minted one rotates on its vault pair's rotate_every",
                "remove max_age, or set rotate_every on the module's secret requirement",
            )
        max_age = _duration(r, item, "max_age", at, 'max_age = "90d"')
    return OwnSecret(
        name=name,
        file=file,
        supplied=supplied,
        length=length,
        alphabet=alphabet,
        reload=reload,
        owner=owner,
        group=group,
        mode=mode,
        max_age=max_age,
    )


def _connection(r: _Reader, item: Mapping[str, Any], at: str, credential: str) -> ConnectionFile:
    """A ``connection = { file = "...", format = "env" }`` table: where the app's non-secret
    connection facts go, beside the credential file."""
    where = f"{at}.connection"
    table = r.table(item["connection"], where)
    r.unknown(table, CONNECTION_KEYS, where)
    file = r.path_on_node(table, "file", where)
    if file == credential:
        raise r.fail(
            f"{where}.file",
            "is the credential file itself",
            'name another file beside it, e.g. file = "/etc/gitea/db.env"',
        )
    shape = r.string(table, "format", where) if "format" in table else "env"
    if shape not in CONNECTION_FORMATS:
        raise r.fail(
            f"{where}.format",
            f"{shape!r} is not a connection file format",
            "write format = " + " or ".join(f'"{f}"' for f in CONNECTION_FORMATS),
        )
    ca = r.path_on_node(table, "ca", where) if "ca" in table else None
    return ConnectionFile(file=file, format=shape, ca=ca)


def _account(r: _Reader, item: Mapping[str, Any], key: str, at: str) -> str | None:
    """A credential file's owner or group: a user or group name on the consumer's node."""
    if key not in item:
        return None
    value = r.string(item, key, at)
    if not ACCOUNT_RE.match(value):
        raise r.fail(
            f"{at}.{key}",
            f"{value!r} is not a {'user' if key == 'owner' else 'group'} name",
            'give the name as on the consumer\'s node, e.g. "git"',
        )
    return value


def _policy(r: _Reader, spec: Mapping[str, Any], where: str) -> PolicySettings:
    """The policy keys of one table (the [policy] table, a provider module, a requires entry)."""
    if where == "policy":
        r.unknown(spec, POLICY_KEYS, where)
    found: dict[str, float] = {}
    for key in sorted(POLICY_KEYS & set(spec)):
        raw = spec[key]
        if not isinstance(raw, str):
            raise r.fail(f"{where}.{key}", "must be a duration string", f'{key} = "90d"')
        try:
            found[key] = parse_duration(raw)
        except ValueError as exc:
            raise r.fail(f"{where}.{key}", str(exc)) from exc
    settings = PolicySettings(found.get("rotate_every"), found.get("probe_every"))
    if (
        settings.rotate_every is not None
        and settings.probe_every is not None
        and settings.probe_every > settings.rotate_every
    ):
        raise r.fail(
            f"{where}.probe_every",
            f"{spec['probe_every']} is longer than rotate_every {spec['rotate_every']}",
            "probe at least as often as the credential rotates",
        )
    return settings


def _pairs(
    r: _Reader, modules: Mapping[str, Module], nodes: Mapping[str, Node], top: PolicySettings
) -> tuple[Pair, ...]:
    providers: dict[str, list[Module]] = {}
    for module in modules.values():
        for offer in module.provides:
            providers.setdefault(offer.name, []).append(module)
    pairs: list[Pair] = []
    logins: dict[tuple[str, str], str] = {}
    files: dict[tuple[str, str], str] = {}
    claims: dict[tuple[str, str], str] = {}
    for module in modules.values():
        for i, req in enumerate(module.requires):
            at = f'modules."{module.id}".requires[{i}]'
            provider = _resolve(r, at, module, req, providers, modules)
            offer = next(o for o in provider.provides if o.name == req.name)
            login = derive_login(module.node, module.name)
            kind = registry.kind_of(offer.kind)
            try:
                kind.check_values(login, req.values)
            except ValuesError as exc:
                raise r.fail(f"{at}.values", str(exc), f"{provider.id} is a {kind.title}") from exc
            for claim in kind.owns(login, req.values):
                holder = claims.setdefault((provider.id, claim), module.id)
                if holder != module.id:
                    raise r.fail(
                        f"{at}.values",
                        f"{claim} at {provider.id} is already {holder}'s: a consumer has "
                        "rights on what is its own only",
                        f"give {module.id} one of its own",
                    )
            owner = logins.get((provider.id, login))
            if owner is not None and owner != module.id:
                raise r.fail(
                    at,
                    f"login {login!r} at {provider.id} is already {owner}'s",
                    "rename one of the modules",
                )
            if owner is not None:
                raise r.fail(
                    at,
                    f"{module.id} already has a login at {provider.id}; "
                    "a consumer module gets one login (one pair) per provider",
                    "declare each requirement once, or split the module",
                )
            logins[(provider.id, login)] = module.id
            holder = files.setdefault((module.node, req.file), f"{module.id} ({req.name})")
            if holder != f"{module.id} ({req.name})":
                raise r.fail(
                    f"{at}.file",
                    f"{req.file} on {module.node} is already {holder}'s file",
                    "give each requirement its own file",
                )
            if req.rotation == OVERLAP:
                _can_overlap(r, kind, f"{at}.rotation")
            _file_format(r, kind, req, at)
            if (req.rotation or offer.rotation) == OVERLAP and req.format == PASSWORD:
                _holds_one_login(r, kind, at)
            policy = effective_policy(top, provider.policy, req.policy)
            if policy.rotate_every is not None and policy.probe_every > policy.rotate_every:
                raise r.fail(
                    f"{at}.probe_every" if req.policy.probe_every else at,
                    f"probe_every {format_duration(policy.probe_every)} "
                    f"({policy.probe_source}) is longer than rotate_every "
                    f"{format_duration(policy.rotate_every)} ({policy.rotate_source})",
                    "probe at least as often as the credential rotates: "
                    "set probe_every here or shorten it where it is declared",
                )
            pairs.append(
                Pair(
                    provision=req.name,
                    consumer=module.id,
                    provider=provider.id,
                    login=login,
                    file=req.file,
                    port=offer.port,
                    values=dict(req.values),
                    reload=req.reload,
                    owner=req.owner,
                    group=req.group,
                    mode=req.mode,
                    policy=policy,
                    rotation=RotationMode(
                        req.rotation or offer.rotation or SWAP,
                        next(
                            (g for g in (req.grace, offer.grace) if g is not None), DEFAULT_GRACE_S
                        ),
                    ),
                )
            )
    return tuple(sorted(pairs, key=lambda p: p.id))


def _resolve(
    r: _Reader,
    at: str,
    module: Module,
    req: Requirement,
    providers: Mapping[str, list[Module]],
    modules: Mapping[str, Module],
) -> Module:
    candidates = providers.get(req.name, [])
    if req.source is not None:
        chosen = modules.get(req.source)
        if chosen is None:
            raise r.fail(
                f"{at}.from",
                f"{req.source!r} is not a declared module",
                "name a provider as node/module",
            )
        if chosen not in candidates:
            raise r.fail(
                f"{at}.from",
                f"{req.source} does not provide {req.name!r}",
                "add it to that module's provides",
            )
    elif not candidates:
        raise r.fail(
            at,
            f"nobody provides {req.name!r}",
            f'declare a module with provides = [{{ name = "{req.name}", port = ... }}]',
        )
    elif len(candidates) > 1:
        names = ", ".join(sorted(m.id for m in candidates))
        raise r.fail(
            at,
            f"{req.name!r} is provided by several modules ({names})",
            f'add from = "{candidates[0].id}"',
        )
    else:
        chosen = candidates[0]
    if chosen.id == module.id:
        raise r.fail(at, "a module cannot require what it provides itself")
    return chosen
