"""SeaweedFS's overlap (two alternating access keys of one identity) end to end in the lab
(root, namespaces, the lab's SeaweedFS, real agents): an app in the consumer's namespace
makes a new S3 client every ~1 ms with the access key and the secret botocore's own reader
takes from the consumer's credential file (the AWS shared credentials file, ``format =
"aws"``), and lists its bucket, through whole rotations; it counts refusals and the pairs of
key and secret it read, and never reads anything again after a refusal. A secret read beside
another rotation's access key (a straddled read) counts apart and must not happen; the
retired key is refused at the end."""

from __future__ import annotations

import configparser
import hashlib
import itertools
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from meshtui.controller.core import Controller
from meshtui.model import node_of
from tests.fix_lab import running_lab

pytestmark = [pytest.mark.root, pytest.mark.slow]

GRAFANA = "objects:app1/grafana->db1/s3"

APP = r"""
import hashlib, json, os, sys, time
import boto3, botocore.config, botocore.credentials, botocore.exceptions
unit, conn, stop = sys.argv[1:4]
facts = json.load(open(conn))
config = botocore.config.Config(retries={"max_attempts": 1}, s3={"addressing_style": "path"})
session = boto3.session.Session()  # its service models loaded once
REFUSED = {"InvalidAccessKeyId", "SignatureDoesNotMatch"}
tries = refusals = 0
seen = set()
while not os.path.exists(stop):
    # botocore's own reader of the shared credentials file, read again for each client
    held = botocore.credentials.SharedCredentialProvider(creds_filename=unit).load()
    held = held.get_frozen_credentials()
    seen.add((held.access_key, hashlib.sha256(held.secret_key.encode()).hexdigest()))
    s3 = session.client("s3", endpoint_url=facts["endpoint"], region_name=facts["region"],
                        verify=facts.get("ca", True), config=config,
                        aws_access_key_id=held.access_key,
                        aws_secret_access_key=held.secret_key)
    try:
        s3.list_objects_v2(Bucket=facts["bucket"], MaxKeys=1)
    except botocore.exceptions.ClientError as exc:
        if exc.response["Error"]["Code"] not in REFUSED:
            raise
        refusals += 1
        print(time.time(), "refused", held.access_key, exc.response["Error"]["Code"], file=sys.stderr)
    tries += 1
    time.sleep(0.001)
print(tries, refusals)
for key, digest in sorted(seen):
    print(key, digest)
"""


@pytest.fixture(scope="module")
def lab() -> Iterator[tuple[Path, Any, Path, Path]]:
    kinds = {k: False for k in ("redis", "openbao")}
    with running_lab("meshtui-overlap-seaweedfs-", kinds=kinds) as (state, built):
        text = built.declaration.read_text()
        text, needs = re.subn(  # the pair alone, its credentials file and its endpoint
            r'(file = "([^"]*/srv/app1/grafana/)s3\.secret") }',
            r'\1, rotation = "overlap", format = "aws", '
            r'connection = { file = "\2s3.json", format = "json" } }',
            text,
        )
        assert needs == 1, text
        overlapped = state / "overlap.toml"
        overlapped.write_text(text)
        with Controller.open(state) as ctl:
            ctl.declare(overlapped)
            assert ctl.push().ok
            row = ctl.inventory.pairs([GRAFANA])[0]
        unit = Path(row["file"])
        yield state, built, unit, unit.with_name("s3.json")


def _held(unit: Path) -> tuple[str, str]:
    """The access key and the secret's SHA-256 the unit holds now (as the app records them)."""
    parsed = configparser.ConfigParser()
    parsed.read_string(unit.read_text())
    section = parsed["default"]
    secret = section["aws_secret_access_key"]
    return section["aws_access_key_id"], hashlib.sha256(secret.encode()).hexdigest()


def test_overlaps_move_the_app_to_the_other_access_key_with_no_refusal_and_no_straddle(
    lab: tuple[Path, Any, Path, Path], tmp_path: Path
) -> None:
    state, built, unit, conn = lab
    assert json.loads(conn.read_text())["access_key"] == _held(unit)[0]
    stop = tmp_path / "stop"
    with Controller.open(state, read_only=True) as ctl:
        consumer = ctl.inventory.pairs([GRAFANA])[0]["consumer"]
    proc = subprocess.Popen(
        ["ip", "netns", "exec", built.namespace(node_of(consumer)), sys.executable, "-c", APP,
         str(unit), str(conn), str(stop)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    held = {_held(unit)}
    keys = [_held(unit)[0]]
    reports = []
    time.sleep(2.0)
    try:
        for _ in range(3):
            with Controller.open(state) as ctl:
                started = time.time()
                reports.append(ctl.rotate([GRAFANA]))
                print(f"rotation {started:.3f} -> {time.time():.3f}: {_held(unit)[0]}")
            held.add(_held(unit))
            keys.append(_held(unit)[0])
        time.sleep(1.0)
    finally:
        stop.touch()
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    print(err[-3000:])
    first, *lines = out.splitlines()
    tries, refused = map(int, first.split())
    read = {(key, digest) for key, digest in (line.split() for line in lines)}
    keys_of: dict[str, set[str]] = {}
    for key, digest in read | held:
        keys_of.setdefault(digest, set()).add(key)
    straddled = {(k, d) for k, d in read if len(keys_of[d]) > 1}  # one secret, two keys
    print(f"seaweedfs overlap x3: {tries} clients, {refused} refused, {len(straddled)} straddled")
    for report in reports:
        assert report.ok, report
        (pair,) = report.pairs
        assert pair.old_after == "refused", pair
    assert all(a != b for a, b in itertools.pairwise(keys)), keys  # the other key each time
    assert json.loads(conn.read_text())["access_key"] == keys[-1]
    assert tries > 20 and refused == 0 and not straddled, (tries, refused, straddled)
    with Controller.open(state) as ctl:
        (drilled,) = ctl.drill([GRAFANA])
    assert drilled.ok, (drilled.reason, drilled.steps)
