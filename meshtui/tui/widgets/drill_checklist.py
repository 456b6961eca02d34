"""A drill as a checklist: the three logins, what each should do, what it did, and how fast,
then the sessions open on the old credential before and after the rotation.

A drill proves a rotation: the old credential logs in before, the new one after, and the old
one is refused after. Each line says expected and actual in words, with ✓ or ✗, so the verdict
reads the same with or without colour.
"""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.widgets import Static

from meshtui.controller.reports import DrillReport

STEP_NAMES = ("old before", "new after", "old after")


def drill_text(report: DrillReport, *, when: str = "") -> Text:
    """The checklist as text (literal: nothing in it is parsed as markup)."""
    text = Text(no_wrap=False)
    verdict = "✓ PASSED" if report.ok else "✗ FAILED"
    text.append(verdict, "bold green" if report.ok else "bold red")
    text.append("  ")
    text.append(report.pair, "bold")
    window = f"{report.window_ms:.1f} ms" if report.window_ms is not None else "not measured"
    text.append(f"\n   window {window}")
    if report.rotation is not None:
        text.append(f" · rotation {report.rotation}")
    if when:
        text.append(f" · {when}")
    done = {s.name: s for s in report.steps}
    for name in STEP_NAMES:
        step = done.get(name)
        text.append("\n   ")
        if step is None:
            text.append(f"· {name:<11} not run", "dim")
            continue
        mark = "✓" if step.ok else "✗"
        latency = f"{step.latency_ms:7.1f} ms" if step.latency_ms is not None else "      - ms"
        text.append(
            f"{mark} {step.name:<11} expected {step.expected:<8} got {step.verdict:<8} {latency}",
            "green" if step.ok else "red",
        )
        if step.reason and not step.ok:
            text.append(f"  {step.reason}", "dim")
    if report.sessions:
        lingering = report.sessions == "end" and report.sessions_after != 0
        text.append("\n   ")
        text.append(
            ("✗ " if lingering else "· ") + report.sessions_line(), "red" if lingering else ""
        )
    if report.reason:
        text.append(f"\n   {report.reason}", "dim")
    return text


class DrillChecklist(Static):
    """One drill's checklist."""

    DEFAULT_CSS: ClassVar[str] = """
    DrillChecklist { height: auto; margin: 0 0 1 0; }
    """

    def __init__(self, report: DrillReport, *, when: str = "") -> None:
        super().__init__(drill_text(report, when=when))
        self.report = report
