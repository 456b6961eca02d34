"""Each check of the contract suite, seen to fail on an injected fault.

``python -m tests.kinds.faults [NAME ...]`` copies ``meshtui/`` and ``tests/`` into a temporary
folder, breaks the copy in one small way (the source itself is never touched), and runs there the
contract check that must catch it. A fault the check does not
catch is a check that proves nothing: the run says so and exits 1.

Not collected by pytest (no ``test_`` prefix): it runs the suite many times, against real servers.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Fault:
    """One fault: in ``file`` (under meshtui/), ``old`` becomes ``new`` (everywhere it is), and so
    for each (file, old, new) in ``more``; ``check`` (a pytest -k expression over
    tests/kinds/test_contract.py) must then fail for each kind in ``kinds``."""

    name: str
    file: str
    old: str
    new: str
    check: str
    kinds: tuple[str, ...] = ("postgres", "redis")
    more: tuple[tuple[str, str, str], ...] = ()


FAULTS = (
    Fault(
        "create-wrong-password",
        "provisioner/harness.py",
        "adapter.create(consumer.login, _password(secret), consumer.values)",
        'adapter.create(consumer.login, _password(secret) + "x", consumer.values)',
        "test_create_makes",
    ),
    Fault(
        "held-login-never-rewritten",
        "provisioner/harness.py",
        "elif have is not None and have.digest == consumer.digest and have.in_place:",
        "elif have is not None and have.ours:",
        "test_the_password_is_set_every_time",
    ),
    Fault(
        "every-run-rewrites",
        "provisioner/harness.py",
        "elif have is not None and have.digest == consumer.digest and have.in_place:",
        "elif False:",
        "test_an_unchanged_run_writes_nothing",
        ("redis",),  # PostgreSQL's create looks before it writes: its own fault below
    ),
    Fault(
        "postgres-inspection-writes",
        "kinds/postgres/reading.py",
        '        return self._inspected(wanted, self._inspect_sql, {"marker": MARKER})',
        '        self.conn.execute("SELECT txid_current()")\n'
        '        return self._inspected(wanted, self._inspect_sql, {"marker": MARKER})',
        "test_an_unchanged_run_writes_nothing",
        ("postgres",),
    ),
    Fault(
        "postgres-drift-not-looked-at",
        "kinds/postgres/reading.py",
        "intact = can_login and same_txn",
        "intact = True",
        "test_drift_is_restored",
        ("postgres",),
    ),
    Fault(
        "redis-drift-not-looked-at",
        "kinds/redis/adapter.py",
        "intact = user.rules_hash() == user.marker.rules",
        "intact = True",
        "test_drift_is_restored",
        ("redis",),
    ),
    Fault(
        "sessions-not-ended",
        "kinds/postgres/adapter.py",
        '        """End every session of ``login`` and wait until they are gone."""\n',
        '        """End every session of ``login`` and wait until they are gone."""\n        return\n',
        "test_removal_keeps",
        ("postgres",),
    ),
    Fault(
        "removal-drops-the-data",
        "kinds/postgres/adapter.py",
        "            if keeper is not None:\n                self._act_as(keeper)",
        "            if False:\n                self._act_as(keeper)",
        "test_removal_keeps",
        ("postgres",),
    ),
    Fault(
        "removal-only-locks",
        "kinds/redis/adapter.py",
        '_command(self.client, "ACL", "DELUSER", login)',
        '_command(self.client, "ACL", "SETUSER", login, "resetpass", "nopass")',
        "test_removal_keeps",
        ("redis",),
    ),
    Fault(
        "removal-drops-the-keys",
        "kinds/redis/adapter.py",
        '_command(self.client, "ACL", "DELUSER", login)',
        '_command(self.client, "ACL", "DELUSER", login)\n'
        '            _command(self.client, "DEL", f"{login}:kept")',
        "test_removal_keeps",
        ("redis",),
    ),
    Fault(
        "postgres-foreign-taken-as-ours",
        "kinds/postgres/reading.py",
        "out[name] = Held(name, ours=False, note=_foreign(marked, record))",
        "out[name] = Held(name, ours=True)",
        "test_logins_meshtui_did_not_make",
        ("postgres",),
        more=(  # its create decides as the inspection would: both are broken
            (
                "kinds/postgres/create.py",
                '        """A marked role whose record is ours for this scope, or was lost (then we'
                ' repair it)."""\n',
                '        """A marked role whose record is ours for this scope, or was lost (then we'
                ' repair it)."""\n        return True\n',
            ),
        ),
    ),
    Fault(
        "redis-foreign-taken-as-ours",
        "kinds/redis/adapter.py",
        '        """Why ``user`` is not ours for this scope, or None when it is."""\n',
        '        """Why ``user`` is not ours for this scope, or None when it is."""\n'
        "        return None\n",
        "test_logins_meshtui_did_not_make",
        ("redis",),
    ),
    Fault(
        "long-names-not-checked",
        "provisioner/adapter.py",
        "    if size > MAX_NAME_BYTES:",
        "    if False:",
        "test_a_name_the_server_cannot_hold",
        ("postgres",),  # PostgreSQL would cut the name to 63 bytes and create that
        more=(  # and the adapter's second guard, the truncation notice taken as an error
            (
                "kinds/postgres/roles.py",
                'raise UnsafeLoginError(f"PostgreSQL truncated a name: {found[0]}")',
                "pass",
            ),
        ),
    ),
    Fault(
        "redis-names-not-checked",
        "kinds/redis/acl.py",
        "    if _NAME_BAD.search(name):\n        return (",
        "    if False:\n        return (",
        "test_a_name_the_server_cannot_hold",
        ("redis",),
        more=(  # and the server's own refusal reported as a failure, not a refusal
            (
                "kinds/redis/adapter.py",
                'raise Refused(f"Redis refused the ACL rules: {_why(exc)}") from None',
                'raise ProvisionError(f"Redis refused the ACL rules: {_why(exc)}") from None',
            ),
        ),
    ),
    Fault(
        "broken-manifest-read-as-empty",
        "provisioner/manifest.py",
        '    source = str(path)\n    try:\n        text = data.decode("utf-8")',
        "    source = str(path)\n    try:\n        json.loads(data)\n    except ValueError:\n"
        '        data = data if data.startswith(b"{") and data.endswith(b"}") else b"{}"\n'
        '    if not json.loads(data).get("consumers"):\n'
        "        data = json.dumps({'version': 1, 'provision': 'contract', "
        "'provider': 'db1/provider', 'serial': 99, 'consumers': [], "
        "**({'kind': 'redis'} if 'redis' in str(path.parent.parent) else {})}).encode()\n"
        '    try:\n        text = data.decode("utf-8")',
        "test_a_broken_manifest",
    ),
    Fault(
        "missing-secret-taken-as-absent",
        "provisioner/harness.py",
        "            if isinstance(secret, str):\n                outcomes[consumer.login] = "
        "_outcome(consumer, OutcomeName.WAITING, secret)",
        "            if isinstance(secret, str):\n                wanted = {k: v for k, v in "
        "wanted.items() if k != consumer.login}\n                continue",
        "test_a_consumer_without_its_secret",
    ),
    Fault(
        "postgres-logging-not-lowered",
        "kinds/postgres/quiet.py",
        '    ("log_statement", "none"),\n',
        "",
        "test_no_plaintext",
        ("postgres",),
    ),
    Fault(
        "redis-password-in-a-command",
        "kinds/redis/adapter.py",
        "        write = self._prepare(login, password, values)\n",
        "        write = self._prepare(login, password, values)\n"
        '        _command(self.client, "ECHO", password)\n',
        "test_no_plaintext",
        ("redis",),
    ),
    Fault(
        "postgres-refusal-not-seen",
        "kinds/postgres/probe.py",
        'return Verdict.REFUSED, "password authentication failed (28P01)"',
        'return Verdict.UNKNOWN, "password authentication failed (28P01)"',
        "test_probe_verdicts",
        ("postgres",),
    ),
    Fault(
        "redis-refusal-not-seen",
        "kinds/redis/probe.py",
        '            Verdict.REFUSED,\n            "AUTH refused (WRONGPASS)"',
        '            Verdict.UNKNOWN,\n            "AUTH refused (WRONGPASS)"',
        "test_probe_verdicts",
        ("redis",),
    ),
    Fault(
        "postgres-no-control",
        "kinds/postgres/probe.py",
        "    if not options.control or first.verdict is not Verdict.ACCEPTED:",
        "    if True:",
        "test_probe_verdicts",
        ("postgres",),
    ),
    Fault(
        "redis-no-control",
        "kinds/redis/probe.py",
        "    if not control or first.verdict is not Verdict.ACCEPTED:",
        "    if True:",
        "test_probe_verdicts",
        ("redis",),
    ),
    Fault(
        "postgres-down-is-refused",
        "kinds/postgres/probe.py",
        '            return Verdict.UNKNOWN, f"{what}: {message}"',
        '            return Verdict.REFUSED, f"{what}: {message}"',
        "test_a_server_that_is_down",
        ("postgres",),
    ),
    Fault(
        "redis-down-is-refused",
        "kinds/redis/probe.py",
        "        return _result(\n            Verdict.UNKNOWN, _error_reason(exc, password) + plain",
        "        return _result(\n            Verdict.REFUSED, _error_reason(exc, password) + plain",
        "test_a_server_that_is_down",
        ("redis",),
    ),
    Fault(
        "seaweedfs-create-wrong-secret",
        "provisioner/harness.py",
        "adapter.create(consumer.login, _password(secret), consumer.values)",
        'adapter.create(consumer.login, _password(secret) + "x", consumer.values)',
        "test_create_makes",
        ("seaweedfs",),
        more=(
            (
                "provisioner/harness.py",
                "Wanted(consumer.login, _password(secret), consumer.values)",
                'Wanted(consumer.login, _password(secret) + "x", consumer.values)',
            ),
        ),
    ),
    Fault(
        "seaweedfs-every-run-rewrites",
        "kinds/seaweedfs/adapter.py",
        "if held.digest == secret_digest(item.password.encode()) and held.in_place:",
        "if False:",
        "test_an_unchanged_run_writes_nothing",
        ("seaweedfs",),
        more=(
            (
                "provisioner/harness.py",
                "elif have is not None and have.digest == consumer.digest and have.in_place:",
                "elif False:",
            ),
        ),
    ),
    Fault(
        "seaweedfs-drift-not-looked-at",
        "kinds/seaweedfs/adapter.py",
        "if held.digest == secret_digest(item.password.encode()) and held.in_place:",
        "if held.in_place:",
        "test_drift_is_restored",
        ("seaweedfs",),
    ),
    Fault(
        "seaweedfs-removal-drops-the-bucket",
        "kinds/seaweedfs/adapter.py",
        'self.session.run([f"s3.configure -user={login} -delete -apply"])',
        'self.session.run([f"s3.configure -user={login} -delete -apply", '
        "f\"s3.bucket.delete -name {login.replace('_', '-')}\"])",
        "test_removal_keeps",
        ("seaweedfs",),
    ),
    Fault(
        "seaweedfs-foreign-taken-as-ours",
        "kinds/seaweedfs/adapter.py",
        'return _display_name(identity) == self.marker and not identity.get("isStatic")',
        'return not identity.get("isStatic")',
        "test_logins_meshtui_did_not_make",
        ("seaweedfs",),
    ),
    Fault(
        "seaweedfs-names-not-checked",
        "kinds/seaweedfs/adapter.py",
        "if not _NAME.fullmatch(item.login):",
        "if False:",
        "test_a_name_the_server_cannot_hold",
        ("seaweedfs",),
    ),
    Fault(
        "seaweedfs-refusal-not-seen",
        "kinds/seaweedfs/probe.py",
        '                Verdict.REFUSED, f"signed request refused ({code}) over TLS"',
        '                Verdict.UNKNOWN, f"signed request refused ({code}) over TLS"',
        "test_probe_verdicts",
        ("seaweedfs",),
    ),
    Fault(
        "seaweedfs-no-control",
        "kinds/seaweedfs/probe.py",
        "    if not options.control or first.verdict is not Verdict.ACCEPTED:",
        "    if True:",
        "test_probe_verdicts",
        ("seaweedfs",),
    ),
    Fault(
        "seaweedfs-down-is-refused",
        "kinds/seaweedfs/probe.py",
        '            Verdict.UNKNOWN, scrub(f"{type(exc).__name__}: {exc}", target.password)',
        '            Verdict.REFUSED, scrub(f"{type(exc).__name__}: {exc}", target.password)',
        "test_a_server_that_is_down",
        ("seaweedfs",),
    ),
)


def run(fault: Fault) -> list[str]:
    """Inject ``fault`` in a copy and run its check; the kinds for which it was NOT caught."""
    with tempfile.TemporaryDirectory(prefix="meshtui-fault-") as tmp:
        skip = shutil.ignore_patterns("__pycache__", "__snapshots__")
        for part in ("meshtui", "tests"):
            shutil.copytree(ROOT / part, Path(tmp) / part, ignore=skip)
        shutil.copy(ROOT / "pyproject.toml", tmp)
        for file, old, new in ((fault.file, fault.old, fault.new), *fault.more):
            target = Path(tmp) / "meshtui" / file
            text = target.read_text()
            if old not in text:
                raise SystemExit(f"{fault.name}: the text to break is not in {file}")
            target.write_text(text.replace(old, new))
        missed = []
        for kind in fault.kinds:
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pytest",
                    "-q",
                    "-x",
                    "-p",
                    "no:cacheprovider",
                    "tests/kinds/test_contract.py",
                    "-k",
                    f"{fault.check} and {kind}",
                ],
                cwd=tmp,  # pytest puts the copy's root first on sys.path
                env={**os.environ, "PYTHONPATH": tmp},
                capture_output=True,
                text=True,
                check=False,
            )
            summary = (done.stdout.strip().splitlines() or ["(no output)"])[-1]
            caught = done.returncode == 1 and " failed" in summary
            print(f"{fault.name:34} {kind:9} {'caught' if caught else 'MISSED'}: {summary}")
            if not caught:
                missed.append(kind)
        return missed


def main(names: list[str]) -> int:
    chosen = [f for f in FAULTS if not names or f.name in names]
    missed = [f"{f.name}/{k}" for f in chosen for k in run(f)]
    if missed:
        print("not caught:", ", ".join(missed))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
