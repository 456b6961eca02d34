"""Run inside a consumer's namespace (``ip netns exec``): one S3 probe or request, the key and
secret read from stdin (never argv), the result printed as JSON. A test helper, not meshtui."""

from __future__ import annotations

import json
import sys

import httpx

from meshtui.contracts.probe_types import ProbeOptions, ProbeTarget
from meshtui.kinds.seaweedfs import probe as s3probe


def main() -> None:
    job = json.loads(sys.stdin.read())
    if job["op"] == "probe":
        target = ProbeTarget(
            job["host"], job["port"], job["login"], job["secret"], job["bucket"],
            kind="seaweedfs", ca=job["ca"],
        )  # fmt: skip
        result = s3probe.probe(target, ProbeOptions(control=job.get("control", True)))
        print(json.dumps({"verdict": str(result.verdict()), "reason": result.reason()}))
        return
    url = job["url"]
    headers = (
        s3probe._signed(job["method"], url, job["login"], job["secret"]) if job.get("login") else {}
    )
    context = s3probe.tls_context(job["ca"])
    codes = []
    with httpx.Client(verify=context, timeout=5) as client:
        for _ in range(job.get("repeat", 1)):
            try:
                resp = client.request(
                    job["method"], url, headers=headers, content=job.get("body", "").encode()
                )
                codes.append(
                    [
                        resp.status_code,
                        s3probe._code(resp.status_code, resp.content)
                        if resp.status_code >= 300
                        else resp.text,
                    ]
                )
            except httpx.HTTPError as exc:
                codes.append([0, type(exc).__name__])
    print(json.dumps(codes))


if __name__ == "__main__":
    main()
