"""The controller's config file: defaults, the lease's numbers, and refusals naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from meshtui.controller import config
from meshtui.errors import InputError


def test_no_file_is_sqlite_with_the_default_lease(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(config.ENV, raising=False)
    got = config.load(tmp_path)
    assert got.postgres is None and not got.alone
    assert (got.lease.length_s, got.lease.renew_s, got.lease.deadline_s, got.lease.retry_s) == (
        15.0,
        5.0,
        10.0,
        2.0,
    )


def test_a_lease_table_on_sqlite_is_said_to_be_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(config.ENV, raising=False)
    (tmp_path / config.CONFIG).write_text(
        'name = "ctl-a"\n[lease]\nlength_s = 6\nrenew_s = 2\ndeadline_s = 4\n'
    )
    got = config.load(tmp_path)
    assert got.name == "ctl-a" and got.alone and got.lease.length_s == 6.0
    (tmp_path / config.CONFIG).write_text('[inventory]\npostgres = "pg.conninfo"\n[lease]\n')
    got = config.load(tmp_path)
    assert got.postgres == tmp_path / "pg.conninfo" and not got.alone


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("[lease]\ndeadline_s = 15\n", "renew_s < deadline_s < length_s"),
        ("[lease]\nrenew_s = 11\n", "renew_s < deadline_s < length_s"),
        ("[lease]\nlength_s = '15s'\n", "lease.length_s must be a number of seconds"),
        ("[lease]\nretry_s = 0\n", "lease.retry_s must be a number of seconds above 0"),
        ("[lease]\nttl = 3\n", "lease.ttl is not a lease setting"),
        ("name = ''\n", "name = '' is not a controller name"),
        ("name = \n", "not TOML"),
    ],
)
def test_bad_values_are_refused_naming_file_and_key(tmp_path: Path, text: str, named: str) -> None:
    (tmp_path / config.CONFIG).write_text(text)
    with pytest.raises(InputError, match=named) as exc:
        config.load(tmp_path)
    assert str(tmp_path / config.CONFIG) in str(exc.value)
