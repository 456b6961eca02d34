"""The command line says Redis where it is Redis: ``provision --help`` and ``lab status``."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

from meshtui.cli import render
from meshtui.cli.lab import lab_ok


def test_provision_help_names_redis_and_its_admin_url() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "meshtui.cli", "provision", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={**os.environ, "COLUMNS": "100"},
    )
    text = " ".join(done.stdout.split())
    assert "PostgreSQL or Redis" in text
    assert "admin Redis URL" in text and "rediss://" in text
    top = subprocess.run(
        [sys.executable, "-m", "meshtui.cli", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={**os.environ, "COLUMNS": "100"},
    )
    assert "PostgreSQL or Redis" in " ".join(top.stdout.split())


def _info(redis: bool | None) -> dict[str, Any]:
    agent = {"pid": 1, "alive": True, "answers": True, "address": "10.0.0.2"}
    return {"up": True, "mode": "netns", "postgres": True, "redis": redis, "agents": {"db1": agent}}


@pytest.mark.parametrize(
    ("redis", "said", "ok"),
    [(True, "Redis running", True), (False, "Redis DOWN", False), (None, None, True)],
)
def test_lab_status_says_how_redis_is(
    redis: bool | None, said: str | None, ok: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    render.lab_status(_info(redis))
    head = capsys.readouterr().out.splitlines()[0]
    assert "PostgreSQL running" in head
    if said is None:
        assert "Redis" not in head  # a lab without redis-server has no Redis to report
    else:
        assert said in head
    assert lab_ok(_info(redis)) is ok
