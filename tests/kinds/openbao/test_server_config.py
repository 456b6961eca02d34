"""What ``meshtui kind config openbao`` prints is what the lab's OpenBao runs (its server blocks,
the provisioner's policy, the admin token's fields), and the admin token it describes can do what
the provisioner needs, is renewable (periodic), and cannot read what the manual says it cannot:
no module's secret, no other policy, nothing under ``sys/`` beyond what is mounted."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

from meshtui.contracts.server_config import TOKEN, ServerConfig
from meshtui.kinds.openbao import lab as lab_bao
from meshtui.kinds.openbao import server_config
from meshtui.kinds.openbao.client import APPROLE_MOUNT, KV_MOUNT, Bao, read_admin


def _printed(server: lab_bao.BaoServer) -> ServerConfig:
    place = dataclasses.replace(
        server_config.DEFAULT,
        address=server.address,
        port=server.port,
        cert=str(server.folder / "tls" / "server.pem"),
        key=str(server.folder / "tls" / "server.key"),
        ca=str(server.ca),
        conf=str(server.folder),
        data=str(server.folder / "data"),
        admin_file=str(server.admin_file),
    )
    return server_config.build(place)


def test_the_lab_runs_the_printed_server_blocks_and_policy(bao_server: lab_bao.BaoServer) -> None:
    printed = _printed(bao_server)
    running = bao_server.config.read_text()
    blocks = (
        printed.file("bao.hcl")
        .text.replace('"meshtui"', '"meshtui-lab"', 1)
        .replace(f":{bao_server.port + 1}", f":{bao_server.cluster_port}")
    )
    assert running.startswith(blocks.split("api_addr")[0]), "the lab's storage/listener/audit"
    for line in blocks.splitlines():
        if line.startswith(("api_addr", "disable_mlock", "ui ")):
            assert line in running.splitlines(), line
    with bao_server.root() as bao:
        policy = bao.data("GET", f"sys/policies/acl/{server_config.PROVISIONER_POLICY_NAME}")
    assert policy["policy"] == printed.file("meshtui_provisioner.hcl").text
    shown = read_admin(printed.file("admin.toml").text)
    assert shown["token"] == TOKEN and shown["address"] == bao_server.url


def test_the_admin_token_is_periodic_and_least_privilege(bao_server: lab_bao.BaoServer) -> None:
    token = read_admin(bao_server.admin_file.read_text())["token"]
    with Bao(bao_server.url, ca=str(bao_server.ca), token=token) as bao:
        me = bao.data("GET", "auth/token/lookup-self")
        assert me["period"] == 768 * 3600 and me["renewable"] is True
        assert server_config.PROVISIONER_POLICY_NAME in me["policies"]
        renewed = bao.call("POST", "auth/token/renew-self", {})
        assert renewed is not None and renewed["auth"]["lease_duration"] == 768 * 3600
        # what the provisioner needs
        for path in ("sys/auth", f"sys/mounts/{KV_MOUNT}"):
            assert bao.send("GET", path).status_code == 200, path
        assert bao.send("LIST", f"auth/{APPROLE_MOUNT}/role").status_code in (200, 404)
        # what the manual says it cannot
        for method, path in (
            ("GET", f"{KV_MOUNT}/data/some_login/session_key"),
            ("GET", "sys/policies/acl/default"),
            ("PUT", "sys/policies/acl/root-like"),
            ("GET", "sys/mounts"),
            ("GET", "sys/audit"),
            ("POST", "sys/mounts/other"),
            ("POST", "auth/token/create"),
            ("PUT", "sys/seal"),
            ("GET", f"auth/{APPROLE_MOUNT}/role/someone-else"),
        ):
            answer = bao.send(method, path, {"policy": "x", "type": "kv"})
            assert answer.status_code == 403, (method, path, answer.status_code)


def test_the_printed_renewal_renews_the_admin_token_without_an_argument_or_environment(
    bao_server: lab_bao.BaoServer,
) -> None:
    """The "what expires" line, run by a shell as printed: OpenBao answers 200; with the token
    in the admin file broken it fails (curl's 22), so a cron job mails its failure."""
    line = server_config.renew_command(
        bao_server.url, str(bao_server.ca), str(bao_server.admin_file)
    )
    assert line in " ".join(_printed(bao_server).expires)
    token = read_admin(bao_server.admin_file.read_text())["token"]
    assert token not in line
    done = subprocess.run(["sh", "-c", line], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and done.stdout.strip() == "200", done.stdout + done.stderr
    broken = bao_server.admin_file.with_name("broken-admin.toml")
    broken.write_text(server_config.admin_text(bao_server.url, str(bao_server.ca), "s.nope"))
    line = server_config.renew_command(bao_server.url, str(bao_server.ca), str(broken))
    done = subprocess.run(["sh", "-c", line], capture_output=True, text=True, timeout=30)
    assert done.returncode == 22 and done.stdout.strip() == "403", done.stdout + done.stderr


def test_the_printed_token_line_writes_no_admin_file_when_no_token_came(tmp_path: Path) -> None:
    """``bao token create`` failed (the vault sealed, the login expired): the line's shell gets
    nothing on its input and writes no admin file, rather than one with ``token = ""``; given a
    token, it writes the file 0600 around it."""
    admin = tmp_path / "admin.toml"
    line = server_config.token_into_file("https://10.0.0.2:8200", "/ca.pem", str(admin))
    for nothing in ("", "\n"):
        subprocess.run(["sh", "-c", line], input=nothing, text=True, timeout=10)
        assert not admin.exists(), repr(nothing)
    subprocess.run(["sh", "-c", line], input="s.abc", text=True, timeout=10, check=True)
    assert read_admin(admin.read_text())["token"] == "s.abc"
    assert admin.stat().st_mode & 0o777 == 0o600
