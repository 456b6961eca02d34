"""A test run to be interrupted (not collected: ``tests/lab/test_interrupted_run.py`` runs it).

It raises real servers — the embedded PostgreSQL and Debian's, each as the lab's user, a private
network and, with ``MESHTUI_INNER_LAB=1``, a whole lab (Redis, OpenBao, SeaweedFS, agents in
their namespaces) — writes what runs where into the file ``MESHTUI_INNER_READY`` names, and
waits to be interrupted. Its temporary folders are named too, each marked as the run's.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from meshtui.lab import netns as lab_netns
from meshtui.runas import RUN_ENV
from tests.fix_lab import running_lab
from tests.fix_pg import Clusters

READY = "MESHTUI_INNER_READY"
WITH_LAB = "MESHTUI_INNER_LAB"


@pytest.fixture(scope="module")
def lab_made() -> Iterator[tuple[list[str], list[str]]]:
    """A whole lab's namespaces and state folder when asked for, else none."""
    if os.environ.get(WITH_LAB) != "1":
        yield [], []
        return
    with running_lab("meshtui-interrupted-") as (state, built):
        yield [f"{built.network}-{node}" for node in ["net", *built.addresses]], [str(state)]


def _pids_in(namespace: str) -> list[int]:
    done = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True)
    return [int(p) for p in done.stdout.split()]


def test_holds_servers_until_interrupted(
    pg_clusters: Clusters, netns: lab_netns.Network, lab_made: tuple[list[str], list[str]]
) -> None:
    lab_namespaces, lab_folders = lab_made
    postmasters = [
        int((pg_clusters.get(v).datadir / "postmaster.pid").read_text().split()[0])
        for v in ("18", "15")
    ]
    namespaces = netns.namespaces() + lab_namespaces
    facts = {
        "run": os.environ[RUN_ENV],
        "namespaces": namespaces,
        "pids": postmasters + [p for ns in lab_namespaces for p in _pids_in(ns)],
        "folders": [str(base) for _, base in pg_clusters.started.values()] + lab_folders,
    }
    ready = Path(os.environ[READY])
    ready.with_suffix(".tmp").write_text(json.dumps(facts))
    ready.with_suffix(".tmp").rename(ready)
    time.sleep(600)
