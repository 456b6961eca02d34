"""The provisioner's harness: read the manifest and its secret files, decide, drive the adapter.

It decides per consumer: *present* (secret file there, digest matches: make it true),
*waiting* (secret missing, empty or not matching its digest: touch nothing) or *refused*
(unusable login); and which logins it made are *absent* now (remove). The adapter only does
the work. A broken manifest raises ManifestError before anything is touched.

``reconcile`` runs once (the host agent calls it right after writing the manifest; ``meshtui
provision`` calls it too). ``watch`` polls the manifest and the secret files by digest and
reconciles on a change and every ``drift_every`` seconds. A run reads each secret file once,
after the adapter's inspect, and drops it once its login is made true; nothing long-lived holds
one. A delta's run (``only``) on an adapter whose ``create`` looks before it writes
(:class:`~meshtui.contracts.adapter.Deciding`) inspects only the logins the delta removes.
A rotation's run names what becomes of each rotated login's sessions on the old credential
(``sessions``): ended or counted once the login holds the new one (:func:`_settle`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from meshtui.contracts.adapter import (
    Adapter,
    AdapterFactory,
    Alternating,
    Batching,
    CatchingUp,
    Done,
    Finish,
    Held,
    Limited,
    LiveSessions,
    Narrowing,
    Overlapping,
    Refused,
    Scope,
    Wanted,
    Whole,
    check_name,
)
from meshtui.contracts.manifest_reader import (
    Consumer,
    Manifest,
    load_manifest,
    parse_manifest,
    read_manifest_bytes,
)
from meshtui.contracts.provider_files import SecretFiles, read_admin
from meshtui.crypto import secret_digest
from meshtui.errors import ManifestError, MeshtuiError, ProvisionError, UnsafeLoginError
from meshtui.freeform import JsonObject
from meshtui.kinds import registry
from meshtui.model import APPLIED, SESSIONS_UNSETTLED, SUCCESS, Drift, OutcomeName, Sessions

MAX_SECRET_BYTES = 4096
PARALLEL_FROM = 16  # below this many writes one session is as quick as two
BATCH_FROM = 2  # from this many writes, one transaction for all (when the adapter can)


@dataclass(frozen=True)
class Outcome:
    """What happened to one login in one run, and why when it is not plain success."""

    login: str
    node: str
    module: str
    outcome: OutcomeName
    reason: str = ""
    sessions: int | None = None  # on the old credential when the new one was applied
    sessions_left: int | None = None  # of those, still open once ended (or left to drain)
    sessions_ended: bool = False
    sessions_mark: str | None = None  # left to drain: tells their sessions from later ones

    @property
    def ok(self) -> bool:
        """Whether this outcome counts as success for the exit code."""
        return self.outcome in SUCCESS


@dataclass(frozen=True)
class Report:
    """The result of one reconcile: every consumer's outcome, plus every login removed."""

    provision: str
    provider: str
    serial: int
    outcomes: tuple[Outcome, ...]
    ok: bool
    elapsed: float = field(default=0.0, compare=False)
    limits: tuple[str, ...] = ()  # what the admin cannot do with the rights it has

    def counts(self) -> dict[str, int]:
        """How many logins ended in each outcome."""
        out: dict[str, int] = {}
        for item in self.outcomes:
            out[item.outcome] = out.get(item.outcome, 0) + 1
        return out

    def as_dict(self) -> JsonObject:
        """A JSON-ready dict (``--json``)."""
        return {
            "provision": self.provision,
            "provider": self.provider,
            "serial": self.serial,
            "ok": self.ok,
            "elapsed": round(self.elapsed, 4),
            "counts": self.counts(),
            "outcomes": [  # by hand: dataclasses.asdict deep-copies, 40 ms for 1,000
                {
                    "login": o.login,
                    "node": o.node,
                    "module": o.module,
                    "outcome": o.outcome,
                    "reason": o.reason,
                    **_sessions_fields(o),
                }
                for o in self.outcomes
            ],
            "limits": list(self.limits),
        }

    def to_json(self) -> str:
        """The report as one JSON document."""
        return json.dumps(self.as_dict(), ensure_ascii=False)

    def lines(self) -> list[str]:
        """Human lines: a summary, then one line per login that is not plain "unchanged"."""
        counts = ", ".join(f"{n} {k}" for k, n in sorted(self.counts().items())) or "nothing"
        head = (
            f"{self.provision} at {self.provider}, serial {self.serial}: {counts}"
            f" ({'ok' if self.ok else 'NOT ok'}, {self.elapsed * 1000:.0f} ms)"
        )
        out = [head] + [f"  note: {limit}" for limit in self.limits]
        for item in self.outcomes:
            who = f"{item.node}/{item.module}" if item.node else "-"
            line = f"  {item.outcome:<12} {item.login:<40} {who}"
            out.append(line + (f"  ({item.reason})" if item.reason else ""))
        return out


def _sessions_fields(outcome: Outcome) -> dict[str, object]:
    """An outcome's sessions, for a report's JSON: absent when the run was asked nothing."""
    if outcome.sessions is None:
        return {}
    return {
        "sessions": outcome.sessions,
        "sessions_left": outcome.sessions_left,
        "sessions_ended": outcome.sessions_ended,
        **({"sessions_mark": outcome.sessions_mark} if outcome.sessions_mark else {}),
    }


def read_admin_file(path: Path) -> str:
    """The admin conninfo from a private (0600) file in a checked folder (:mod:`.files`)."""
    return read_admin(path)


def _read_secret(secrets: SecretFiles, consumer: Consumer) -> bytes | str:
    """The secret's bytes when they match the consumer's digest, else why it is waiting."""
    data = secrets.read(consumer.secret)
    if isinstance(data, str):
        return data
    if secret_digest(data) != consumer.digest:
        return "secret file does not match the manifest's digest"
    return data


def secret_files(manifest: Manifest) -> SecretFiles:
    """The manifest's secret files, for one run (close it, or use ``with``)."""
    return SecretFiles(manifest.folder, MAX_SECRET_BYTES)


def _password(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise Refused("the secret is not UTF-8 text") from None


def _outcome(consumer: Consumer, name: OutcomeName, reason: str = "") -> Outcome:
    return Outcome(consumer.login, consumer.node, consumer.module, name, reason)


def _apply(adapter: Adapter, consumer: Consumer, secret: bytes) -> Outcome:
    """Create-or-make-true one consumer with its secret (read once, by :func:`_reconcile`)."""
    try:
        if consumer.alt:
            if not adapter.capabilities.alternating:
                raise Refused(f"this kind has no alternate logins (alt = {consumer.alt!r})")
            done: Done = cast(Alternating, adapter).create_alternate(
                consumer.login, consumer.alt, _password(secret), consumer.values, consumer.keep
            )
        elif consumer.keep and adapter.capabilities.overlapping:
            keeping = cast(Overlapping, adapter)
            done = keeping.create_keeping(consumer.login, _password(secret), consumer.values)
        else:
            done = adapter.create(consumer.login, _password(secret), consumer.values)
    except (Refused, UnsafeLoginError) as exc:
        return _outcome(consumer, OutcomeName.REFUSED, str(exc))
    except Exception as exc:  # one consumer's failure is its outcome, not the run's end
        return _outcome(consumer, OutcomeName.FAILED, _reason(exc, adapter))
    finally:
        del secret
    return _outcome(consumer, done.outcome, done.reason)


def _unread(adapter: Adapter, exc: Exception, kind: str | None) -> Exception:
    """What ends a run whose logins cannot be read: the software's own words for its error
    (``Adapter.describe``), or the error as it was when it is not the software's."""
    said = adapter.describe(exc)
    if said is None:
        return exc
    named = registry.kind_of(kind)
    return ProvisionError(f"cannot read the {named.login_word}s from {named.title}: {said}")


def _reason(exc: BaseException, adapter: Adapter) -> str:
    said = adapter.describe(exc)
    if said is not None:
        return said
    if isinstance(exc, MeshtuiError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


@contextlib.contextmanager
def _opened(factory: AdapterFactory, conninfo: str, scope: Scope) -> Iterator[Adapter]:
    adapter = factory(conninfo, scope)
    try:
        yield adapter
    finally:
        adapter.close()


def _apply_batch(adapter: Adapter, todo: list[tuple[Consumer, bytes]]) -> dict[str, Outcome]:
    """Make ``todo`` true through the adapter's batch (``create_many``: one transaction, or
    one pipeline); the secrets are dropped with the batch."""
    results: dict[str, Outcome] = {}
    batch: list[Wanted] = []
    by_login: dict[str, Consumer] = {}
    for consumer, secret in todo:
        try:
            batch.append(Wanted(consumer.login, _password(secret), consumer.values))
            by_login[consumer.login] = consumer
        except Refused as exc:
            results[consumer.login] = _outcome(consumer, OutcomeName.REFUSED, str(exc))
        del secret
    done = cast(Batching, adapter).create_many(batch)
    batch.clear()
    for login, consumer in by_login.items():
        got = done.get(login)
        if isinstance(got, Done):
            results[login] = _outcome(consumer, got.outcome, got.reason)
        elif isinstance(got, Refused | UnsafeLoginError):
            results[login] = _outcome(consumer, OutcomeName.REFUSED, str(got))
        else:
            results[login] = _outcome(
                consumer, OutcomeName.FAILED, _reason(got or ProvisionError("no outcome"), adapter)
            )
    return results


def _apply_all(
    factory: AdapterFactory,
    first: Adapter,
    conninfo: str,
    scope: Scope,
    todo: list[tuple[Consumer, bytes]],
    workers: int,
) -> dict[str, Outcome]:
    """Apply ``todo`` (each consumer with its secret): in one batch when the adapter can (one
    transaction, verifiers computed on every core; or one Redis pipeline); else, with many, over
    ``workers`` sessions so the server uses every core."""
    if len(todo) >= BATCH_FROM and first.capabilities.batching:
        kept = {c.login: _apply(first, c, secret) for c, secret in todo if c.keep or c.alt}
        return {**_apply_batch(first, [t for t in todo if not (t[0].keep or t[0].alt)]), **kept}
    if workers <= 1 or len(todo) < PARALLEL_FROM:
        return {c.login: _apply(first, c, secret) for c, secret in todo}
    lock = threading.Lock()
    queue = iter(todo)
    results: dict[str, Outcome] = {}

    def run(adapter: Adapter) -> None:
        while True:
            with lock:
                item = next(queue, None)
            if item is None:
                return
            consumer = item[0]
            outcome = _apply(adapter, consumer, item[1])
            with lock:
                results[consumer.login] = outcome

    def extra() -> None:
        with _opened(factory, conninfo, scope) as adapter:
            run(adapter)

    with ThreadPoolExecutor(max_workers=workers - 1) as pool:
        futures = [pool.submit(extra) for _ in range(workers - 1)]
        run(first)
        for future in futures:
            with contextlib.suppress(ProvisionError):
                future.result()  # a helper that could not connect leaves its share to us
    for consumer, secret in todo:  # anything a failed helper left undone
        if consumer.login not in results:
            results[consumer.login] = _apply(first, consumer, secret)
    return results


def _workers() -> int:
    return max(1, min(2, os.cpu_count() or 1))


def adapter_for(manifest: Manifest) -> AdapterFactory:
    """The adapter of the manifest's kind (``Kind.adapter``, meshtui.kinds.registry)."""
    factory: AdapterFactory = registry.kind_of(manifest.kind).adapter.load()
    return factory


KeptSessions = Callable[[str], AdapterFactory | None]
"""``kept(kind)``: a long-lived process's kept admin sessions for a kind's name (``Kind.kept``),
lent instead of new ones; None when that kind keeps none."""


def _finish(
    manifest: Manifest,
    conninfo: str,
    ordered: tuple[Outcome, ...],
    only: frozenset[str] | None = None,
) -> tuple[Outcome, ...] | Whole:
    """The kind's after-run step (``Kind.finish``), as one more line of the report if it says so;
    for a delta's run (``only``), :class:`Whole` when the step cannot finish from the delta.

    A kind without one cannot honour ``pin``: a pinned manifest then reports that as failed."""
    kind = registry.kind_of(manifest.kind)
    if kind.finish is None:
        if not manifest.pin:
            return ()
        why = f"pin is not supported for {kind.title}; its logins are not confined"
        return (Outcome(kind.finish_name, "", "", OutcomeName.FAILED, why),)
    finish: Finish = kind.finish.load()
    done = finish(conninfo, manifest, {o.login: o.outcome for o in ordered}, only)
    if isinstance(done, Whole):
        return done
    return () if done is None else (Outcome(done.name, "", "", done.outcome, done.reason),)


def reconcile(
    manifest_path: Path,
    admin_file: Path,
    *,
    factory: AdapterFactory | None = None,
    workers: int | None = None,
    kept: KeptSessions | None = None,
    only: frozenset[str] | None = None,
    scoped: bytes | None = None,
    sessions: Mapping[str, Sessions] | None = None,
    marks: Mapping[str, str] | None = None,
) -> Report:
    """Make the provider's software match the manifest once; see the module docstring.

    ``only``: a delta's logins (changed, added or removed); only those are made true, read back
    and reported, the rest of the manifest is taken as the last whole run left it. A pinned
    manifest's delta changes only those logins' lines of its pg_hba block, on the block this
    process last verified; when the kind's after-run step cannot vouch for that block
    (:class:`Whole`: not verified by this process, or changed outside it), the manifest is then
    reconciled whole, and the delta's own outcomes are kept in the report.
    ``scoped`` (with ``only``): the manifest's text cut to those logins by whoever just wrote
    the file (the host agent), validated here instead of the file being read and cut again.
    ``sessions``: a rotation's logins, each with what becomes of its sessions on the old
    credential once it holds the new one (:func:`_settle`). ``marks``: of those, the logins
    whose sessions were left to drain by an earlier rotation, each with the mark taken then:
    only the sessions opened before it are counted or ended.

    Raises ManifestError (nothing touched) for a broken manifest and ProvisionError when the
    admin file or the server cannot be used. Every other problem is an outcome in the Report.
    """
    started = time.perf_counter()
    given = factory, workers
    manifest = (
        load_manifest(Path(manifest_path))
        if only is None
        else _load_scoped(manifest_path, only, scoped)
    )
    if factory is None and kept is not None:
        factory = kept(manifest.kind)  # a process's kept sessions (Kind.kept), when it has some
    factory = factory or adapter_for(manifest)
    if only is not None:
        manifest = dataclasses.replace(
            manifest, consumers=tuple(c for c in manifest.consumers if c.login in only)
        )
    workers = workers or registry.kind_of(manifest.kind).workers
    conninfo = read_admin_file(Path(admin_file))
    scope = Scope(provider=manifest.provider, provision=manifest.provision)
    with secret_files(manifest) as secrets:
        ordered, limits = _reconcile(
            manifest,
            conninfo,
            scope,
            secrets,
            factory,
            workers or _workers(),
            only,
            sessions,
            marks,
        )
    done = _finish(manifest, conninfo, ordered, only)  # PostgreSQL: the pin block of pg_hba.conf
    if isinstance(done, Whole):  # the delta's logins are made true; now every login and the pin
        whole = reconcile(manifest_path, admin_file, factory=given[0], workers=given[1], kept=kept)
        mine = {o.login: o for o in ordered}
        outcomes = tuple(mine.pop(o.login, o) for o in whole.outcomes) + tuple(mine.values())
        return dataclasses.replace(
            whole,
            outcomes=outcomes,
            ok=all(o.ok for o in outcomes),
            elapsed=time.perf_counter() - started,
        )
    ordered += done
    return Report(
        provision=manifest.provision,
        provider=manifest.provider,
        serial=manifest.serial,
        outcomes=ordered,
        ok=all(o.ok for o in ordered),
        elapsed=time.perf_counter() - started,
        limits=limits,
    )


def _load_scoped(path: Path, only: frozenset[str], scoped: bytes | None = None) -> Manifest:
    """The manifest with only the consumers ``only`` names validated and kept (the rest were
    checked by the whole run that wrote them); whole when it is not a JSON object with a
    consumer list (its own error is then the whole parse's). ``scoped``: that cut, made by the
    writer of the file from what it wrote."""
    path = Path(path)
    if scoped is not None:
        cut = parse_manifest(scoped, path)
        if all(c.login in only for c in cut.consumers):
            return cut
    data = read_manifest_bytes(path)
    try:
        raw = json.loads(data)
    except ValueError:
        return parse_manifest(data, path)
    if not isinstance(raw, dict) or not isinstance(raw.get("consumers"), list):
        return parse_manifest(data, path)
    raw["consumers"] = [c for c in raw["consumers"] if isinstance(c, dict) and c.get("as") in only]
    return parse_manifest(json.dumps(raw).encode(), path)


def _held(
    adapter: Adapter, wanted: Mapping[str, Mapping[str, str]], only: frozenset[str] | None
) -> Mapping[str, Held]:
    """What the software holds for ``wanted`` and every login of ours; a delta's run
    (``only``) sees those logins alone, so it neither checks nor removes any other."""
    if only is None:
        return adapter.inspect(wanted)
    if not only:
        return {}
    if adapter.capabilities.narrowing:  # the delta's logins only, not the whole server
        held = cast(Narrowing, adapter).inspect_only(wanted, only)
    else:
        held = adapter.inspect(wanted)
    return {login: h for login, h in held.items() if login in only}


def _reconcile(
    manifest: Manifest,
    conninfo: str,
    scope: Scope,
    secrets: SecretFiles,
    factory: AdapterFactory,
    workers: int,
    only: frozenset[str] | None = None,
    sessions: Mapping[str, Sessions] | None = None,
    marks: Mapping[str, str] | None = None,
) -> tuple[tuple[Outcome, ...], tuple[str, ...]]:
    """Every consumer's outcome and every removal, and what the admin cannot do.

    The inspect asks about every consumer with a safe login; then each secret file is read
    once: missing or not matching its digest, the consumer waits; else it is unchanged, refused
    (not ours) or made true with the bytes just read. ``only`` (a delta's logins; ``manifest``
    is cut to them): when the adapter's create decides as the inspection would
    (:class:`Deciding`), only the logins the delta removes are inspected, and create says
    unchanged or refused for the others in the round trip it needs anyway.
    """
    safe, unsafe = _safe(manifest)
    outcomes: dict[str, Outcome] = {
        c.login: _outcome(c, OutcomeName.REFUSED, why) for c, why in unsafe
    }
    wanted: Mapping[str, Mapping[str, str]] = {c.login: c.values for c in manifest.consumers}
    removed: list[Outcome] = []
    with _opened(factory, conninfo, scope) as adapter:
        limits = tuple(cast(Limited, adapter).limits) if adapter.capabilities.limited else ()
        asked: Mapping[str, Mapping[str, str]] = {c.login: c.values for c in safe}
        look = only
        if only is not None and adapter.capabilities.deciding:
            asked, look = {}, only - wanted.keys()  # create looks at the rest itself
        try:
            held = _held(adapter, asked, look)
        except Exception as exc:
            raise _unread(adapter, exc, manifest.kind) from None
        todo: list[tuple[Consumer, bytes]] = []
        for consumer in safe:
            secret = _read_secret(secrets, consumer)
            have = held.get(consumer.login)
            if isinstance(secret, str):
                outcomes[consumer.login] = _outcome(consumer, OutcomeName.WAITING, secret)
            elif have is not None and not have.ours:
                outcomes[consumer.login] = _outcome(consumer, OutcomeName.REFUSED, have.note)
            elif (
                have is not None
                and have.digest == consumer.digest
                and have.in_place
                and not consumer.alt  # the owner's state says nothing of its alternates
            ):
                outcomes[consumer.login] = _outcome(consumer, OutcomeName.UNCHANGED)
            else:
                todo.append((consumer, secret))
            del secret
        outcomes.update(_apply_all(factory, adapter, conninfo, scope, todo, workers))
        todo.clear()
        if sessions:
            _settle(adapter, manifest, outcomes, sessions, marks or {})
        for login in sorted(held):
            if held[login].ours and login not in wanted:
                removed.append(_remove(adapter, held[login]))
        if adapter.capabilities.catching_up:  # optional: redo an earlier failed save
            cast(CatchingUp, adapter).catch_up()
    return tuple(outcomes[c.login] for c in manifest.consumers) + tuple(removed), limits


def _settle(
    adapter: Adapter,
    manifest: Manifest,
    outcomes: dict[str, Outcome],
    sessions: Mapping[str, Sessions],
    marks: Mapping[str, str],
) -> None:
    """End (``end``) or count (``drain``) the sessions still on an old credential of each
    rotated login that now holds its new one, into its outcome. A login not made true keeps
    its sessions: its old credential is still the one it holds. A kind whose software keeps
    no session (S3: every request signed alone) has nothing to end, and says so. A failure to
    end or count leaves the outcome as it was, its note saying so, and ``sessions`` unset.
    A login in ``marks`` (a drain checked later) keeps to its sessions opened before its
    mark; one left to drain now gets a mark in its outcome for that later check."""
    live = adapter.capabilities.live_sessions
    for consumer in manifest.consumers:
        choice = sessions.get(consumer.login)
        done = outcomes.get(consumer.login)
        if choice is None or done is None or done.outcome not in APPLIED:
            continue
        if not live:
            outcomes[consumer.login] = _with_sessions(done, 0, 0, choice)
            continue
        login, digest, kept = consumer.login, consumer.digest, cast(LiveSessions, adapter)
        before, mark = marks.get(login), None
        try:
            if choice == Sessions.END:  # counted again after: the report says what is left
                ended = kept.end_sessions(login, digest, before)
                left = kept.count_sessions(login, digest, before)
            else:
                ended, left = 0, kept.count_sessions(login, digest, before)
                mark = before if before is not None else kept.mark_sessions(login)
        except Exception as exc:  # the login holds the new credential: rolling it back for
            # this would leave the old one accepted, so the failure is said, not the outcome's
            verb = "ended" if choice == Sessions.END else "counted"
            why = f"{SESSIONS_UNSETTLED} {verb}: {_reason(exc, adapter)}"
            outcomes[consumer.login] = dataclasses.replace(done, reason=_joined(done.reason, why))
            continue
        outcomes[login] = dataclasses.replace(
            _with_sessions(done, ended + left, left, choice), sessions_mark=mark
        )


def _with_sessions(done: Outcome, found: int, left: int, choice: Sessions) -> Outcome:
    """``done`` with its sessions: ``found`` on the old credential, ``left`` open after."""
    plural = "session" if found == 1 else "sessions"
    if choice == Sessions.DRAIN:
        said = f"{found} {plural} on the old credential left to drain"
    else:
        said = f"{found - left} {plural} on the old credential ended" + (
            f", {left} still open" if left else ""
        )
    return dataclasses.replace(
        done,
        reason=_joined(done.reason, said),
        sessions=found,
        sessions_left=left,
        sessions_ended=choice == Sessions.END,
    )


def _joined(first: str, then: str) -> str:
    return f"{first}; {then}" if first else then


def _safe(manifest: Manifest) -> tuple[list[Consumer], list[tuple[Consumer, str]]]:
    """Consumers with a safe login, and the rest with why their login is refused."""
    safe: list[Consumer] = []
    unsafe: list[tuple[Consumer, str]] = []
    for consumer in manifest.consumers:
        try:
            check_name(consumer.login)
        except UnsafeLoginError as exc:
            unsafe.append((consumer, str(exc)))
        else:
            safe.append(consumer)
    return safe, unsafe


def _ready(
    manifest: Manifest, secrets: SecretFiles
) -> tuple[list[Consumer], list[tuple[Consumer, bool, str]]]:
    """Consumers with a safe login and a readable secret file, and the rest held back as
    (consumer, refused, why): refused for an unsafe login, else waiting for its secret."""
    ready: list[Consumer] = []
    safe, unsafe = _safe(manifest)
    held_back: list[tuple[Consumer, bool, str]] = [(c, True, why) for c, why in unsafe]
    for consumer in safe:
        secret = _read_secret(secrets, consumer)
        if isinstance(secret, str):
            held_back.append((consumer, False, secret))
        else:
            ready.append(consumer)
        del secret
    return ready, held_back


@dataclass(frozen=True)
class Finding:
    """What the provider's software holds for one consumer, compared with its secret file.

    ``matches``: the login holds the secret file's password and its values. ``changed``: it was
    made by meshtui but no longer holds that (changed outside meshtui). ``missing``: no such
    login. ``unknown``: the admin cannot see it. ``waiting``/``refused``: as in reconcile.
    """

    login: str
    node: str
    module: str
    verdict: Drift
    reason: str = ""


def inspect(
    manifest_path: Path, admin_file: Path, *, factory: AdapterFactory | None = None
) -> tuple[Finding, ...]:
    """Read-only: does the software still hold what the manifest's secret files say? No write.

    Raises ManifestError or ProvisionError like :func:`reconcile`; reads each secret file only
    to compare its digest, and sends nothing secret to the server.
    """
    manifest = load_manifest(Path(manifest_path))
    factory = factory or adapter_for(manifest)
    conninfo = read_admin_file(Path(admin_file))
    scope = Scope(provider=manifest.provider, provision=manifest.provision)
    with secret_files(manifest) as secrets:
        ready, held_back = _ready(manifest, secrets)
    found: dict[str, Finding] = {
        c.login: _finding(c, Drift.REFUSED if refused else Drift.WAITING, why)
        for c, refused, why in held_back
    }
    alternating = {c.login: (c.alt, c.values) for c in ready if c.alt}
    with _opened(factory, conninfo, scope) as adapter:
        try:
            held = dict(adapter.inspect({c.login: c.values for c in ready}))
            if alternating and adapter.capabilities.alternating:  # the owner holds no
                held.update(cast(Alternating, adapter).inspect_alternates(alternating))  # secret
        except Exception as exc:
            raise _unread(adapter, exc, manifest.kind) from None
    for consumer in ready:
        found[consumer.login] = _compare(consumer, held.get(consumer.login))
    return tuple(found[c.login] for c in manifest.consumers)


def check_admin(kind: str | None, admin_file: Path, provider: str, provision: str) -> None:
    """Read-only: whether the admin file opens a session with the provider's software of
    ``kind`` (an expired token, a changed admin password), reading no login and no manifest;
    raises ProvisionError naming what is wrong, as :func:`reconcile` would before changing
    anything."""
    factory: AdapterFactory = registry.kind_of(kind).adapter.load()
    conninfo = read_admin_file(Path(admin_file))
    scope = Scope(provider=provider, provision=provision)
    with _opened(factory, conninfo, scope) as adapter:
        try:
            adapter.inspect({})
        except Exception as exc:
            raise _unread(adapter, exc, kind) from None


def _finding(consumer: Consumer, verdict: Drift, reason: str = "") -> Finding:
    return Finding(consumer.login, consumer.node, consumer.module, verdict, reason)


def _compare(consumer: Consumer, have: Held | None) -> Finding:
    if have is None:
        return _finding(consumer, Drift.MISSING, "the login does not exist")
    if not have.ours:
        return _finding(consumer, Drift.REFUSED, have.note)
    if not have.verified:
        return _finding(consumer, Drift.UNKNOWN, "the admin cannot read what the server holds")
    if have.digest is None:
        return _finding(consumer, Drift.CHANGED, "its password, login right or record was changed")
    if have.digest != consumer.digest:
        return _finding(consumer, Drift.CHANGED, "it holds another password")
    if not have.in_place:
        return _finding(consumer, Drift.CHANGED, "its database is gone, not its own or open to all")
    return _finding(consumer, Drift.MATCHES)


def _remove(adapter: Adapter, held: Held) -> Outcome:
    try:
        done: Done = adapter.remove(held.login)
    except (Refused, UnsafeLoginError) as exc:
        return Outcome(held.login, held.node, held.module, OutcomeName.REFUSED, str(exc))
    except Exception as exc:  # one login's failure is its outcome, not the run's end
        return Outcome(
            held.login, held.node, held.module, OutcomeName.FAILED, _reason(exc, adapter)
        )
    return Outcome(held.login, held.node, held.module, done.outcome, done.reason)


def fingerprint(manifest_path: Path) -> str:
    """A digest of the manifest and of every secret file it names (what ``watch`` compares)."""
    h = hashlib.blake2b(digest_size=32, person=b"meshtui-watch")
    try:
        data = read_manifest_bytes(Path(manifest_path))
    except MeshtuiError as exc:
        h.update(b"unreadable:" + str(exc).encode())
        return h.hexdigest()
    h.update(hashlib.blake2b(data).digest())
    try:
        manifest = parse_manifest(data, Path(manifest_path))
    except MeshtuiError:
        return h.hexdigest()
    with secret_files(manifest) as secrets:
        for consumer in manifest.consumers:
            secret = _read_secret(secrets, consumer)
            h.update(consumer.login.encode() + b"\x00")
            h.update(b"ok" if not isinstance(secret, str) else secret.encode())
            del secret
    return h.hexdigest()


def watch(
    manifest_path: Path,
    admin_file: Path,
    *,
    interval: float,
    drift_every: float,
    stop: threading.Event,
    on_report: Callable[[Report], None],
    on_error: Callable[[MeshtuiError], None] | None = None,
    factory: AdapterFactory | None = None,
) -> None:
    """Reconcile now, then whenever the manifest or a secret changes, and every ``drift_every``.

    Polls every ``interval`` seconds and returns soon after ``stop`` is set (the CLI sets it on
    SIGTERM). A failed attempt (manifest broken, server down) is passed to ``on_error`` (once per
    distinct message) and retried at the next poll, except a broken manifest, which waits until
    the files change.
    """
    last_seen: str | None = None
    last_run = float("-inf")
    failed = False
    last_error = ""
    while not stop.is_set():
        seen = fingerprint(manifest_path)
        due = time.monotonic() - last_run >= drift_every
        if seen != last_seen or due or failed:
            last_seen, last_run = seen, time.monotonic()
            try:
                report = reconcile(manifest_path, admin_file, factory=factory)
            except MeshtuiError as exc:
                failed = not isinstance(exc, ManifestError)  # a broken manifest waits for a fix
                if on_error is not None and (str(exc) != last_error or due):
                    on_error(exc)  # once per distinct problem, and again at each drift check
                last_error = str(exc)
            else:
                failed, last_error = False, ""
                on_report(report)
        stop.wait(interval)
