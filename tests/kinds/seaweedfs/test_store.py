"""The object store against a real SeaweedFS in db1's namespace: identities made, rotated,
repaired and removed by the provisioner, proven by signed requests from the consumers' nodes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from meshtui.kinds.seaweedfs import lab
from meshtui.lab import netns as lab_netns
from tests.kinds.seaweedfs.conftest import S3Mesh, Store, outcomes

pytestmark = [pytest.mark.root, pytest.mark.slow]


def _reach(store: Store, node: str, port: int, host: str | None = None) -> str:
    """From ``node``'s namespace: "open", "refused" or the error, for a TCP connect."""
    code = (
        "import socket,sys\n"
        "try:\n"
        f"    socket.create_connection(({host or store.server.address!r}, {port}), timeout=3).close()\n"
        "    print('open')\n"
        "except OSError as e:\n"
        "    print(type(e).__name__)\n"
    )
    done = subprocess.run(
        ["ip", "netns", "exec", store.ns(node), "python3", "-c", code],
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    return done.stdout.strip()


def test_only_s3_is_within_a_consumers_reach(store: Store) -> None:
    """The filer (which serves every secret key), the master and the volume server (every
    object) listen on db1's loopback only; the S3 gateway's gRPC, which must share S3's
    address, demands a client certificate of weed's own CA."""
    p = store.server.ports
    assert _reach(store, "app1", p.s3) == "open"
    for port in (p.master, p.volume, p.filer, p.master + 10000, p.volume + 10000, p.filer + 10000):
        assert _reach(store, "app1", port) != "open", port
    assert _reach(store, "app1", p.s3 + 10000) == "open"
    code = (
        "import socket,ssl\n"
        "ctx=ssl.create_default_context(); ctx.check_hostname=False; ctx.verify_mode=ssl.CERT_NONE\n"
        f"s=ctx.wrap_socket(socket.create_connection(({store.server.address!r},{p.s3 + 10000}),timeout=3))\n"
        "try:\n"
        "    s.sendall(b'PRI * HTTP/2.0\\r\\n\\r\\nSM\\r\\n\\r\\n'); print('got', s.recv(10))\n"
        "except (ssl.SSLError, OSError) as e:\n"
        "    print('refused', type(e).__name__)\n"
    )
    done = subprocess.run(
        ["ip", "netns", "exec", store.ns("app1"), "python3", "-c", code],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert done.stdout.startswith("refused"), done.stdout + done.stderr


def test_runs_as_its_own_user_with_no_terminal(store: Store) -> None:
    pid = store.server.pid()
    assert pid is not None
    status = Path(f"/proc/{pid}/status").read_text()
    uid = int(status.split("Uid:")[1].split()[0])
    assert uid != 0 and uid == lab.pwd.getpwnam(lab.SERVER_USER).pw_uid
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    assert int(stat[4]) == 0  # tty_nr: no controlling terminal
    assert int(stat[3]) == pid  # session leader: a session of its own


def test_identities_made_probed_rotated_and_removed(s3mesh: S3Mesh, store: Store) -> None:
    gitea = s3mesh.add("app1", "gitea")
    wiki = s3mesh.add(
        "app2", "wiki", values={"buckets": "wiki-media wiki-backup", "rights": "read list"}
    )
    first = s3mesh.reconcile()
    assert outcomes(first) == {gitea["as"]: "created", wiki["as"]: "created"}, first
    gitea_bucket = gitea["as"].replace("_", "-")
    # accepted, with its negative control refused, from the consumer's own node over TLS
    got = store.probe("app1", gitea["as"], s3mesh.password("app1", "gitea"), gitea_bucket)
    assert got["verdict"] == "accepted", got
    assert "random wrong password was refused" in got["reason"]
    # its own bucket takes an object; another consumer's bucket answers AccessDenied
    put = store.request("app1", "PUT", store.url(gitea_bucket, "kept.txt"), gitea["as"],
                        s3mesh.password("app1", "gitea"), body="keep me")  # fmt: skip
    assert put[0][0] == 200, put
    other = store.request(
        "app1", "GET", store.url("wiki-media"), gitea["as"], s3mesh.password("app1", "gitea")
    )
    assert other[0][1] == "AccessDenied", other
    # read-only rights: wiki may list, not write
    wiki_pw = s3mesh.password("app2", "wiki")
    assert store.request("app2", "GET", store.url("wiki-media"), wiki["as"], wiki_pw)[0][0] == 200
    denied = store.request(
        "app2", "PUT", store.url("wiki-media", "x"), wiki["as"], wiki_pw, body="x"
    )
    assert denied[0][1] == "AccessDenied", denied
    # unchanged without writing
    assert set(outcomes(s3mesh.reconcile()).values()) == {"unchanged"}
    # rotated: the new secret works, the old one is refused
    old = s3mesh.rotate("app1", "gitea")
    rotated = s3mesh.reconcile()
    assert rotated[gitea["as"]][0] == "updated", rotated
    assert (
        store.probe("app1", gitea["as"], s3mesh.password("app1", "gitea"), gitea_bucket)["verdict"]
        == "accepted"
    )
    stale = store.probe("app1", gitea["as"], old, gitea_bucket)
    assert stale["verdict"] == "refused" and "SignatureDoesNotMatch" in stale["reason"], stale
    # withdrawn: the identity is gone (InvalidAccessKeyId), its bucket and object are kept
    held = s3mesh.password("app1", "gitea")
    s3mesh.drop("app1", "gitea")
    gone = s3mesh.reconcile()
    assert gone[gitea["as"]][0] == "removed" and "kept" in gone[gitea["as"]][1], gone
    revoked = store.probe("app1", gitea["as"], held, gitea_bucket)
    assert revoked["verdict"] == "refused" and "InvalidAccessKeyId" in revoked["reason"], revoked
    kept = store.request(
        "app1", "GET", store.url(gitea_bucket, "kept.txt"), lab.ADMIN_IDENTITY, store.admin_secret()
    )
    assert kept == [[200, "keep me"]]
    assert gitea["as"] not in store.identities()


def test_identities_not_made_by_meshtui_are_never_touched(s3mesh: S3Mesh, store: Store) -> None:
    store.shell([
        "s3.configure -user=handmade_app1_aaaaaa -access_key=handmade_app1_aaaaaa "
        "-secret_key=HandMadeSecret0123456789 -actions=Read -apply",
        "s3.configure -user=someone -access_key=taken_app2_bbbbbb -secret_key=Other0123456789abcdef -actions=Read -apply",
    ])  # fmt: skip
    before = store.identities()
    s3mesh.add("app1", "handmade", login="handmade_app1_aaaaaa")
    s3mesh.add("app2", "taken", login="taken_app2_bbbbbb")
    got = s3mesh.reconcile()
    assert (
        got["handmade_app1_aaaaaa"][0] == "refused"
        and "not made by meshtui" in got["handmade_app1_aaaaaa"][1]
    )
    assert (
        got["taken_app2_bbbbbb"][0] == "refused"
        and "already identity someone's" in got["taken_app2_bbbbbb"][1]
    )
    s3mesh.consumers.clear()
    s3mesh.reconcile()  # nothing asked for: only meshtui's own would be removed
    after = store.identities()
    for name in ("handmade_app1_aaaaaa", "someone", lab.ADMIN_IDENTITY):
        assert after[name] == before[name]


def test_drift_is_restored_in_place(s3mesh: S3Mesh, store: Store) -> None:
    app = s3mesh.add("app1", "grafana")
    s3mesh.reconcile()
    login = app["as"]
    store.shell([
        f"s3.configure -user={login} -actions=Admin -apply",
        f"s3.configure -user={login} -access_key=extra_key_0001 -secret_key=Extra0123456789abcdef -apply",
    ])  # fmt: skip
    assert "Admin" in store.identities()[login]["actions"]
    assert outcomes(s3mesh.reconcile())[login] == "updated"
    identity = store.identities()[login]
    bucket = login.replace("_", "-")
    assert sorted(identity["actions"]) == sorted(f"{r}:{bucket}" for r in ("Read", "Write", "List"))
    assert [c["accessKey"] for c in identity["credentials"]] == [login]


def test_no_zero_identity_window_and_no_secret_in_argv(s3mesh: S3Mesh, store: Store) -> None:
    """Throughout reconciles that add, rotate and remove every identity, an unsigned request
    from a consumer's node is refused (never a moment with no identity, when SeaweedFS accepts
    anything), and no process's command line holds a secret key."""
    for i in range(4):
        s3mesh.add("app1", f"m{i}")
    stop = threading.Event()
    seen: list[list[object]] = []
    leaked: list[str] = []

    def secrets_now() -> list[str]:
        held = [f"m{i}" for i in range(4) if f"app1/m{i}" in s3mesh.consumers]
        return [s3mesh.password("app1", m) for m in held]

    watched = list(secrets_now())

    def unsigned() -> None:
        while not stop.is_set():
            seen.extend(
                store.request(
                    "app2", "PUT", store.url("meshtui-open-check", "x"), body="x", repeat=20
                )
            )

    def argv() -> None:
        while not stop.is_set():
            for proc in Path("/proc").glob("[0-9]*/cmdline"):
                try:
                    text = proc.read_bytes().decode(errors="replace")
                except OSError:
                    continue
                leaked.extend(s for s in watched if s in text)

    threads = [threading.Thread(target=unsigned), threading.Thread(target=argv)]
    for t in threads:
        t.start()
    try:
        s3mesh.reconcile()
        for i in range(4):
            watched.append(s3mesh.rotate("app1", f"m{i}"))
        watched.extend(secrets_now())
        s3mesh.reconcile()
        s3mesh.consumers.clear()
        assert set(outcomes(s3mesh.reconcile()).values()) == {"removed"}
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert seen and all(code == [403, "AccessDenied"] for code in seen), seen[:5]
    assert not leaked
    for secret in watched:
        assert secret not in s3mesh.last_output


def test_the_last_identity_is_never_removed(tmp_path: Path) -> None:
    """A store with no static identity: removing meshtui's last identity is held back."""
    from meshtui.contracts.adapter import Scope
    from meshtui.kinds.seaweedfs.adapter import SeaweedAdapter

    class One(SeaweedAdapter):
        def _identities(self):  # type: ignore[no-untyped-def]
            return [{"name": "only_app1_cccccc", "account": {"displayName": self.marker}}]

    text = 'master = "127.0.0.1:1"\nfiler = "127.0.0.1:2"\nadmin = "meshtui-admin"\nweed = "/bin/false"\n'
    adapter = One(text, Scope("db1/s3", "objects"))
    done = adapter.remove("only_app1_cccccc")
    assert done.outcome == "drop pending" and "last identity" in done.reason


def test_unreachable_or_untrusted_store_is_unknown_never_revoked(
    s3mesh: S3Mesh, store: Store
) -> None:
    app = s3mesh.add("app1", "loki")
    s3mesh.reconcile()
    job = {
        "op": "probe",
        "host": store.server.address,
        "port": store.server.ports.s3,
        "login": app["as"],
        "secret": s3mesh.password("app1", "loki"),
        "bucket": "",  # the default bucket, derived from the login by the probe
    }
    assert store.call("app1", job)["verdict"] == "accepted"
    closed = store.call("app1", {**job, "port": store.server.ports.s3 + 7})
    assert closed["verdict"] == "unknown" and "ConnectionRefusedError" in closed["reason"], closed
    untrusted = store.call("app1", {**job, "ca": str(store.server.conf / "grpc-ca.pem")})
    assert untrusted["verdict"] == "unknown" and "CERTIFICATE_VERIFY_FAILED" in untrusted["reason"]


def test_rights_wider_than_declared_are_unknown_never_accepted(
    s3mesh: S3Mesh, store: Store
) -> None:
    """A key that may list every bucket (rights given by hand, not by meshtui) works on its own
    bucket, but the fresh bucket outside its rights answers NoSuchBucket, not AccessDenied:
    the probe says its rights are wider than declared, every time, never accepted."""
    login, secret = f"wide_app1_{os.urandom(3).hex()}", "Wide0123456789abcdef0123456789"
    bucket = login.replace("_", "-")
    store.shell([
        f"s3.bucket.create -name {bucket}",
        f"s3.configure -user={login} -access_key={login} -secret_key={secret} "
        "-actions=Read,List -apply",
    ])  # fmt: skip
    for _ in range(2):
        got = store.probe("app1", login, secret, bucket)
        assert got["verdict"] == "unknown" and "wider than declared" in got["reason"], got
    store.shell([
        f"s3.configure -user={login} -actions=Read,List -delete -apply",
        f"s3.configure -user={login} -buckets={bucket} -actions=Read,List -apply",
    ])  # fmt: skip
    assert store.probe("app1", login, secret, bucket)["verdict"] == "accepted"


def test_a_store_with_no_identity_lets_anyone_in_and_the_probe_says_so(
    netns: lab_netns.Network,
) -> None:
    """Why meshtui never leaves the store without an identity: SeaweedFS then turns
    authentication off. Against such a store the probe says "no password demanded", never
    accepted or revoked."""

    class NoStatic(lab.WeedServer):
        def argv(self) -> list[str]:
            return [a for a in super().argv() if not a.startswith("-s3.config=")]

    base = Path(tempfile.mkdtemp(prefix="meshtui-weed-open-"))
    base.chmod(0o711)
    made = lab.create(
        base / "weed", address=netns.address("db1"), ports=lab.pick_ports(os.getpid() + 7)
    )
    server = NoStatic(made.folder, made.address, made.ports, made.user)
    try:
        server.start(netns=netns.namespace("db1"))
        store = Store(server, netns)
        made_bucket = store.request("app1", "PUT", f"{store.url('anyone').split('?')[0]}")
        put = store.request("app1", "PUT", store.url("anyone", "x"), body="x")
        assert made_bucket[0][0] == 200 and put[0][0] == 200, (made_bucket, put)  # anyone writes
        got = store.probe("app1", "nobody_app1_000000", "Wrong0123456789abcdef0123", "anyone")
        assert got["verdict"] == "no password demanded", got
        # a withdrawn pair's key (its identity gone with every other) is never "revoked", and
        # no key is ever "accepted", with or without the control, on a bucket or on none
        for bucket, control in (("anyone", False), ("never-made", True), ("never-made", False)):
            job = {"op": "probe", "host": server.address, "port": server.ports.s3,
                   "login": "gone_app1_000000", "secret": "Gone0123456789abcdef0123",
                   "bucket": bucket, "control": control}  # fmt: skip
            seen = store.call("app1", job)
            assert seen["verdict"] not in ("accepted", "refused"), (bucket, control, seen)
            if bucket == "anyone":
                assert seen["verdict"] == "no password demanded", seen
    finally:
        server.stop(kill=True)
        shutil.rmtree(base, ignore_errors=True)


def test_doctor_finds_the_static_identity_or_says_it_is_missing(
    store: Store, tmp_path: Path
) -> None:
    other = tmp_path / "admin.toml"
    other.write_text(
        store.server.admin_file.read_text().replace('admin = "meshtui-admin"', 'admin = "nobody"')
    )
    other.chmod(0o600)
    code = (
        "import json,sys\nfrom pathlib import Path\n"
        "from meshtui.kinds.seaweedfs.doctor import admin_rights\n"
        "print(json.dumps([admin_rights({}, Path(p), 10) for p in sys.argv[1:]]))\n"
    )
    done = subprocess.run(
        ["ip", "netns", "exec", store.ns("db1"), sys.executable, "-c", code,
         str(store.server.admin_file), str(other)],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    good, bad = json.loads(done.stdout)
    assert good == []
    assert len(bad) == 1 and "no static identity 'nobody'" in bad[0][0]


def _counting_weed(store: Store, folder: Path) -> tuple[Path, Path]:
    """An admin file naming a ``weed`` that notes each start in a log, then runs the real one
    (a seam: every command still goes to the real store); the admin file and the log."""
    log = folder / "weed-starts.log"
    wrapper = folder / "weed"
    wrapper.write_text(f'#!/bin/sh\necho "$1 $2" >> {log}\nexec {lab.find_weed()} "$@"\n')
    wrapper.chmod(0o755)
    admin = folder / "admin.toml"
    admin.write_text(store.server.admin_file.read_text() + f'weed = "{wrapper}"\n')
    admin.chmod(0o600)
    return admin, log


def test_a_run_keeps_one_weed_shell_for_its_read_write_and_read_back(
    s3mesh: S3Mesh, store: Store, tmp_path: Path
) -> None:
    """A provisioner run starts one ``weed shell`` for its read, its write and its read-back
    (a shell takes a third of a second to start; a rotation used to start three), and what it
    wrote is still read back: the rotated secret works and the old one is refused."""
    admin, log = _counting_weed(store, tmp_path)
    gitea = s3mesh.add("app1", "gitea")
    assert outcomes(s3mesh.reconcile(admin)) == {gitea["as"]: "created"}
    # one shell, its log on its stderr (never log files of its own in /tmp)
    assert log.read_text().split() == ["-logtostderr", "shell"]
    log.unlink()
    old = s3mesh.rotate("app1", "gitea")
    rotated = s3mesh.reconcile(admin)
    assert rotated[gitea["as"]][0] == "updated", rotated
    assert log.read_text().split() == ["-logtostderr", "shell"]
    bucket = gitea["as"].replace("_", "-")
    new = store.probe("app1", gitea["as"], s3mesh.password("app1", "gitea"), bucket)
    assert new["verdict"] == "accepted", new
    stale = store.probe("app1", gitea["as"], old, bucket)
    assert stale["verdict"] == "refused" and "SignatureDoesNotMatch" in stale["reason"], stale


def test_a_batch_larger_than_a_pipe_is_written_and_read_back_whole(s3mesh: S3Mesh) -> None:
    """400 new identities in one run: their commands (over 64 KiB, more than a pipe holds) are
    written while the shell's echo of each is read, so neither side waits on the other; every
    one is created and read back."""
    made = [s3mesh.add("app1", f"b{i}")["as"] for i in range(400)]  # ~250 bytes of commands each
    result = s3mesh.reconcile()
    assert outcomes(result) == dict.fromkeys(made, "created"), list(result.items())[:3]
    assert set(outcomes(s3mesh.reconcile()).values()) == {"unchanged"}


def test_a_shell_that_says_everything_on_stdout_is_still_understood(
    s3mesh: S3Mesh, store: Store, tmp_path: Path
) -> None:
    """The end of an exchange is found on stdout too (a ``weed`` whose stderr is merged into
    its stdout, as another version or a wrapper may do): the run still reads, writes and reads
    back, and the marker's line is no part of the answer (or the export would not parse)."""
    wrapper = tmp_path / "weed"
    wrapper.write_text(f'#!/bin/sh\nexec {lab.find_weed()} "$@" 2>&1\n')
    wrapper.chmod(0o755)
    admin = tmp_path / "admin.toml"
    admin.write_text(store.server.admin_file.read_text() + f'weed = "{wrapper}"\n')
    admin.chmod(0o600)
    gitea = s3mesh.add("app1", "gitea")
    assert outcomes(s3mesh.reconcile(admin)) == {gitea["as"]: "created"}, s3mesh.last_output
    s3mesh.rotate("app1", "gitea")
    assert outcomes(s3mesh.reconcile(admin)) == {gitea["as"]: "updated"}, s3mesh.last_output
    assert outcomes(s3mesh.reconcile(admin)) == {gitea["as"]: "unchanged"}
