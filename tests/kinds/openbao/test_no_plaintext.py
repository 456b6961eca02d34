"""No secret_id in plain in OpenBao's audit log or its server log: OpenBao HMACs request and
response fields in its audit log; meshtui sends a secret_id only in a request body."""

from __future__ import annotations

import json

from meshtui.host.probe_runner import ProbeOptions, ProbeTarget, probe_one
from meshtui.model import Verdict
from tests.kinds.openbao.conftest import BMesh


def test_no_secret_id_or_token_in_the_audit_or_server_log(bmesh: BMesh) -> None:
    bmesh.add("app1", "gitea")
    bmesh.add("app2", "wiki")
    bmesh.reconcile()
    used = [bmesh.secret("app1", "gitea"), bmesh.secret("app2", "wiki")]
    bmesh.rotate("app1", "gitea")
    bmesh.reconcile()
    used.append(bmesh.secret("app1", "gitea"))
    target = ProbeTarget(
        host=bmesh.server.address,
        port=bmesh.server.port,
        user=bmesh.login_of("app1", "gitea"),
        password=used[-1],
        dbname="",
        kind="openbao",
        ca=str(bmesh.server.ca),
    )
    assert probe_one(target, ProbeOptions(allow_loopback=True)).verdict() is Verdict.ACCEPTED
    token = bmesh.token("app2", "wiki")
    bmesh.drop("app2", "wiki")
    bmesh.reconcile()
    admin = bmesh.server.admin_file.read_text().split('token = "')[1].split('"')[0]

    audit = bmesh.server.audit_log.read_text()
    server = bmesh.server.server_log.read_text()
    for secret in [*used, token, admin]:
        assert secret not in audit
        assert secret not in server
    # the audit log did see the secret_ids, as HMACs
    custom = [
        json.loads(line)
        for line in audit.splitlines()
        if '"custom-secret-id"' in line or "custom-secret-id" in line
    ]
    written = [
        e["request"]["data"]["secret_id"]
        for e in custom
        if e["type"] == "request" and e["request"].get("data", {}).get("secret_id")
    ]
    assert written and all(s.startswith("hmac-sha256:") for s in written)
