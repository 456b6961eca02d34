"""``meshtui provision`` as an operator runs it: once with --json, and --watch until SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

ARGV = [sys.executable, "-m", "meshtui.cli", "provision"]


def test_provision_once_json_exit_code(mesh):
    mesh.add("app1", "gitea", database="gitea")
    manifest = mesh.write()
    done = subprocess.run(
        [*ARGV, "--json", "--manifest", str(manifest), "--admin", str(mesh.admin)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] and [o["outcome"] for o in report["outcomes"]] == ["created"]
    # a waiting consumer makes the run not ok: exit 1, and the output says why
    mesh.add("app2", "wiki", write_secret=False)
    manifest = mesh.write()
    done = subprocess.run(
        [*ARGV, "--manifest", str(manifest), "--admin", str(mesh.admin)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "waiting" in done.stdout


def test_broken_manifest_is_exit_1_with_the_file_named(mesh, tmp_path):
    bad = tmp_path / "mesh.json"
    bad.write_text('{"version": 1, "consumers": [')
    done = subprocess.run(
        [*ARGV, "--manifest", str(bad), "--admin", str(mesh.admin)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert str(bad) in done.stderr


def test_watch_reconciles_a_change_and_exits_cleanly_on_sigterm(mesh):
    mesh.add("app1", "gitea", database="gitea")
    manifest = mesh.write()
    proc = subprocess.Popen(
        [
            *ARGV,
            "--json",
            "--watch",
            "--interval",
            "0.2",
            "--manifest",
            str(manifest),
            "--admin",
            str(mesh.admin),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = json.loads(proc.stdout.readline())
        assert [o["outcome"] for o in first["outcomes"]] == ["created"]
        mesh.rotate("app1", "gitea")
        mesh.write()
        second = json.loads(proc.stdout.readline())
        assert [o["outcome"] for o in second["outcomes"]] == ["updated"]
        proc.send_signal(signal.SIGTERM)
        start = time.monotonic()
        assert proc.wait(timeout=15) == 0
        assert time.monotonic() - start < 15
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_malformed_admin_file_is_never_echoed(mesh, tmp_path):
    mesh.add("app1", "gitea", database="gitea")
    manifest = mesh.write()
    bad = tmp_path / "bad.conninfo"
    bad.write_text("host=/tmp hunter2xyz user=postgres")
    bad.chmod(0o600)
    done = subprocess.run(
        [*ARGV, "--manifest", str(manifest), "--admin", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "hunter2xyz" not in done.stdout + done.stderr
    assert "not a valid libpq conninfo" in done.stdout + done.stderr
