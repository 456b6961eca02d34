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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from meshtui.controller.core import Controller
from tests.fix_lab import running_lab
from tests.lab.overlap_app import declare_overlap, run_app

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
    if tries == 1:
        open(stop + ".ready", "w").close()  # connecting: the test may act
    time.sleep(0.001)
print(tries, refusals)
for key, digest in sorted(seen):
    print(key, digest)
"""


@pytest.fixture(scope="module")
def lab() -> Iterator[tuple[Path, Any, Path, Path]]:
    kinds = {k: False for k in ("redis", "openbao")}
    with running_lab("meshtui-overlap-seaweedfs-", kinds=kinds) as (state, built):
        declare_overlap(  # the pair alone, its credentials file and its endpoint
            state,
            built,
            r'(file = "([^"]*/srv/app1/grafana/)s3\.secret") }',
            r'\1, rotation = "overlap", format = "aws", '
            r'connection = { file = "\2s3.json", format = "json" } }',
        )
        with Controller.open(state) as ctl:
            unit = Path(ctl.inventory.pairs([GRAFANA])[0]["file"])
        yield state, built, unit, unit.with_name("s3.json")


def _held(unit: Path) -> tuple[str, str]:
    """The access key and the secret's SHA-256 the unit holds now (as the app records them)."""
    parsed = configparser.ConfigParser()
    parsed.read_string(unit.read_text())
    section = parsed["default"]
    secret = section["aws_secret_access_key"]
    return section["aws_access_key_id"], hashlib.sha256(secret.encode()).hexdigest()


def test_overlaps_move_the_app_to_the_other_access_key_with_no_refusal_and_no_straddle(
    lab: tuple[Path, Any, Path, Path],
) -> None:
    state, built, unit, conn = lab
    assert json.loads(conn.read_text())["access_key"] == _held(unit)[0]
    keys = [_held(unit)[0]]

    def rotate() -> Any:
        with Controller.open(state) as ctl:
            report = ctl.rotate([GRAFANA])
        keys.append(_held(unit)[0])
        return report

    counted = run_app(
        state, built, GRAFANA, APP, [str(unit), str(conn)], lambda: _held(unit), rotate, 3
    )
    for report in counted.results:
        assert report.ok, report
        (pair,) = report.pairs
        assert pair.old_after == "refused", pair
    assert all(a != b for a, b in itertools.pairwise(keys)), keys  # the other key each time
    assert json.loads(conn.read_text())["access_key"] == keys[-1]
    assert counted.tries >= 5 and counted.refused == 0 and counted.straddled == 0, counted
    with Controller.open(state) as ctl:
        (drilled,) = ctl.drill([GRAFANA])
    assert drilled.ok, (drilled.reason, drilled.steps)
