"""A declared provisioner command's report is decoded into its typed shape, or fails by field.

Each test runs a real executable through :func:`meshtui.host.receive.run_provisioner.provision`, as the agent
does after writing a manifest: what the command prints on stdout is its report.
"""

from __future__ import annotations

import json
import os
import pwd
import stat
from pathlib import Path

from meshtui.host.policy.node_policy import Command
from meshtui.host.receive.run_provisioner import MAX_REASON, ProvisionReport, provision
from meshtui.model import OutcomeName
from meshtui.protocol.messages import ProviderSet

LOGINS = ["app_gitea", "app_wiki"]


def run_command(tmp_path: Path, stdout: str, code: int = 0) -> ProvisionReport:
    """Declare a command provisioner that prints ``stdout`` and exits ``code``; run it."""
    script = tmp_path / "provisioner"
    script.write_text(f"#!/bin/sh\ncat <<'EOF'\n{stdout}\nEOF\nexit {code}\n")
    script.chmod(stat.S_IRWXU)
    manifest = tmp_path / "mesh.json"
    manifest.write_text("{}")
    spec: ProviderSet = {
        "provider": "db1/postgres",
        "provision": "postgres",
        "receives": str(manifest),
        "grants": "",
        "admin": None,
        "provisioner": [str(script)],
        "pin": False,
        "consumers": [{"as": login} for login in LOGINS],  # type: ignore[typeddict-item]
    }

    def never(manifest: Path, admin: Path) -> ProvisionReport:
        raise AssertionError("a declared command must run, not the built-in provisioner")

    allowed = Command((str(script),), pwd.getpwuid(os.geteuid()).pw_name)  # the node's policy
    return provision(spec, manifest, never, command=allowed)


def outcomes(report: ProvisionReport) -> list[tuple[str, str]]:
    return [(o["login"], o["outcome"]) for o in report["outcomes"]]


def test_a_report_with_an_outcome_that_is_not_one_fails_naming_the_field(tmp_path):
    secretish = "created-and-the-password-is-hunter2"
    given = {"ok": True, "outcomes": [{"login": "app_gitea", "outcome": secretish}]}
    report = run_command(tmp_path, json.dumps(given))
    assert not report["ok"]
    assert outcomes(report) == [(login, OutcomeName.FAILED) for login in LOGINS]
    reason = report["outcomes"][0]["reason"]
    assert "$.outcomes[0].outcome" in reason and "provisioner" in reason
    assert "hunter2" not in json.dumps(report)  # the command's text is not echoed


def test_a_report_with_a_login_that_is_not_a_string_fails_naming_it(tmp_path):
    given = {"outcomes": [{"login": 7, "outcome": "created"}]}
    report = run_command(tmp_path, json.dumps(given))
    assert not report["ok"]
    assert outcomes(report) == [(login, OutcomeName.FAILED) for login in LOGINS]
    assert report["outcomes"][1]["reason"].endswith(
        "Expected `str`, got `int` - at `$.outcomes[0].login`"
    )


def test_a_report_without_outcomes_fails_naming_them(tmp_path):
    report = run_command(tmp_path, json.dumps({"ok": True}))
    assert not report["ok"]
    assert "missing required field `outcomes`" in report["outcomes"][0]["reason"]


def test_a_good_report_keeps_login_outcome_and_a_short_reason(tmp_path):
    given = {
        "ok": True,
        "outcomes": [
            {"login": "app_gitea", "outcome": "created", "node": "app1", "extra": [1]},
            {"login": "app_wiki", "outcome": "failed", "reason": "x" * 5000},
        ],
    }
    report = run_command(tmp_path, json.dumps(given))
    assert report["ok"] and "error" not in report
    assert outcomes(report) == [("app_gitea", "created"), ("app_wiki", "failed")]
    assert report["outcomes"][0]["outcome"] is OutcomeName.CREATED
    assert report["outcomes"][0]["reason"] == ""
    assert report["outcomes"][1]["reason"] == "x" * MAX_REASON
    assert set(report["outcomes"][0]) == {"login", "outcome", "reason"}


def test_no_report_is_judged_by_the_exit_code(tmp_path):
    applied = run_command(tmp_path, "done, nothing to report")
    assert applied["ok"] and outcomes(applied) == [(x, "updated") for x in LOGINS]
    assert "unverified" in applied["outcomes"][0]["reason"]
    failed = run_command(tmp_path, "boom", code=3)
    assert not failed["ok"] and failed["error"].endswith("exited 3")
    assert outcomes(failed) == [(x, "failed") for x in LOGINS]
