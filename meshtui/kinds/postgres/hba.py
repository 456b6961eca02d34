"""Confine each managed login to its consumer's address: a block of ``pg_hba.conf`` meshtui owns.

A provider module that declares ``pin = true`` gets, per (provider, provision), one block
between marker lines::

    # meshtui pin begin db1/postgres database
    host  all "gitea_app1_3f9a2c" 10.213.0.3/32 scram-sha-256
    host  all "gitea_app1_3f9a2c" all reject
    local all "gitea_app1_3f9a2c" reject
    # meshtui pin end db1/postgres database

pg_hba matching is first-match, so every meshtui block sits before the first rule line of the
file: the login is allowed from its address and rejected from anywhere else (and over the local
socket) before any broad rule can match it. Lines outside our blocks are never edited; they keep
their text and their order. One marker style serves PostgreSQL 15 (no ``include``) and 16+.

Applying is all-or-nothing: the file is read and written through directory descriptors without
following a symbolic link (root must never follow a path the server's user controls), the
server's own parser (``pg_hba_file_rules``) must find no error and must see our lines where we
wrote them, and only then is the server reloaded and the reload waited for. Any failure puts the
old text back and is reported; nothing else changes.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import ipaddress
import os
import re
import stat
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import psycopg

from meshtui.atomic import Access, write_at
from meshtui.errors import ProvisionError
from meshtui.model import APPLIED, KEEP_PINNED, OutcomeName, plain_address
from meshtui.provisioner.adapter import Finished
from meshtui.provisioner.manifest import Manifest

BEGIN = "# meshtui pin begin "
END = "# meshtui pin end "
NOTE = "# written by meshtui provision: each login only from its consumer's address; do not edit"
MAX_HBA_BYTES = 16 * 1024 * 1024
RELOAD_WAIT_S = 10.0
_NAME_OK = re.compile(r'[^\s"#,\\\x00-\x1f\x7f]+')
_UNPINNED: set[tuple[str, str]] = set()
"""(conninfo, scope) seen without a block by a run without pin in this process: a long-lived
agent checks once, not at every delivery; any pin run for the scope forgets it."""
_SCOPE_OK = re.compile(r"[a-z0-9_-]+/[a-z0-9_-]+ [a-z0-9_-]+")
_ALLOW = re.compile(r'^(?:host|hostssl) all "(?P<login>[^"]+)" (?P<address>\S+)/\d+ scram-sha-256$')


@dataclass(frozen=True)
class Layout:
    """A parsed pg_hba.conf: the lines not ours (verbatim, in order) and our blocks by scope."""

    foreign: tuple[str, ...]
    blocks: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class PinResult:
    """What one pin run did: whether the file changed, a human note, and the error if it failed."""

    changed: bool
    note: str = ""
    error: str = ""


def scope_key(provider: str, provision: str) -> str:
    """The text after the marker words: ``db1/postgres database``. Names with a space, a
    newline or a '#' are refused: the marker is a line of its own and must stay one comment."""
    scope = f"{provider} {provision}"
    if not _SCOPE_OK.fullmatch(scope):
        raise ProvisionError(
            f"provider {provider!r} or provision {provision!r} is not a plain name"
        )
    return scope


# -- the text ------------------------------------------------------------------------------------


def parse(text: str, source: str = "pg_hba.conf") -> Layout:
    """Split ``text`` into lines not ours and our blocks; ProvisionError on broken markers."""
    foreign: list[str] = []
    blocks: dict[str, tuple[str, ...]] = {}
    scope: str | None = None
    body: list[str] = []
    start = 0
    for number, line in enumerate(text.splitlines(keepends=True), 1):
        bare = line.rstrip("\r\n").strip()
        if bare.startswith(BEGIN.strip() + " "):
            if scope is not None:
                raise _broken(source, number, f"a begin marker inside the block begun at {start}")
            scope, body, start = bare[len(BEGIN) :].strip(), [], number
            if scope in blocks:
                raise _broken(source, number, f"a second block for {scope}")
        elif bare.startswith(END.strip() + " "):
            ended = bare[len(END) :].strip()
            if scope is None or ended != scope:
                raise _broken(source, number, f"an end marker for {ended} without its begin")
            blocks[scope] = tuple(body)
            scope = None
        elif scope is not None:
            body.append(line.rstrip("\r\n"))
        else:
            foreign.append(line)
    if scope is not None:
        raise _broken(source, start, f"the block for {scope} has no end marker")
    return Layout(tuple(foreign), blocks)


def _broken(source: str, number: int, problem: str) -> ProvisionError:
    return ProvisionError(
        f"{source}: line {number}: {problem}; meshtui's pin markers are broken, fix or remove "
        "them by hand (nothing was changed)"
    )


def render(layout: Layout) -> str:
    """The file's text: every block of ours, sorted by scope, before the first rule line."""
    ours: list[str] = []
    for scope in sorted(layout.blocks):
        ours += [BEGIN + scope + "\n", *(line + "\n" for line in layout.blocks[scope])]
        ours.append(END + scope + "\n")
    foreign = list(layout.foreign)
    at = next((i for i, line in enumerate(foreign) if _is_rule(line)), len(foreign))
    if ours and at == len(foreign) and foreign and not foreign[-1].endswith("\n"):
        foreign[-1] += "\n"
    return "".join(foreign[:at] + ours + foreign[at:])


def _is_rule(line: str) -> bool:
    bare = line.strip()
    return bool(bare) and not bare.startswith("#")


def block(pins: Mapping[str, str], tls: frozenset[str] = frozenset()) -> tuple[str, ...]:
    """Our block's body for ``login -> address``, sorted by login (empty: no block at all);
    a login in ``tls`` is allowed over TLS only (``hostssl``)."""
    if not pins:
        return ()
    out = [NOTE]
    for login in sorted(pins):
        net = ipaddress.ip_network(pins[login])
        kind = "hostssl" if login in tls else "host"
        out += [
            f'{kind} all "{login}" {net} scram-sha-256',
            f'host all "{login}" all reject',
            f'local all "{login}" reject',
        ]
    return tuple(out)


def requires_tls(foreign: tuple[str, ...], address: str) -> bool:
    """Whether the file's own rules (not ours) demand TLS from ``address``: the first rule for
    every database and user whose address covers it is ``hostssl``. A pin line then is too,
    so pinning a login never lets it in without TLS where the server would not."""
    at = ipaddress.ip_address(address)
    for line in foreign:
        fields = line.split("#", 1)[0].split()
        if len(fields) < 5 or fields[0] not in ("host", "hostssl", "hostnossl", "hostgssenc"):
            continue
        if fields[1] != "all" or fields[2] != "all":
            continue
        where = fields[3]
        try:
            covers = where == "all" or at in ipaddress.ip_network(where, strict=False)
        except ValueError:
            continue  # a host name, samehost, samenet, or an address with a separate mask
        if covers:
            return fields[0] == "hostssl"
    return False


def pinned(body: tuple[str, ...]) -> dict[str, str]:
    """``login -> address`` of the allow lines in one of our blocks."""
    out: dict[str, str] = {}
    for line in body:
        found = _ALLOW.match(line.strip())
        if found:
            out[found["login"]] = found["address"]
    return out


def check_pin(login: str, address: str) -> str:
    """Why ``login`` from ``address`` cannot be written into pg_hba.conf, or "" when it can."""
    if not _NAME_OK.fullmatch(login):
        return f"login {login!r} holds a character pg_hba.conf cannot carry"
    if not plain_address(address):
        return f"{login}: consumer address {address!r} is not an IP address"
    return ""


def wanted(
    manifest: Manifest, outcomes: Mapping[str, str], before: Mapping[str, str]
) -> dict[str, str]:
    """Which logins get a line now: those in place, and those already pinned that may still exist.

    A login made true this run is pinned to its consumer's ``at``; a waiting or failed one keeps
    its line if it had one (unpinning would open it to every address); a removed one loses it.
    """
    out: dict[str, str] = {}
    for consumer in manifest.consumers:
        outcome = outcomes.get(consumer.login, "")
        if outcome in APPLIED or (outcome in KEEP_PINNED and consumer.login in before):
            out[consumer.login] = consumer.at
    asked = {c.login for c in manifest.consumers}
    for login, address in before.items():
        if login not in asked and outcomes.get(login, "") in KEEP_PINNED:
            out[login] = address
    return out


# -- the file, without following links -----------------------------------------------------------


def _open_folder(path: str) -> int:
    """A descriptor of ``path``'s folder, reached component by component with O_NOFOLLOW."""
    if not os.path.isabs(path):
        raise ProvisionError(f"hba_file {path!r} is not an absolute path")
    parts = [p for p in os.path.dirname(path).split("/") if p]
    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY)
    walked = ""
    try:
        for part in parts:
            walked += "/" + part
            try:
                nxt = os.open(
                    part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd
                )
            except OSError as exc:
                why = (
                    "is a symbolic link, which meshtui does not follow here"
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR)
                    else exc.strerror
                )
                raise ProvisionError(
                    f"{walked}: {why} (pg_hba.conf at {path} cannot be pinned; does the "
                    "provisioner run on the database's machine?)"
                ) from None
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read(folder: int, name: str, path: str) -> tuple[str, os.stat_result]:
    try:
        fd = os.open(
            name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder
        )
    except OSError as exc:
        raise ProvisionError(f"{path}: cannot be opened ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ProvisionError(f"{path}: is not a regular file")
        data = fh.read(MAX_HBA_BYTES + 1)
    if len(data) > MAX_HBA_BYTES:
        raise ProvisionError(f"{path}: larger than {MAX_HBA_BYTES} bytes")
    try:
        return data.decode("utf-8"), info
    except UnicodeDecodeError:
        raise ProvisionError(f"{path}: is not UTF-8 text (nothing was changed)") from None


def _write(folder: int, name: str, text: str, like: os.stat_result, path: str) -> None:
    """Replace ``name`` atomically with ``text``, keeping the old file's owner, group and mode."""
    mine = (like.st_uid, like.st_gid) == (os.geteuid(), os.getegid())
    access = Access(
        mode=stat.S_IMODE(like.st_mode),
        uid=-1 if mine else like.st_uid,
        gid=-1 if mine else like.st_gid,
    )
    try:
        write_at(folder, name, text.encode("utf-8"), access=access)
    except OSError as exc:
        if exc.errno == errno.EROFS:
            raise ProvisionError(
                f"{path}: cannot write beside it (read-only file system: the agent's unit "
                f"must name {os.path.dirname(path)} in ReadWritePaths=, or pin = false) "
                "(nothing was changed)"
            ) from None
        if exc.errno in (errno.EACCES, errno.EPERM):
            raise ProvisionError(
                f"{path}: cannot write beside it ({exc.strerror}); run the provisioner on the "
                "database's machine as root or as the server's user (nothing was changed)"
            ) from None
        raise ProvisionError(f"{path}: cannot be replaced ({exc.strerror})") from None


def _same_file(a: tuple[str, os.stat_result], b: tuple[str, os.stat_result]) -> bool:
    """Whether two reads saw the same file: inode, size, modification time and every byte."""
    (text_a, st_a), (text_b, st_b) = a, b
    key_a = (st_a.st_ino, st_a.st_size, st_a.st_mtime_ns)
    return key_a == (st_b.st_ino, st_b.st_size, st_b.st_mtime_ns) and text_a == text_b


def _write_unchanged(
    folder: int,
    name: str,
    text: str,
    seen: tuple[str, os.stat_result],
    path: str,
    *,
    rollback: bool = False,
) -> None:
    """:func:`_write`, but only while ``name`` is still exactly what was ``seen``.

    The folder lock binds only meshtui; a DBA (or the server's user) may save the file between
    this run's read and its write. A changed file is left as it is and ProvisionError says so:
    the next run reads it again and pins on top of it.
    """
    if not _same_file(_read(folder, name, path), seen):
        what = "the old one was NOT put back" if rollback else "nothing was changed"
        raise ProvisionError(
            f"{path} changed while it was being pinned (someone saved it meanwhile); {what}, "
            "and the next run pins again on top of that edit"
        )
    _write(folder, name, text, seen[1], path)


@contextlib.contextmanager
def _locked_folder(path: str) -> Iterator[int]:
    """The folder's descriptor, holding an exclusive lock so two provisioners never interleave."""
    folder = _open_folder(path)
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)
        yield folder
    finally:
        os.close(folder)


# -- the server ----------------------------------------------------------------------------------


def _hba_file(conn: psycopg.Connection[Any]) -> str:
    try:
        row = conn.execute("SHOW hba_file").fetchone()
    except psycopg.errors.InsufficientPrivilege:
        raise ProvisionError(
            "pin = true is declared, but the admin cannot see hba_file (it needs superuser or "
            "pg_read_all_settings); the logins are NOT confined to their consumers' addresses"
        ) from None
    return str(row[0]) if row else ""


def _rules(conn: psycopg.Connection[Any], path: str) -> tuple[dict[int, list[str]], list[str]]:
    """What the server's parser makes of the file now: users by line, and every error."""
    try:
        rows = conn.execute("SELECT to_jsonb(r) FROM pg_hba_file_rules r").fetchall()
    except psycopg.Error as exc:
        raise ProvisionError(
            "pin = true is declared, but the admin cannot read pg_hba_file_rules to check "
            f"pg_hba.conf ({_first_line(exc)}); nothing was changed"
        ) from None
    users: dict[int, list[str]] = {}
    errors: list[str] = []
    for (rule,) in rows:
        where = rule.get("file_name") or path
        if rule.get("error"):
            errors.append(f"{where}: line {rule.get('line_number')}: {rule['error']}")
        elif where == path and rule.get("line_number") is not None:
            users[int(rule["line_number"])] = list(rule.get("user_name") or [])
    return users, errors


def _first_line(exc: BaseException) -> str:
    if isinstance(exc, psycopg.Error) and exc.diag.message_primary:
        return exc.diag.message_primary
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _lines_of(text: str, scope: str) -> dict[int, str]:
    """Line number -> login for the rule lines of our block ``scope`` in ``text``."""
    out: dict[int, str] = {}
    inside = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip() == (BEGIN + scope).strip():
            inside = True
        elif line.strip() == (END + scope).strip():
            inside = False
        elif inside and _is_rule(line):
            out[number] = line.split('"')[1]
    return out


def _reload(conn: psycopg.Connection[Any], conninfo: str) -> None:
    """pg_reload_conf(), then wait until a new session sees the reloaded configuration."""
    row = conn.execute("SELECT pg_conf_load_time(), pg_reload_conf()").fetchone()
    before = row[0] if row else None
    deadline = time.monotonic() + RELOAD_WAIT_S
    while time.monotonic() < deadline:
        # a new session is forked only after the postmaster finished a reload it had begun
        with psycopg.connect(conninfo, autocommit=True, connect_timeout=10) as fresh:
            seen = fresh.execute("SELECT pg_conf_load_time()").fetchone()
        if seen and before is not None and seen[0] > before:
            return
        time.sleep(0.005)
    raise ProvisionError(f"the server did not reload its configuration within {RELOAD_WAIT_S} s")


# -- the whole run -------------------------------------------------------------------------------


def pin_manifest(conninfo: str, manifest: Manifest, outcomes: Mapping[str, str]) -> PinResult:
    """Make the manifest's block of pg_hba.conf true, given this run's outcome per login.

    Without ``pin`` the block is taken away if there is one (pin turned off must not leave
    logins confined to addresses nobody keeps up to date); the caller ignores errors then.
    Never raises for a problem with the file or the server: the result carries the error, and
    the file then holds what it held before.
    """
    try:
        seen = (conninfo, scope_key(manifest.provider, manifest.provision))
    except ProvisionError as exc:
        return PinResult(changed=False, error=str(exc))
    if manifest.pin:
        _UNPINNED.discard(seen)
    elif seen in _UNPINNED:
        return PinResult(changed=False)
    try:
        with psycopg.connect(conninfo, autocommit=True, connect_timeout=10) as conn:
            result = _pin(conn, conninfo, manifest, outcomes)
        if not manifest.pin:
            _UNPINNED.add(seen)
        return result
    except ProvisionError as exc:  # lasting: no rights, not on this machine, broken markers
        if not manifest.pin:
            _UNPINNED.add(seen)
        return PinResult(changed=False, error=str(exc))
    except (psycopg.Error, OSError) as exc:
        return PinResult(changed=False, error=f"pg_hba.conf not pinned: {_first_line(exc)}")


def _pin(
    conn: psycopg.Connection[Any], conninfo: str, manifest: Manifest, outcomes: Mapping[str, str]
) -> PinResult:
    path = _hba_file(conn)
    scope = scope_key(manifest.provider, manifest.provision)
    name = os.path.basename(path)
    with _locked_folder(path) as folder:
        text, info = _read(folder, name, path)
        layout = parse(text, path)
        before = pinned(layout.blocks.get(scope, ()))
        pins = wanted(manifest, outcomes, before) if manifest.pin else {}
        problems = [p for p in (check_pin(login, at) for login, at in pins.items()) if p]
        if problems:
            raise ProvisionError(f"{path}: not pinned: {'; '.join(problems)} (nothing was changed)")
        blocks = dict(layout.blocks)
        blocks.pop(scope, None)
        if pins:
            tls = frozenset(k for k, at in pins.items() if requires_tls(layout.foreign, at))
            blocks[scope] = block(pins, tls)
        new = render(Layout(layout.foreign, blocks))
        if new == text:
            return PinResult(changed=False)
        _, errors = _rules(conn, path)
        if errors:
            raise ProvisionError(
                f"pg_hba.conf has errors already ({'; '.join(errors[:3])}); fix them first "
                "(nothing was changed)"
            )
        _write_unchanged(folder, name, new, (text, info), path)
        written = _read(folder, name, path)
        try:
            users, errors = _rules(conn, path)
            if errors:
                raise ProvisionError(
                    f"the server refuses the new pg_hba.conf ({'; '.join(errors[:3])}); "
                    "the old one was put back"
                )
            for number, login in _lines_of(new, scope).items():
                if users.get(number) != [login]:
                    raise ProvisionError(
                        f"the server does not read {path} as written here (line {number}); "
                        "the old one was put back (does the provisioner run on the "
                        "database's machine?)"
                    )
            _reload(conn, conninfo)
        except BaseException as exc:
            # put the old text back only over exactly what was written here: an edit someone
            # saved meanwhile is theirs to keep (and raises its own error)
            try:
                _write_unchanged(folder, name, text, written, path, rollback=True)
            finally:
                with contextlib.suppress(psycopg.Error):
                    conn.execute("SELECT pg_reload_conf()")  # in case the new text was loaded
            if isinstance(exc, psycopg.Error):
                raise ProvisionError(
                    f"pg_hba.conf not reloaded ({_first_line(exc)}); the old one was put back"
                ) from None
            raise
    added = sorted(set(pins) - set(before))
    gone = sorted(set(before) - set(pins))
    moved = sorted(k for k in set(pins) & set(before) if pins[k] != before[k])
    parts = [f"{len(pins)} logins pinned"]
    parts += [f"{len(x)} {w}" for x, w in ((added, "added"), (gone, "removed"), (moved, "moved"))]
    return PinResult(changed=True, note=f"{path}: " + ", ".join(parts))


def finish(conninfo: str, manifest: Manifest, outcomes: Mapping[str, str]) -> Finished | None:
    """The kind's after-run step: :func:`pin_manifest`, reported when the file changed or when a
    pinned manifest could not be pinned (an unpinned one's error is ignored, see there)."""
    pin = pin_manifest(conninfo, manifest, outcomes)
    if pin.changed or (pin.error and manifest.pin):
        name = OutcomeName.FAILED if pin.error else OutcomeName.UPDATED
        return Finished("pg_hba.conf", name, pin.error or pin.note)
    return None
