"""What the dashboard says of an overlap pair: its screen names its rotation (and grace), and a
drill of it shows how long both credentials were accepted and how many logins were refused,
where a swap's shows its window."""

from __future__ import annotations

from meshtui.controller.reports import DrillReport, DrillStep
from meshtui.model import OVERLAP, RotationMode
from meshtui.tui.screens.pair import rotation_words
from meshtui.tui.widgets.drill_checklist import drill_text

PAIR = "cache:app1/gitea->db1/redis"
STEPS = [
    DrillStep("old before", "accepted", "accepted", 2.0),
    DrillStep("new after", "accepted", "accepted", 2.1),
    DrillStep("old after", "refused", "refused", 1.9),
]


def test_an_overlap_drill_shows_the_both_accepted_span_and_the_refusals() -> None:
    report = DrillReport(
        PAIR, True, STEPS, None, 7, rotation_kind=OVERLAP, both_accepted_ms=41.5, refused=0
    )
    text = drill_text(report).plain
    assert "overlap: both accepted 41.5 ms · 0 logins refused" in text, text
    assert "window" not in text


def test_a_swap_drill_shows_its_window() -> None:
    text = drill_text(DrillReport(PAIR, True, STEPS, 2.7, 8)).plain
    assert "window 2.7 ms" in text and "overlap" not in text


def test_a_pair_screen_says_how_the_pair_rotates() -> None:
    assert rotation_words(RotationMode(OVERLAP, 30.0)).startswith("overlap:")
    assert "grace 30s" in rotation_words(RotationMode(OVERLAP, 30.0))
    assert rotation_words(RotationMode()).startswith("swap:")
