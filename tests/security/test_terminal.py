"""Attack: text from a node reaching the operator's terminal as control sequences.

What an agent reports (an error, a provisioner's reason) is printed by the CLI. A provider's
software, a declared provisioner command or a node taken over can put escape sequences in it:
erase the line that says FAILED, set the terminal's clipboard (OSC 52), retitle the window.
The console must show such text, never obey it. Real agents over real sockets, the real CLI.
"""

from __future__ import annotations

import sys
from pathlib import Path

ESCAPES = "\x1b]52;c;cm0gLXJmIH4=\x07\x1b[1A\x1b[2Kdelivered"


def test_a_reason_with_escape_sequences_reaches_the_terminal_as_text(
    mesh_with_agents, tmp_path: Path
) -> None:
    script = tmp_path / "provision"  # a declared provisioner relaying its software's message
    script.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        "logins = [c['as'] for c in json.load(open(sys.argv[-1]))['consumers']]\n"
        f"print(json.dumps({{'ok': False, 'outcomes': [{{'login': x, 'outcome': 'failed', "
        f"'reason': {ESCAPES!r}}} for x in logins]}}))\n"
    )
    script.chmod(0o755)
    mesh = mesh_with_agents(
        consumers={"app1": ["gitea"]}, port=5432, admin=None, provisioner=[str(script)]
    )
    for args in (("push",), ("status",)):
        done = mesh.cli(*args)
        shown = done.stdout + done.stderr
        assert "\x1b" not in shown and "\x07" not in shown, repr(shown)
    assert "\\x1b" in mesh.cli("status").stdout + mesh.cli("push").stdout


def test_a_nodes_reason_in_the_rotation_plan_is_shown_not_obeyed() -> None:
    """The dashboard's rotation plan shows each node's reason, which its agent wrote."""
    from meshtui.controller.reports import Resolution, RotationPlan
    from meshtui.tui.screens.plan import plan_text

    plan = RotationPlan(
        pairs=["database:app1/gitea->db1/postgres"],
        nodes=[Resolution(node="app1", ok=False, reason=ESCAPES)],
    )
    plain = plan_text(plan).plain
    assert "\x1b" not in plain and "\x07" not in plain
    assert "\\x1b]52" in plain
