"""The node's part of ``meshtui doctor``: look, connect, report; never write anything.

Per consumer end: its credential folder exists (a real folder, not a link), the declared owner
and group exist on this node, the reload command exists and is executable. Per provider: the
admin file is a 0600 regular file and (the check of its kind, ``Kind.doctor``) connects with
the rights the built-in provisioner needs. Per provider port a consumer here uses: a TCP connect from this node (so from
its network namespace), which is what a probe and the app itself will need. And for every end:
whether the node's policy allows its paths, owner, group, kind, admin file and commands (only
what the request names is answered; the policy itself is never sent).

A request names paths, and the agent is root: it looks only at what the policy allows. A
credential folder is walked only when the policy allows the file, a reload command looked at
only when the policy runs that argv, an admin file opened only when a ``[[providers]]`` entry
lists it; anything else gets the policy's refusal alone, so a ``check`` neither uses a root
file as an admin file nor says whether a path exists, what it is or its mode.
"""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import socket
import stat
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

from meshtui.credential_unit import held_password
from meshtui.crypto import secret_digest
from meshtui.errors import HostFileError, PolicyRefusal
from meshtui.host import credential_files as files
from meshtui.host.policy.node_policy import ConsumerAsk, Policy, ProviderAsk
from meshtui.kinds import registry
from meshtui.model import split_pair_id
from meshtui.protocol.messages import (
    CheckAnswer,
    CheckConsumer,
    CheckPort,
    CheckProvider,
    CheckRequest,
    Finding,
)

CONNECT_TIMEOUT_S = 3.0
"""A TCP connect or an admin login that takes longer is reported as not reachable."""
PARALLEL = 8


def run(node: str, request: CheckRequest, policy: Policy) -> CheckAnswer:
    """Every check ``request`` asks for, at once where they wait on the network."""
    started = time.monotonic()
    jobs: list[Callable[[], Found]] = [
        partial(consumer, c, allowed_keys(policy.consumer_refusals(_consumer_ask(c))))
        for c in request["consumers"]
    ]
    jobs += [
        partial(provider, p)
        for p in request["providers"]
        if p["admin"] is None or policy.lists_admin(p["admin"])
    ]
    jobs += [partial(consumer_policy, c, policy) for c in request["consumers"]]
    jobs += [partial(provider_policy, p, policy) for p in request["providers"]]
    jobs += [partial(port, p) for p in request["ports"]]
    with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        results = list(pool.map(lambda job: job(), jobs))
    findings = [f for found in results for f in found[0]]
    passed = sum(found[1] for found in results)
    return {
        "node": node,
        "at": time.time(),
        "passed": passed,
        "findings": findings,
        "elapsed_ms": (time.monotonic() - started) * 1000,
    }


Found = tuple[list[Finding], int]
"""Problems found and how many checks passed."""

AdminCheck = Callable[[CheckProvider, Path, float], list[tuple[str, str]]]
"""A kind's ``Kind.doctor``: what the admin in the file at ``path`` lacks for the built-in
provisioner, as (problem, fix) pairs; the float bounds its login, in seconds."""


def finding(check: str, subject: str, problem: str, fix: str) -> Finding:
    """One problem: the check (folder, owner, group, reload, admin-file, admin-rights, port),
    its subject (the pair, the provider module, or host:port), what is wrong, what to do."""
    return {"check": check, "subject": subject, "problem": problem, "fix": fix}


def _policy_found(subject: str, refused: list[PolicyRefusal]) -> Found:
    return [
        finding("policy", subject, f"{r.module}: {r.key}: {r.problem}", r.allow) for r in refused
    ], int(not refused)


def _consumer_ask(item: CheckConsumer) -> ConsumerAsk:
    provision, module, _ = split_pair_id(item["pair"])
    return ConsumerAsk(
        module,
        provision,
        item["file"],
        item["owner"],
        item["group"],
        item["reload"],
        item.get("connection"),
    )


def allowed_keys(refused: list[PolicyRefusal]) -> frozenset[str]:
    """Which of a consumer end's paths the policy allows the agent to look at: ``file`` (its
    folder) and ``reload`` (its command), unless refused."""
    return frozenset({"file", "reload"} - {r.key for r in refused})


def consumer_policy(item: CheckConsumer, policy: Policy) -> Found:
    """Whether the node's policy allows a consumer end's file, owner, group and reload, and the
    server its credential is handed to (for a kind whose login sends it)."""
    refused = policy.consumer_refusals(_consumer_ask(item))
    server = item.get("server")
    if server is not None:
        try:
            policy.server(
                server["kind"], item["pair"], server["host"], server["port"], server["ca"]
            )
        except PolicyRefusal as exc:
            refused.append(exc)
    return _policy_found(item["pair"], refused)


def provider_policy(item: CheckProvider, policy: Policy) -> Found:
    """Whether the node's policy allows each provision's manifest, grants folder and kind,
    the admin file and the provisioner."""
    refused: list[PolicyRefusal] = []
    for p in item.get("provisions", []):
        ask = ProviderAsk(
            item["provider"],
            p["provision"],
            p["kind"],
            p["receives"],
            p["grants"],
            item["admin"],
            item.get("provisioner"),
        )
        refused += [r for r in policy.provider_refusals(ask) if str(r) not in map(str, refused)]
    return _policy_found(item["provider"], refused)


def consumer(item: CheckConsumer, allowed: frozenset[str]) -> Found:
    """Credential folder, owner, group and reload command of one consumer end; the folder and
    the command only when ``allowed`` (by the node's policy: :func:`allowed_keys`; otherwise
    the policy's refusal says it all, and nothing about the path is looked at)."""
    found: list[Finding] = []
    passed = 0
    folder = os.path.dirname(item["file"]) or "/"
    why = _folder_problem(folder) if "file" in allowed else None
    if "file" not in allowed:
        pass
    elif why == "does not exist":  # push makes it, but root:root 0755: say so, and how to choose
        found.append(
            finding(
                "folder",
                item["pair"],
                f"credential folder {folder} does not exist (push would create it root:root 0755)",
                f"install -d -o root -g {item['group'] or 'root'} -m 0750 {folder}",
            )
        )
    elif why:
        found.append(
            finding(
                "folder",
                item["pair"],
                f"credential folder {folder} {why}",
                f"make every folder on the way to {folder} a real folder owned by root and "
                f"writable by nobody else (mkdir -p {folder} when it is missing)",
            )
        )
    else:
        passed += 1
    if item["owner"] is not None:
        try:
            pwd.getpwnam(item["owner"])
            passed += 1
        except KeyError:
            found.append(
                finding(
                    "owner",
                    item["pair"],
                    f"owner {item['owner']!r} of {item['file']} is not a user on this node",
                    f"create the user {item['owner']} or fix owner in the declaration",
                )
            )
    if item["group"] is not None:
        try:
            grp.getgrnam(item["group"])
            passed += 1
        except KeyError:
            found.append(
                finding(
                    "group",
                    item["pair"],
                    f"group {item['group']!r} of {item['file']} is not a group on this node",
                    f"create the group {item['group']} or fix group in the declaration",
                )
            )
    if not why:  # the file itself, once its folder may be read
        held, held_passed = held_file(item)
        found += held
        passed += held_passed
    if item["reload"] and "reload" in allowed:
        why = _command_problem(item["reload"][0])
        if why:
            found.append(
                finding(
                    "reload",
                    item["pair"],
                    f"reload command {item['reload'][0]} {why}",
                    "install it, chmod +x it, or fix reload in the declaration",
                )
            )
        else:
            passed += 1
    return found, passed


def held_file(item: CheckConsumer) -> Found:
    """The credential file as it is on the node, when there is one: its mode, owner and group
    as declared (a file every user can read is a problem), and the declared generation in it.
    Read through checked folders, never through a link; a missing file is push's to write."""
    try:
        want = files.resolve_access(item["owner"], item["group"], item.get("mode"))
    except HostFileError:
        return [], 0  # an unknown owner or group, or a bad mode: named by its own check
    path = item["file"]
    held = files.read_held(Path(path), want)
    fix = f"meshtui push writes it again as declared (mode {want.mode})"
    if held.error:
        return [finding("file", item["pair"], held.error, "move it away; " + fix)], 0
    if held.data is None:
        return [], 0
    found = [
        finding("file", item["pair"], f"credential file {path} is {u}", fix) for u in held.unlike
    ]
    password = held_password(item.get("unit"), held.data)
    if "digests" in item and (password is None or secret_digest(password) not in item["digests"]):
        found.append(
            finding(
                "file",
                item["pair"],
                f"credential file {path} holds no credential meshtui delivered for this pair "
                "(changed by hand?)",
                "meshtui push writes the current one",
            )
        )
    return found, int(not found)


def _folder_problem(folder: str) -> str | None:
    """Why the agent could not work in ``folder``, walking from ``/`` as it does, or None.

    Every folder on the way must be a real folder (no link) that only root or the agent's
    user may change; a sticky folder (``/tmp``) may be passed through but not worked in.
    """
    here = "/"
    parts = [p for p in folder.split("/") if p]
    for i, part in enumerate(["", *parts]):
        here = os.path.join(here, part) if part else "/"
        last = i == len(parts)
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            return "does not exist" if last else f"does not exist ({here} is missing)"
        except OSError as exc:
            return f"cannot be looked at ({here}: {exc.strerror})"
        if stat.S_ISLNK(st.st_mode):
            return f"is reached through a symbolic link ({here}; the agent never follows one)"
        if not stat.S_ISDIR(st.st_mode):
            return f"is not a folder ({here})"
        if st.st_uid not in (0, os.geteuid()):
            return f"is in a folder another user owns ({here}, uid {st.st_uid})"
        writable = st.st_mode & 0o022
        if writable and (last or not st.st_mode & stat.S_ISVTX):
            return (
                f"is in a folder other users can write to ({here}, mode {st.st_mode & 0o7777:04o})"
            )
    return None


def _command_problem(command: str) -> str | None:
    if "/" not in command:
        return None if shutil.which(command) else "is not found on the agent's PATH"
    try:
        st = os.stat(command)
    except FileNotFoundError:
        return "does not exist"
    except OSError as exc:
        return f"cannot be looked at ({exc.strerror})"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if not st.st_mode & 0o111 or not os.access(command, os.X_OK):
        return f"is not executable (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def provider(item: CheckProvider) -> Found:
    """The admin file's mode, and whether it connects with the rights needed (the kind's check,
    ``Kind.doctor``, for the built-in provisioner)."""
    kind = registry.kind_of(item.get("kind"))
    if item["admin"] is None:
        if not item["builtin"]:
            return [], 0
        return [
            finding(
                "admin-file",
                item["provider"],
                f"no {kind.admin_word} file is declared",
                kind.admin_fix.replace("set ", "declare ", 1),
            )
        ], 0
    path = item["admin"]
    try:
        st = os.lstat(path)
    except OSError as exc:
        return [
            finding(
                "admin-file",
                item["provider"],
                f"admin file {path} cannot be read ({exc.strerror})",
                f"write the {kind.admin_word} into {path}, mode 0600",
            )
        ], 0
    if not stat.S_ISREG(st.st_mode):
        return [
            finding(
                "admin-file",
                item["provider"],
                f"admin file {path} is not a regular file",
                "make it a regular file (not a link)",
            )
        ], 0
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        return [
            finding(
                "admin-file",
                item["provider"],
                f"admin file {path} is {mode:04o}; it must be 0600",
                f"chmod 600 {path}",
            )
        ], 0
    if not item["builtin"] or kind.doctor is None:
        return [], 1
    admin_rights: AdminCheck = kind.doctor.load()
    problems = admin_rights(item, Path(path), CONNECT_TIMEOUT_S)
    return [finding("admin-rights", item["provider"], p, f) for p, f in problems], 1 + int(
        not problems
    )


def port(item: CheckPort) -> Found:
    """A TCP connect from this node to the provider's address and port."""
    started = time.monotonic()
    try:
        with socket.create_connection((item["host"], item["port"]), timeout=CONNECT_TIMEOUT_S):
            return [], 1
    except OSError as exc:
        waited = time.monotonic() - started
        why = exc.strerror or (
            f"no answer in {waited:.1f} s" if isinstance(exc, TimeoutError) else type(exc).__name__
        )
        used_by = ", ".join(item["pairs"][:3]) + (" …" if len(item["pairs"]) > 3 else "")
        return [
            finding(
                "port",
                f"{item['host']}:{item['port']}",
                f"{item['provider']} at {item['host']}:{item['port']} cannot be reached from this "
                f"node ({why}); used by {used_by}",
                "open the port to this node (firewall, listen_addresses, routes) or fix the "
                "declared address and port",
            )
        ], 0
