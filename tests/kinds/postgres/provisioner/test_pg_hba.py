"""The pg_hba block's text: parsed and rendered without touching a line meshtui did not write;
and the file written through directory descriptors, never through a symbolic link."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest

from meshtui.contracts.manifest_reader import Consumer, Manifest
from meshtui.errors import ProvisionError
from meshtui.kinds.postgres import hba as pg_hba

SCOPE = pg_hba.scope_key("db1/postgres", "database")

OPERATOR = """\
# TYPE  DATABASE  USER  ADDRESS  METHOD
# the operator's own comment

local   all   postgres   peer map=admin
host    all   all   10.213.0.0/24   scram-sha-256
host    replication all 10.0.0.9/32 scram-sha-256   # a trailing comment
"""


def _with(text: str, scope: str, pins: dict[str, str]) -> str:
    layout = pg_hba.parse(text)
    blocks = dict(layout.blocks)
    blocks.pop(scope, None)
    if pins:
        blocks[scope] = pg_hba.block(pins)
    return pg_hba.render(pg_hba.Layout(layout.foreign, blocks))


def _rules(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip() and not line.startswith("#")]


def test_a_file_without_our_block_renders_unchanged() -> None:
    assert pg_hba.render(pg_hba.parse(OPERATOR)) == OPERATOR
    assert pg_hba.render(pg_hba.parse("")) == ""
    assert pg_hba.render(pg_hba.parse("host all all 0.0.0.0/0 reject")) == (
        "host all all 0.0.0.0/0 reject"
    )


def test_the_block_goes_before_every_rule_and_leaves_the_others_untouched() -> None:
    text = _with(OPERATOR, SCOPE, {"gitea_app1_x": "10.213.0.3", "wiki_app2_y": "10.213.0.4"})
    lines = text.splitlines()
    begin, end = lines.index(pg_hba.BEGIN + SCOPE), lines.index(pg_hba.END + SCOPE)
    first_rule = next(i for i, line in enumerate(lines) if line.startswith("local   all"))
    assert begin < end < first_rule
    # every operator line is still there, verbatim and in order
    assert [ln for i, ln in enumerate(lines) if not begin <= i <= end] == OPERATOR.splitlines()
    ours = _rules("\n".join(lines[begin : end + 1]))
    assert ours == [
        'host all "gitea_app1_x" 10.213.0.3/32 scram-sha-256',
        'host all "gitea_app1_x" all reject',
        'local all "gitea_app1_x" reject',
        'host all "wiki_app2_y" 10.213.0.4/32 scram-sha-256',
        'host all "wiki_app2_y" all reject',
        'local all "wiki_app2_y" reject',
    ]
    # first match: for our login, the allow line and then the rejects come before any broad rule
    assert _rules(text)[:3] == ours[:3]


def test_rendering_is_idempotent_and_removal_gives_the_file_back() -> None:
    once = _with(OPERATOR, SCOPE, {"gitea_app1_x": "10.213.0.3"})
    assert _with(once, SCOPE, {"gitea_app1_x": "10.213.0.3"}) == once
    assert pg_hba.render(pg_hba.parse(once)) == once
    assert _with(once, SCOPE, {}) == OPERATOR


def test_a_rule_put_above_our_block_is_kept_and_our_block_moves_above_it() -> None:
    once = _with(OPERATOR, SCOPE, {"gitea_app1_x": "10.213.0.3"})
    edited = "host all all 0.0.0.0/0 scram-sha-256\n" + once
    again = _with(edited, SCOPE, {"gitea_app1_x": "10.213.0.3"})
    assert _rules(again)[0] == 'host all "gitea_app1_x" 10.213.0.3/32 scram-sha-256'
    assert "host all all 0.0.0.0/0 scram-sha-256" in again.splitlines()


def test_another_scopes_block_is_kept_as_it_is() -> None:
    other = pg_hba.scope_key("db1/postgres2", "database")
    text = _with(OPERATOR, other, {"grafana_app1_z": "10.213.0.3"})
    text = text.replace("all reject", "all reject  # hand edit", 1)
    both = _with(text, SCOPE, {"gitea_app1_x": "10.213.0.4"})
    assert pg_hba.parse(both).blocks[other] == pg_hba.parse(text).blocks[other]
    assert _with(both, SCOPE, {}) == text


def test_edits_inside_our_block_are_replaced() -> None:
    once = _with(OPERATOR, SCOPE, {"gitea_app1_x": "10.213.0.3"})
    tampered = once.replace("10.213.0.3/32", "0.0.0.0/0")
    assert _with(tampered, SCOPE, {"gitea_app1_x": "10.213.0.3"}) == once


@pytest.mark.parametrize(
    ("text", "line"),
    [
        (f"{pg_hba.BEGIN}{SCOPE}\nhost all all 0.0.0.0/0 reject\n", 1),
        (f"local all all peer\n{pg_hba.END}{SCOPE}\n", 2),
        (f"{pg_hba.BEGIN}{SCOPE}\n{pg_hba.BEGIN}other x\n{pg_hba.END}{SCOPE}\n", 2),
        (f"{pg_hba.BEGIN}{SCOPE}\n{pg_hba.END}{SCOPE}\n{pg_hba.BEGIN}{SCOPE}\n", 3),
    ],
)
def test_broken_markers_are_an_error_naming_the_line(text: str, line: int) -> None:
    with pytest.raises(ProvisionError, match=f"line {line}: .*nothing was changed"):
        pg_hba.parse(text)


def test_names_and_addresses_pg_hba_cannot_carry_are_refused() -> None:
    assert pg_hba.check_pin("gitea_app1_x", "10.213.0.3") == ""
    assert pg_hba.check_pin("gitea_app1_x", "fd00::3") == ""
    assert "character" in pg_hba.check_pin('a"b', "10.0.0.1")
    assert "character" in pg_hba.check_pin("a b", "10.0.0.1")
    assert "not an IP address" in pg_hba.check_pin("a", "")
    assert "not an IP address" in pg_hba.check_pin("a", "db1.example")
    assert pg_hba.block({"a": "fd00::3"})[1] == 'host all "a" fd00::3/128 scram-sha-256'


def _consumer(login: str, at: str) -> Consumer:
    return Consumer(login, "app1", login, at, {}, f"{login}.secret", "blake2b:" + "0" * 64)


def test_which_logins_keep_a_line() -> None:
    manifest = Manifest(
        path=Path("/x/mesh.json"),
        version=1,
        provision="database",
        provider="db1/postgres",
        serial=1,
        consumers=(
            _consumer("new", "10.0.0.3"),
            _consumer("late", "10.0.0.4"),
            _consumer("late_pinned", "10.0.0.5"),
            _consumer("not_ours", "10.0.0.6"),
        ),
        pin=True,
    )
    outcomes = {
        "new": "created",
        "late": "waiting",
        "late_pinned": "waiting",
        "not_ours": "refused",
        "gone": "removed",
        "stuck": "drop pending",
    }
    before = {"late_pinned": "10.0.0.5", "gone": "10.0.0.7", "stuck": "10.0.0.8"}
    assert pg_hba.wanted(manifest, outcomes, before) == {
        "new": "10.0.0.3",  # made true: pinned
        "late_pinned": "10.0.0.5",  # waiting, pinned before: never opened up meanwhile
        "stuck": "10.0.0.8",  # still exists (locked): keeps its line
    }


# -- the file, as root, through descriptors ------------------------------------------------------


def test_a_symbolic_link_anywhere_on_the_way_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (real / "pg_hba.conf").write_text(OPERATOR)
    (tmp_path / "linked").symlink_to(real)
    with pytest.raises(ProvisionError, match="symbolic link"):
        pg_hba._open_folder(str(tmp_path / "linked" / "pg_hba.conf"))
    (real / "elsewhere.conf").write_text("trust me\n")
    (real / "hba.conf").symlink_to(real / "elsewhere.conf")
    folder = pg_hba._open_folder(str(real / "hba.conf"))
    try:
        with pytest.raises(ProvisionError, match="cannot be opened"):
            pg_hba._read(folder, "hba.conf", str(real / "hba.conf"))
    finally:
        os.close(folder)
    os.mkfifo(real / "fifo.conf")
    folder = pg_hba._open_folder(str(real / "fifo.conf"))
    try:
        with pytest.raises(ProvisionError, match="not a regular file"):
            pg_hba._read(folder, "fifo.conf", str(real / "fifo.conf"))
    finally:
        os.close(folder)


@pytest.mark.root
def test_the_new_file_keeps_its_owner_and_mode(tmp_path: Path) -> None:
    """Root writes a file that belongs to another user in that user's folder, as that user's."""
    from meshtui.kinds.postgres.lab import SERVER_USER, _ensure_system_user

    pw: pwd.struct_passwd = _ensure_system_user(SERVER_USER)
    folder_path = tmp_path / "data"
    folder_path.mkdir(mode=0o700)
    os.chown(folder_path, pw.pw_uid, pw.pw_gid)
    target = folder_path / "pg_hba.conf"
    target.write_text(OPERATOR)
    os.chown(target, pw.pw_uid, pw.pw_gid)
    target.chmod(0o640)
    folder = pg_hba._open_folder(str(target))
    try:
        text, info = pg_hba._read(folder, "pg_hba.conf", str(target))
        new = _with(text, SCOPE, {"gitea_app1_x": "10.213.0.3"})
        pg_hba._write(folder, "pg_hba.conf", new, info, str(target))
    finally:
        os.close(folder)
    after = target.stat()
    assert (after.st_uid, after.st_gid, after.st_mode & 0o7777) == (pw.pw_uid, pw.pw_gid, 0o640)
    assert target.read_text() == new
    assert sorted(p.name for p in folder_path.iterdir()) == ["pg_hba.conf"]  # no temp file left


def test_pin_lines_demand_tls_where_the_files_own_rules_do() -> None:
    """A file whose rules are hostssl gets hostssl pin lines: plain ``host`` ones would let a
    pinned login in without TLS where nobody else could."""
    text = (
        "local all postgres peer\n"
        "hostssl all all 10.0.0.0/24 scram-sha-256\n"
        "host all all 192.168.0.0/16 scram-sha-256\n"
    )
    foreign = pg_hba.parse(text).foreign
    assert pg_hba.requires_tls(foreign, "10.0.0.3")
    assert not pg_hba.requires_tls(foreign, "192.168.1.5")
    assert not pg_hba.requires_tls(foreign, "172.16.0.1")  # no rule of the file's: plain host
    pins = {"a": "10.0.0.3", "b": "192.168.1.5"}
    tls = frozenset(k for k, at in pins.items() if pg_hba.requires_tls(foreign, at))
    body = pg_hba.block(pins, tls)
    assert 'hostssl all "a" 10.0.0.3/32 scram-sha-256' in body
    assert 'host all "b" 192.168.1.5/32 scram-sha-256' in body
    assert pg_hba.pinned(body) == {"a": "10.0.0.3", "b": "192.168.1.5"}
