"""The node reads only what its policy names: no signed request makes the agent (root) read a
file, trust a CA or send a credential anywhere its own policy does not allow.

Real agents (``meshtui host serve`` on Unix sockets) get requests signed with the controller's
key, as an attacker holding that key would send them. A real TLS listener on loopback stands in
for the attacker's vault and records every connection; a real FIFO, a real link and a real
root-only file stand in for what the attacker points the agent at.
"""

from __future__ import annotations

import json
import os
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from meshtui import cafile
from meshtui.crypto import secret_digest
from meshtui.errors import CAFileError, PolicyFileError
from meshtui.host.policy import node_policy
from meshtui.lab.certificates import make_certificates
from meshtui.protocol.messages import (
    CHECK,
    DRILL_CHECK,
    DRILL_HOLD,
    PROBE,
    SECRET_CHECK,
    SECRET_FETCH,
    STATE,
    WITHDRAW,
)
from tests.fix_agents import Mesh, mesh_policy

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the agent reads as root")

WIKI_VAULT = "secret:app1/wiki->db1/openbao"
VALUE = b"own-secret-value"


@dataclass
class Listener:
    """A TLS server on loopback answering like a vault; ``seen`` holds every request it got
    (method, path, body) and ``connections`` every TCP connection accepted."""

    server: ThreadingHTTPServer
    ca: Path
    seen: list[tuple[str, str, str]] = field(default_factory=list)
    connections: int = 0

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def bodies(self) -> str:
        return "\n".join(f"{m} {p} {b}" for m, p, b in self.seen)


@pytest.fixture
def vault(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Listener]:
    folder = tmp_path_factory.mktemp("evil-vault")
    make_certificates(folder, "127.0.0.1", server="attacker's vault")
    seen: list[tuple[str, str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keeps the connection, as OpenBao does

        def log_message(self, *args: object) -> None:
            pass

        def _answer(self, body: object) -> None:
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            seen.append(("POST", self.path, self.rfile.read(length).decode(errors="replace")))
            self._answer({"auth": {"client_token": "t"}})

        def do_GET(self) -> None:
            seen.append(("GET", self.path, ""))
            self._answer({"data": {"data": {"value": VALUE.decode()}, "metadata": {"version": 1}}})

    class Server(ThreadingHTTPServer):
        daemon_threads = True

        def get_request(self) -> Any:
            got = super().get_request()
            listener.connections += 1
            return got

    server = Server(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(folder / "server.pem", folder / "server.key")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    listener = Listener(server, folder / "ca.pem", seen)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield listener
    server.shutdown()
    server.server_close()


@pytest.fixture
def mesh(mesh_with_agents: Any) -> Mesh:
    """app1 runs gitea (a database consumer) and wiki, whose vault pair with db1/openbao is
    delivered: app1 holds wiki's vault credential, a file its agent wrote."""
    m: Mesh = mesh_with_agents(
        consumers={"app1": ["gitea"]}, port=5432, admin=None, provisioner=["true"]
    )
    ca = m.root / "vault-ca.pem"  # the declared vault's CA (never reached in these tests)
    ca.write_text("not used\n")
    m.decl.write_text(
        m.decl.read_text()
        + '\n[modules."db1/openbao"]\n'
        + f'provides = [{{ name = "secret", kind = "openbao", port = 8200, ca = "{ca}" }}]\n'
        + 'receives = { secret = "srv/db1/openbao/mesh.json" }\n'
        + 'grants = { secret = "srv/db1/openbao/grants" }\n'
        + 'provisioner = ["true"]\n'
        + '\n[modules."app1/wiki"]\n'
        + 'requires = [{ name = "secret", file = "srv/app1/wiki/vault.secret_id" }]\n'
    )
    with m.controller() as ctl:
        ctl.declare(m.decl)
        ctl.push()
    assert (m.root / "srv/app1/wiki/vault.secret_id").is_file()
    return m


def allow_vault(mesh: Mesh, listener: Listener) -> None:
    """app1's policy also lists the listener as a vault (address, port, CA), and its agent
    restarts to read it."""
    entry = node_policy.Server("openbao", "127.0.0.1", listener.port, str(listener.ca)).entry()
    node_policy.write(mesh.nodes["app1"], mesh_policy("app1", mesh.root) + "\n" + entry + "\n")
    mesh.start("app1")


def item(mesh: Mesh, listener: Listener, credential: Path, **more: object) -> dict[str, Any]:
    """A signed ``secret-fetch`` item as the attacker writes it: the credential, the vault's
    address and its CA are the request's."""
    return {
        "module": "app1/wiki",
        "name": "session_key",
        "version": 1,
        "kv_version": 1,
        "digest": secret_digest(VALUE),
        "login": "attacker_login",
        "credential": str(credential),
        "host": "127.0.0.1",
        "port": listener.port,
        "ca": str(listener.ca),
        "file": str(mesh.root / "srv/app1/wiki/own.key"),
        "owner": None,
        "group": None,
        "mode": None,
        "reload": [],
        **more,
    }


def call(mesh: Mesh, kind: Any, payload: Any) -> Any:
    with mesh.controller() as ctl, ctl.agents() as agents:
        return agents.call("app1", kind, payload)


def fetch(mesh: Mesh, one: dict[str, Any]) -> str:
    """The error of a forged ``secret-fetch`` (empty when it was done)."""
    return str(call(mesh, SECRET_FETCH, {"items": [one]})["fetched"][0]["error"] or "")


def check(mesh: Mesh, one: dict[str, Any]) -> str:
    """The error of a forged ``secret-check``."""
    keys = ("module", "name", "login", "credential", "host", "port", "ca", "file")
    answer = call(mesh, SECRET_CHECK, {"items": [{k: one[k] for k in keys}]})
    return str(answer["checked"][0]["error"] or "")


def victims(mesh: Mesh) -> list[Path]:
    """Small root-only files outside every folder app1's policy allows: its own signing key
    and a 0600 file of root's."""
    secret = mesh.root / "victim-secret"
    secret.write_text("TOP-SECRET-ROOT-ONLY\n")
    secret.chmod(0o600)
    return [mesh.nodes["app1"] / "node.key", secret]


# ---- the module's vault credential and where it goes --------------------------------------------


@pytest.mark.parametrize("listed", [False, True], ids=["vault-not-listed", "vault-listed"])
def test_secret_fetch_reads_no_file_the_agent_did_not_write_for_the_vault_pair(
    mesh: Mesh, vault: Listener, listed: bool
) -> None:
    if listed:  # even a vault the policy lists is sent only the module's own credential
        allow_vault(mesh, vault)
    for victim in victims(mesh):
        error = fetch(mesh, item(mesh, vault, victim))
        assert "nothing was read" in error or "is not a server this node" in error, error
    assert vault.connections == 0, vault.bodies()
    assert not (mesh.root / "srv/app1/wiki/own.key").exists()


def test_secret_check_reads_no_file_the_agent_did_not_write_for_the_vault_pair(
    mesh: Mesh, vault: Listener
) -> None:
    allow_vault(mesh, vault)
    held = mesh.root / "srv/app1/wiki/vault.secret_id"
    assert fetch(mesh, item(mesh, vault, held)) == ""  # the secret's file, written lawfully
    vault.seen.clear()
    vault.connections = 0
    for victim in victims(mesh):
        error = check(mesh, item(mesh, vault, victim))
        assert "nothing was read" in error, error
    assert vault.connections == 0, vault.bodies()


def test_the_held_vault_credential_goes_only_to_a_vault_the_policy_lists(
    mesh: Mesh, vault: Listener
) -> None:
    # the secret's file, written while the policy listed the vault; then the policy lists none:
    # a declaration (or the key) naming that address and port gets the module's real
    # credential sent nowhere
    held = mesh.root / "srv/app1/wiki/vault.secret_id"
    secret_id = held.read_text().strip()
    allow_vault(mesh, vault)
    assert fetch(mesh, item(mesh, vault, held)) == ""
    node_policy.write(mesh.nodes["app1"], mesh_policy("app1", mesh.root))
    mesh.start("app1")
    vault.seen.clear()
    vault.connections = 0
    for kind in (fetch, check):
        error = kind(mesh, item(mesh, vault, held))
        assert "is not a server this node sends its openbao credentials to" in error, error
        assert "[[servers]]" in error and f"port = {vault.port}" in error, error
    assert vault.connections == 0 and secret_id not in vault.bodies()
    # the same vault listed with another CA file is refused as well
    bundle = "/etc/ssl/certs/ca-certificates.crt"
    entry = node_policy.Server("openbao", "127.0.0.1", vault.port, bundle)
    node_policy.write(
        mesh.nodes["app1"], mesh_policy("app1", mesh.root) + "\n" + entry.entry() + "\n"
    )
    mesh.start("app1")
    error = fetch(mesh, item(mesh, vault, held))
    assert "is trusted here only with CA file /etc/ssl/certs/ca-certificates.crt" in error
    assert vault.connections == 0


def test_a_listed_vault_gets_the_login_with_the_credential_the_agent_wrote(
    mesh: Mesh, vault: Listener
) -> None:
    allow_vault(mesh, vault)
    held = mesh.root / "srv/app1/wiki/vault.secret_id"
    assert fetch(mesh, item(mesh, vault, held)) == ""
    assert (mesh.root / "srv/app1/wiki/own.key").read_bytes() == VALUE
    logins = [json.loads(b) for m, p, b in vault.seen if p == "/v1/auth/approle/login"]
    assert logins == [{"role_id": "attacker_login", "secret_id": held.read_text().strip()}]


def test_a_probe_hands_a_credential_only_to_a_server_the_policy_lists(
    mesh: Mesh, vault: Listener
) -> None:
    # a probe of the held vault pair, aimed at the attacker's listener with a CA it signs: a
    # vault's login hands the server the credential itself, so the policy must list the server
    held = mesh.root / "srv/app1/wiki/vault.secret_id"
    target = {**probe_item(mesh, str(vault.ca)), "host": "127.0.0.1", "port": vault.port}
    got = call(mesh, PROBE, {"targets": [target]})["results"][0]
    assert got["result"] is None and "is not a server this node sends" in got["error"], got
    assert got["digest"] is None
    bare = {k: v for k, v in target.items() if k not in ("pair", "file")}
    drill = {"drill": "d" * 32, "pair": WIKI_VAULT, "file": str(held), "target": bare}
    for kind in (DRILL_HOLD, DRILL_CHECK):
        answer = call(mesh, kind, drill)
        reports = [answer.get(k) for k in ("result", "new", "old") if answer.get(k)]
        assert reports and all("not run: " in r["reason"] for r in reports), answer
    withdrawn = {"pair": WIKI_VAULT, "file": str(held), "target": bare}
    answer = call(mesh, WITHDRAW, {"consumer": [withdrawn]})["consumer"][0]
    assert not answer["removed"] and held.exists(), answer
    assert vault.connections == 0, vault.bodies()


def test_a_listed_server_that_closes_the_connection_gets_a_verdict_not_a_500(
    mesh: Mesh, vault: Listener
) -> None:
    list_server(mesh, node_policy.Server("openbao", "127.0.0.1", vault.port, str(vault.ca)))
    vault.server.RequestHandlerClass.protocol_version = "HTTP/1.0"  # type: ignore[attr-defined]
    target = {**probe_item(mesh, str(vault.ca)), "host": "127.0.0.1", "port": vault.port}
    got = call(mesh, PROBE, {"targets": [target]})["results"][0]
    assert got["result"]["login"]["verdict"] == "accepted", got
    assert vault.connections > 0


# ---- CA files are read like credential files ------------------------------------------------


def probe_item(mesh: Mesh, ca: str) -> dict[str, Any]:
    """A forged probe of app1's held vault pair whose CA file is ``ca``."""
    return {
        "pair": WIKI_VAULT,
        "file": str(mesh.root / "srv/app1/wiki/vault.secret_id"),
        "host": "192.0.2.1",  # TEST-NET-1: never reached
        "port": 8200,
        "login": "attacker_login",
        "dbname": "",
        "kind": "openbao",
        "ca": ca,
        "tls": True,
    }


def list_server(mesh: Mesh, *servers: node_policy.Server) -> None:
    """app1's policy lists ``servers`` too; its agent restarts to read it."""
    entries = "".join("\n" + s.entry() + "\n" for s in servers)
    node_policy.write(mesh.nodes["app1"], mesh_policy("app1", mesh.root) + entries)
    mesh.start("app1")


def test_a_fifo_as_a_ca_file_is_refused_at_once_and_never_holds_a_request_slot(
    mesh: Mesh,
) -> None:
    fifo = mesh.root / "fifo-ca.pem"
    os.mkfifo(fifo, 0o644)
    list_server(mesh, node_policy.Server("openbao", "192.0.2.1", 8200, str(fifo)))
    results: list[Any] = []

    def one() -> None:
        try:
            results.append(call(mesh, PROBE, {"targets": [probe_item(mesh, str(fifo))]}))
        except Exception as exc:  # an unanswered probe
            results.append(exc)

    threads = [threading.Thread(target=one, daemon=True) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    started = time.monotonic()
    state = call(mesh, STATE, {"holdings": False})  # a slot is free: the agent answers
    assert state["node"] == "app1" and time.monotonic() - started < 5
    assert len(results) == 16, "probes still blocked on the FIFO"
    for got in results:
        assert not isinstance(got, Exception), got
        reason = got["results"][0]["result"]["login"]["reason"]
        assert f"CA file {fifo} is a FIFO" in reason, reason


def test_a_ca_file_through_a_link_or_in_another_users_folder_is_refused(
    mesh: Mesh, vault: Listener, tmp_path: Path
) -> None:
    link = mesh.root / "link-ca.pem"
    link.symlink_to(vault.ca)
    theirs = mesh.root / "theirs"
    theirs.mkdir()
    (theirs / "ca.pem").write_bytes(vault.ca.read_bytes())
    os.chown(theirs, 65534, 65534)
    cases = {
        str(link): "is a symbolic link",
        str(theirs / "ca.pem"): "is owned by",
    }
    list_server(mesh, *(node_policy.Server("openbao", "192.0.2.1", 8200, ca) for ca in cases))
    for ca, why in cases.items():
        got = call(mesh, PROBE, {"targets": [probe_item(mesh, ca)]})
        reason = got["results"][0]["result"]["login"]["reason"]
        assert why in reason and ca in reason, reason
    # and for a vault the policy lists with such a CA: nothing is sent
    held = mesh.root / "srv/app1/wiki/vault.secret_id"
    list_server(mesh, node_policy.Server("openbao", "127.0.0.1", vault.port, str(link)))
    error = fetch(mesh, item(mesh, vault, held, ca=str(link)))
    assert "is a symbolic link" in error, error
    assert vault.connections == 0


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda p: os.mkfifo(p, 0o644), "is a FIFO"),
        (lambda p: p.symlink_to("/etc/shadow"), "is a symbolic link"),
        (lambda p: p.write_bytes(b"x" * (cafile.MAX_CA + 1)), "larger than"),
        (lambda p: (p.write_text("-----BEGIN CERTIFICATE-----\n"), p.chmod(0o666)), "written by"),
    ],
    ids=["fifo", "link", "oversize", "writable"],
)
def test_cafile_refuses_what_root_must_not_trust(tmp_path: Path, make: Any, why: str) -> None:
    ca = tmp_path / "ca.pem"
    make(ca)
    with pytest.raises(CAFileError, match=why):
        cafile.context(str(ca))


# ---- doctor's check opens only admin files the policy lists --------------------------------------


def provider_check(admin: str, kind: str) -> dict[str, Any]:
    return {
        "provider": "db1/postgres",
        "admin": admin,
        "builtin": True,
        "databases": False,
        "pin": False,
        "kind": kind,
    }


def test_check_opens_no_admin_file_and_looks_at_no_path_the_policy_does_not_list(
    mesh: Mesh,
) -> None:
    fifo = mesh.root / "admin-fifo"
    os.mkfifo(fifo, 0o600)
    admins = [str(p) for p in victims(mesh)] + [str(fifo), str(mesh.root / "nonexistent")]
    found: dict[str, list[Any]] = {}
    for admin in admins:
        for kind in ("postgres", "openbao", "redis"):
            answer = call(
                mesh,
                CHECK,
                {"consumers": [], "providers": [provider_check(admin, kind)], "ports": []},
            )
            assert all(f["check"] == "policy" for f in answer["findings"]), answer["findings"]
            found[admin + kind] = [f["problem"].replace(admin, "PATH") for f in answer["findings"]]
    # an existing root file, a FIFO and a missing path are answered alike: no oracle
    assert len({json.dumps(v) for v in found.values()}) == 1, found
    # a consumer end outside the policy: neither its folder nor its reload command looked at
    ends = []
    for folder in ("/root/.ssh", "/nonexistent/folder"):
        end = {
            "pair": "database:app1/evil->db1/postgres",
            "file": f"{folder}/id",
            "owner": None,
            "group": None,
            "reload": [f"{folder}/reload"],
        }
        answer = call(mesh, CHECK, {"consumers": [end], "providers": [], "ports": []})
        assert all(f["check"] == "policy" for f in answer["findings"]), answer["findings"]
        ends.append([f["problem"].replace(folder, "PATH") for f in answer["findings"]])
    assert ends[0] == ends[1]


def test_check_looks_at_a_reload_command_the_policy_runs(mesh: Mesh) -> None:
    script = mesh.root / "reload.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o644)
    mesh.allow("app1", reload=((str(script),),))
    end = {
        "pair": "database:app1/gitea->db1/postgres",
        "file": str(mesh.root / "srv/app1/gitea/db.password"),
        "owner": None,
        "group": None,
        "reload": [str(script)],
    }
    answer = call(mesh, CHECK, {"consumers": [end], "providers": [], "ports": []})
    assert [f["check"] for f in answer["findings"]] == ["reload"], answer["findings"]
    assert f"reload command {script} is not executable (mode 0644)" in str(answer["findings"])


# ---- the policy's [[servers]] -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "key"),
    [
        ('address = "10.0.0.2"\nport = 8200', "servers[0].kind"),
        ('kind = "openbao"\naddress = "10.0.0.2"\nport = 0', "servers[0].port"),
        ('kind = "openbao"\naddress = "a b"\nport = 8200', "servers[0].address"),
        ('kind = "openbao"\naddress = "10.0.0.2"\nport = 8200\nca = "ca.pem"', "servers[0].ca"),
        ('kind = "redis"\naddress = "10.0.0.2"\nport = 6379\nfrom = "x"', "servers[0].from"),
    ],
)
def test_a_malformed_server_entry_names_the_key(tmp_path: Path, entry: str, key: str) -> None:
    node_policy.write(tmp_path, f"version = 1\n[[servers]]\n{entry}\n")
    with pytest.raises(PolicyFileError) as err:
        node_policy.load(tmp_path, "app1")
    assert err.value.key == key, err.value


def test_host_init_writes_the_servers_table_commented_and_render_reads_back(
    tmp_path: Path,
) -> None:
    path, written = node_policy.write_default(tmp_path, "app1")
    assert written and "# [[servers]]" in path.read_text()
    assert node_policy.load(tmp_path, "app1").servers == ()
    servers = [
        node_policy.Server("openbao", "10.0.0.2", 8200, "/etc/meshtui/openbao-ca.pem"),
        node_policy.Server("redis", "10.0.0.2", 6379, None),
    ]
    node_policy.write(tmp_path, node_policy.render("app1", servers=servers))
    assert node_policy.load(tmp_path, "app1").servers == tuple(servers)
