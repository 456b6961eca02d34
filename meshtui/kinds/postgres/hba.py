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

A delta's run (a rotation, a pair added or withdrawn) changes only its logins' lines, on the
block this process last verified (:mod:`meshtui.kinds.postgres.verified`): while the file's
stat is the one remembered it is not read at all, and a rotation that moves no address writes,
asks and reloads nothing. A block this process has not verified, or one changed outside it,
sends the run back whole (:class:`~meshtui.contracts.adapter.Whole`). The admin session is
kept between runs in a long-lived process; the server's check reads only its errors and the
lines just written.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import fcntl
import ipaddress
import os
import re
import stat
import threading
import time
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from meshtui.atomic import Access, write_at
from meshtui.contracts.adapter import Finished, Whole, alternate_login
from meshtui.contracts.manifest_reader import Consumer, Manifest
from meshtui.errors import ProvisionError
from meshtui.kinds.postgres import FINISH_NAME, verified
from meshtui.model import APPLIED, KEEP_PINNED, OutcomeName, plain_address
from meshtui.protocol.manifest import ALTERNATES

BEGIN = "# meshtui pin begin "
END = "# meshtui pin end "
NOTE = "# written by meshtui provision: each login only from its consumer's address; do not edit"
MAX_HBA_BYTES = 16 * 1024 * 1024
RELOAD_WAIT_S = 10.0
IDLE_S = 300.0
"""A kept admin session idle for longer is closed rather than used for a pin run."""
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
        body = layout.blocks[scope]
        ours += [BEGIN + scope + "\n", "\n".join(body) + "\n" if body else ""]
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
        out += _login_lines(login, pins[login], login in tls)
    return tuple(out)


def _login_lines(login: str, address: str, tls: bool = False) -> list[str]:
    """One login's three lines of the block: allowed from ``address`` (over TLS only when
    ``tls``: ``hostssl``), rejected from anywhere else and over the local socket."""
    net = ipaddress.ip_network(address)
    kind = "hostssl" if tls else "host"
    return [
        f'{kind} all "{login}" {net} scram-sha-256',
        f'host all "{login}" all reject',
        f'local all "{login}" reject',
    ]


def requires_tls(foreign: tuple[str, ...], address: str) -> bool:
    """Whether the file's own rules (not ours) demand TLS from ``address``: the first rule for
    every database and user whose address covers it is ``hostssl``. A pin line then is too,
    so pinning a login never lets it in without TLS where the server would not."""
    return _demands_tls(_tls_rules(foreign), address)


TlsRule = tuple["ipaddress.IPv4Network | ipaddress.IPv6Network | None", bool]
"""A rule of the file's own for every database and user: its network (None: ``all``), and
whether it is ``hostssl``."""


def _tls_rules(foreign: tuple[str, ...]) -> list[TlsRule]:
    """The rules :func:`requires_tls` reads, parsed once (a whole run asks for every login)."""
    out: list[TlsRule] = []
    for line in foreign:
        fields = line.split("#", 1)[0].split()
        if len(fields) < 5 or fields[0] not in ("host", "hostssl", "hostnossl", "hostgssenc"):
            continue
        if fields[1] != "all" or fields[2] != "all":
            continue
        where = fields[3]
        try:
            net = None if where == "all" else ipaddress.ip_network(where, strict=False)
        except ValueError:
            continue  # a host name, samehost, samenet, or an address with a separate mask
        out.append((net, fields[0] == "hostssl"))
    return out


def _demands_tls(rules: list[TlsRule], address: str) -> bool:
    at = ipaddress.ip_address(address)
    for net, ssl in rules:
        if net is None or at in net:
            return ssl
    return False


def tls_logins(foreign: tuple[str, ...], pins: Mapping[str, str]) -> frozenset[str]:
    """The logins of ``pins`` whose address the file's own rules serve over TLS only."""
    rules = _tls_rules(foreign)
    if not any(ssl for _, ssl in rules):
        return frozenset()
    return frozenset(login for login, at in pins.items() if _demands_tls(rules, at))


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


def pin_logins(consumer: Consumer) -> tuple[str, ...]:
    """The logins a consumer's line pins: its login, and an alternating pair's two alternates
    beside its owner (the owner logs in until the pair's first alternation is done)."""
    if not consumer.alt:
        return (consumer.login,)
    return (consumer.login, *_alternates(consumer.login))


def _alternates(owner: str) -> tuple[str, ...]:
    return tuple(alternate_login(owner, alt) for alt in ALTERNATES)


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
        for login in pin_logins(consumer):
            if outcome in APPLIED or (outcome in KEEP_PINNED and login in before):
                out[login] = consumer.at
    asked = {login for c in manifest.consumers for login in pin_logins(c)}
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


def _stat(folder: int, name: str, path: str) -> os.stat_result:
    """The file's stat, without following a link (its identity, for the verified memory)."""
    try:
        info = os.stat(name, dir_fd=folder, follow_symlinks=False)
    except OSError as exc:
        raise ProvisionError(f"{path}: cannot be opened ({exc.strerror})") from None
    if not stat.S_ISREG(info.st_mode):
        raise ProvisionError(f"{path}: is not a regular file")
    return info


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


def _rules(
    conn: psycopg.Connection[Any], path: str, lines: Collection[int] = ()
) -> tuple[dict[int, list[str]], list[str]]:
    """What the server's parser makes of the file now: the users of ``lines``, and every error.

    The server parses the whole file either way; only the rows asked about are sent back."""
    try:
        rows = conn.execute(
            "SELECT to_jsonb(r) FROM pg_hba_file_rules r"
            " WHERE r.error IS NOT NULL OR r.line_number = ANY(%s)",
            [list(lines)],
        ).fetchall()
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


# -- the kept session ---------------------------------------------------------------------------

_IDLE: dict[str, tuple[psycopg.Connection[Any], float]] = {}
_IDLE_LOCK = threading.Lock()


@contextlib.contextmanager
def _session(conninfo: str) -> Iterator[tuple[psycopg.Connection[Any], str]]:
    """An admin session (the one kept from the last pin run when it is still open and idle) and
    the server's ``hba_file``, asked on it; a kept session found gone is replaced once."""
    with _IDLE_LOCK:
        conn, since = _IDLE.pop(conninfo, (None, 0.0))
    if conn is not None and (time.monotonic() - since > IDLE_S or not _idle(conn)):
        conn.close()
        conn = None
    path = ""
    if conn is not None:
        try:
            path = _hba_file(conn)
        except psycopg.OperationalError:  # the server restarted, the backend ended
            conn.close()
            conn = None
    if conn is None:
        conn = psycopg.connect(conninfo, autocommit=True, connect_timeout=10)
        try:
            path = _hba_file(conn)
        except BaseException:
            conn.close()
            raise
    try:
        yield conn, path
    finally:
        _give_back(conninfo, conn)


def _idle(conn: psycopg.Connection[Any]) -> bool:
    return not conn.closed and conn.info.transaction_status == TransactionStatus.IDLE


def _give_back(conninfo: str, conn: psycopg.Connection[Any]) -> None:
    """Keep ``conn`` for the next pin run when it is open and idle (one per admin), else close."""
    if _idle(conn):
        with _IDLE_LOCK:
            if conninfo not in _IDLE:
                _IDLE[conninfo] = (conn, time.monotonic())
                return
    conn.close()


def close_sessions() -> None:
    """Close every kept admin session (tests; a process about to stop)."""
    with _IDLE_LOCK:
        kept = list(_IDLE.values())
        _IDLE.clear()
    for conn, _ in kept:
        conn.close()


# -- the whole run -------------------------------------------------------------------------------


def pin_manifest(
    conninfo: str,
    manifest: Manifest,
    outcomes: Mapping[str, str],
    only: frozenset[str] | None = None,
) -> PinResult | None:
    """Make the manifest's block of pg_hba.conf true, given this run's outcome per login.

    Without ``pin`` the block is taken away if there is one (pin turned off must not leave
    logins confined to addresses nobody keeps up to date); the caller ignores errors then.
    ``only``: a delta's logins (``manifest`` is cut to them): only their lines change, on the
    block this process last verified; None when that block is not known (run whole).
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
    path = verified.path_of(conninfo)
    try:
        if only is not None and manifest.pin:
            return _pin_delta(conninfo, manifest, outcomes, only)
        with _session(conninfo) as (conn, path):
            result = _pin(conn, conninfo, path, manifest, outcomes)
        if not manifest.pin:
            _UNPINNED.add(seen)
        return result
    except ProvisionError as exc:  # lasting: no rights, not on this machine, broken markers
        verified.forget(path)
        if not manifest.pin:
            _UNPINNED.add(seen)
        return PinResult(changed=False, error=str(exc))
    except (psycopg.Error, OSError) as exc:
        verified.forget(path)
        return PinResult(changed=False, error=f"pg_hba.conf not pinned: {_first_line(exc)}")


def _pin(
    conn: psycopg.Connection[Any],
    conninfo: str,
    path: str,
    manifest: Manifest,
    outcomes: Mapping[str, str],
) -> PinResult:
    """The whole run: the file read and parsed, the block written from every login."""
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
            blocks[scope] = block(pins, tls_logins(layout.foreign, pins))
        new = render(Layout(layout.foreign, blocks))
        settled = pins if manifest.pin else None
        if new == text:
            _remember(
                conninfo, path, (text, info), new, Layout(layout.foreign, blocks), scope, settled
            )
            return PinResult(changed=False)
        written = _apply(
            conn, conninfo, folder, name, path, (text, info), new, _lines_of(new, scope)
        )
        _remember(conninfo, path, written, new, Layout(layout.foreign, blocks), scope, settled)
    added = sorted(set(pins) - set(before))
    gone = sorted(set(before) - set(pins))
    moved = sorted(k for k in set(pins) & set(before) if pins[k] != before[k])
    parts = [f"{len(pins)} logins pinned"]
    parts += [f"{len(x)} {w}" for x, w in ((added, "added"), (gone, "removed"), (moved, "moved"))]
    return PinResult(changed=True, note=f"{path}: " + ", ".join(parts))


def _apply(
    conn: psycopg.Connection[Any],
    conninfo: str,
    folder: int,
    name: str,
    path: str,
    seen: tuple[str, os.stat_result],
    new: str,
    lines: Mapping[int, str],
) -> tuple[str, os.stat_result]:
    """Write ``new`` over exactly ``seen``, have the server check it (no error anywhere, each of
    ``lines`` read as the login it names), reload; put ``seen`` back on any failure.
    Returns the file as written (its text and stat)."""
    _, errors = _rules(conn, path)
    if errors:
        raise ProvisionError(
            f"pg_hba.conf has errors already ({'; '.join(errors[:3])}); fix them first "
            "(nothing was changed)"
        )
    _write_unchanged(folder, name, new, seen, path)
    written = _read(folder, name, path)
    try:
        users, errors = _rules(conn, path, lines)
        if errors:
            raise ProvisionError(
                f"the server refuses the new pg_hba.conf ({'; '.join(errors[:3])}); "
                "the old one was put back"
            )
        for number, login in lines.items():
            if users.get(number) != [login]:
                raise ProvisionError(
                    f"the server does not read {path} as written here (line {number}); "
                    "the old one was put back (does the provisioner run on the "
                    "database's machine?)"
                )
        _reload(conn, conninfo)
    except BaseException as exc:
        verified.forget(path)
        # put the old text back only over exactly what was written here: an edit someone
        # saved meanwhile is theirs to keep (and raises its own error)
        try:
            _write_unchanged(folder, name, seen[0], written, path, rollback=True)
        finally:
            with contextlib.suppress(psycopg.Error):
                conn.execute("SELECT pg_reload_conf()")  # in case the new text was loaded
        if isinstance(exc, psycopg.Error):
            raise ProvisionError(
                f"pg_hba.conf not reloaded ({_first_line(exc)}); the old one was put back"
            ) from None
        raise
    return written


def _remember(
    conninfo: str,
    path: str,
    now: tuple[str, os.stat_result],
    meant: str,
    layout: Layout,
    scope: str,
    pins: Mapping[str, str] | None,
) -> None:
    """Remember the file as verified: ``now`` (read back) must be ``meant`` (``layout``
    rendered). ``scope`` is settled with ``pins`` (None: pin is off, nothing settled); another
    scope stays settled while its block is the one remembered."""
    text, info = now
    if text != meant:
        verified.forget(path)
        return
    old = verified.known(path)
    settled: dict[str, verified.Settled] = {}
    if old is not None:
        settled = {
            s: kept
            for s, kept in old.settled.items()
            if s != scope and old.blocks.get(s, ()) == layout.blocks.get(s, ())
        }
    if pins is not None:
        settled[scope] = verified.Settled.of(pins)
    entry = verified.Known(
        path, info, verified.digest(text), text, layout.foreign, dict(layout.blocks), settled
    )
    verified.remember(conninfo, entry)


# -- a delta's run -------------------------------------------------------------------------------


def _pin_delta(
    conninfo: str, manifest: Manifest, outcomes: Mapping[str, str], only: frozenset[str]
) -> PinResult | None:
    """Change only the lines of the delta's logins, on the block this process verified; None
    when it has not (or the block changed outside it since): the run must be whole."""
    scope = scope_key(manifest.provider, manifest.provision)
    path = verified.path_of(conninfo)
    if not path:
        return None
    name = os.path.basename(path)
    with _locked_folder(path) as folder:
        known = verified.known(path)
        if known is None or scope not in known.settled:
            return None
        if not known.still(_stat(folder, name, path)):
            known = _read_again(conninfo, folder, name, path, known, scope)
            if known is None:
                return None
        settled = known.settled[scope]
        logins = only | {n for c in manifest.consumers if c.login in only for n in pin_logins(c)}
        logins |= {n for o in only for n in _alternates(o) if n in settled.at}  # withdrawn
        before = {login: settled.at[login] for login in logins if login in settled.at}
        now = wanted(manifest, outcomes, before)
        changes = {login: now.get(login) for login in logins if now.get(login) != before.get(login)}
        if not changes:
            return PinResult(changed=False)  # a rotation: no address moved, nothing to do
        problems = [p for p in (check_pin(k, a) for k, a in changes.items() if a is not None) if p]
        if problems:
            raise ProvisionError(f"{path}: not pinned: {'; '.join(problems)} (nothing was changed)")
        body, order = _spliced(known.blocks.get(scope, ()), settled, changes, known.foreign)
        if body is None:
            verified.forget(path)
            return None
        blocks = dict(known.blocks)
        blocks.pop(scope, None)
        if body:
            blocks[scope] = body
        layout = Layout(known.foreign, blocks)
        new = render(layout)
        pins = dict(settled.at)
        for login, address in changes.items():
            if address is None:
                del pins[login]
            else:
                pins[login] = address
        with _session(conninfo) as (conn, server_path):
            if server_path != path:  # the server was started with another file since
                verified.forget(path)
                return None
            lines = _delta_lines(new, scope, order, changes)
            seen = (known.text, known.info)
            written = _apply(conn, conninfo, folder, name, path, seen, new, lines)
        _remember(conninfo, path, written, new, layout, scope, pins)
    counts = [sum(1 for k, a in changes.items() if (a is None) == gone) for gone in (False, True)]
    note = f"{path}: {len(pins)} logins pinned, {counts[0]} added or moved, {counts[1]} removed"
    return PinResult(changed=True, note=note)


def _read_again(
    conninfo: str, folder: int, name: str, path: str, known: verified.Known, scope: str
) -> verified.Known | None:
    """The file whose stat changed since it was verified: the memory again when its bytes are
    the same, or when only another scope's block changed (taken as it now is); None
    (forgotten) when ``scope``'s block or a line not ours changed outside meshtui (a rule of
    the file's own decides whether our lines demand TLS: the whole run writes them again)."""
    text, info = _read(folder, name, path)
    if verified.digest(text) == known.sum and text == known.text:
        fresh = verified.Known(
            path, info, known.sum, text, known.foreign, known.blocks, known.settled
        )
        verified.remember(conninfo, fresh)
        return fresh
    layout = parse(text, path)
    mine = tuple(layout.blocks.get(scope, ())) != known.blocks.get(scope, ())
    if mine or tuple(layout.foreign) != known.foreign:
        verified.forget(path)
        return None
    blocks = {s: tuple(body) for s, body in layout.blocks.items()}
    settled = {
        s: kept for s, kept in known.settled.items() if blocks.get(s, ()) == known.blocks.get(s, ())
    }
    fresh = verified.Known(path, info, verified.digest(text), text, layout.foreign, blocks, settled)
    verified.remember(conninfo, fresh)
    return fresh


def _spliced(
    body: tuple[str, ...],
    settled: verified.Settled,
    changes: Mapping[str, str | None],
    foreign: tuple[str, ...],
) -> tuple[tuple[str, ...] | None, list[str]]:
    """The block's body with only ``changes`` made (login -> new address, None: removed; over
    TLS only where ``foreign``, the file's own rules, demand it), and the logins in their new
    order; None when ``body`` is not the block of ``settled``."""
    order = list(settled.order)
    lines = list(body) if body else [NOTE]
    if len(lines) != 1 + 3 * len(order):
        return None, order
    for login, address in sorted(changes.items()):
        at = bisect.bisect_left(order, login)
        there = at < len(order) and order[at] == login
        if address is None:
            if there:
                del order[at]
                del lines[1 + 3 * at : 4 + 3 * at]
        elif there:
            tls = requires_tls(foreign, address)
            lines[1 + 3 * at : 4 + 3 * at] = _login_lines(login, address, tls)
        else:
            order.insert(at, login)
            tls = requires_tls(foreign, address)
            lines[1 + 3 * at : 1 + 3 * at] = _login_lines(login, address, tls)
    return (tuple(lines) if order else ()), order


def _delta_lines(
    new: str, scope: str, order: list[str], changes: Mapping[str, str | None]
) -> dict[int, str]:
    """Line number -> login for the lines the server must read as written: each changed
    login's, and the block's first and last login's (the block is where it was written)."""
    begin = new.find(BEGIN + scope + "\n")
    if begin < 0 or not order:
        return {}
    first = new.count("\n", 0, begin) + 3  # the marker, the note, then three lines per login
    check = {order[0], order[-1]} | {k for k, a in changes.items() if a is not None}
    out: dict[int, str] = {}
    for login in check:
        at = bisect.bisect_left(order, login)
        for k in range(3):
            out[first + 3 * at + k] = login
    return out


def finish(
    conninfo: str,
    manifest: Manifest,
    outcomes: Mapping[str, str],
    only: frozenset[str] | None = None,
) -> Finished | Whole | None:
    """The kind's after-run step: :func:`pin_manifest`, reported when the file changed or when a
    pinned manifest could not be pinned (an unpinned one's error is ignored, see there);
    :class:`Whole` for a delta whose block this process has not verified."""
    pin = pin_manifest(conninfo, manifest, outcomes, only)
    if pin is None:
        return Whole("the pin block of pg_hba.conf is not verified by this process")
    if pin.changed or (pin.error and manifest.pin):
        name = OutcomeName.FAILED if pin.error else OutcomeName.UPDATED
        return Finished(FINISH_NAME, name, pin.error or pin.note)
    return None
