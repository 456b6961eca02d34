"""Helpers for the dashboard's pilot tests: an app that records its toasts, a way to wait for
background work, and fake controller actions for flows that would need agents.

:class:`FakeActions` replaces the controller's *action* methods only (plan_rotation, rotate,
probe, drill, push), so the app's own workers, messages and screens run unchanged and reads
stay real. ``test_real_agents.py`` drives the same flows end to end with real agents.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from textual.pilot import Pilot
from textual.widgets import Static
from textual.worker import WorkerCancelled

from meshtui.controller.core import Controller
from meshtui.controller.reports import (
    DrillReport,
    DrillStep,
    PairOutcome,
    ProbeOutcome,
    PushReport,
    Resolution,
    RotationPlan,
    RotationReport,
)
from meshtui.model import RotationState
from meshtui.tui.app import MeshApp
from tests.tui.builder import FIXED_NOW


class RecordingApp(MeshApp):
    """The real app, remembering every toast so tests can assert on what the operator read."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("clock", lambda: FIXED_NOW)
        kwargs.setdefault("keymap_paths", [])
        kwargs.setdefault("poll_seconds", 0)
        super().__init__(*args, **kwargs)
        self.toasts: list[tuple[str, str]] = []

    def notify(self, message: Any, *, severity: Any = "information", **kwargs: Any) -> None:
        self.toasts.append((str(message), str(severity)))
        super().notify(message, severity=severity, **kwargs)

    def toast_text(self) -> str:
        """Every toast so far, one per line."""
        return "\n".join(f"{sev}: {msg}" for msg, sev in self.toasts)


async def settle(pilot: Pilot[Any], rounds: int = 3) -> None:
    """Let workers finish and their messages land (a few rounds: handlers start new work)."""
    app = pilot.app
    for _ in range(rounds):
        try:
            await app.workers.wait_for_complete()
        except WorkerCancelled:  # a newer load replaced an older one (exclusive workers)
            continue
        await pilot.pause(0.01)  # a thread's post_message lands on a later loop turn


def static_text(widget: Any) -> str:
    """What a Static holding a Rich renderable (a table) shows, as plain text."""
    assert isinstance(widget, Static)
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(widget.content)
    return console.export_text()


def sha256(path: Path) -> str:
    """The file's digest (read-only tests compare it before and after)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass
class FakeActions:
    """Answers for the controller's actions, and a log of every call made to them."""

    calls: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    unresolved: dict[str, str] = field(default_factory=dict)
    fail_with: BaseException | None = None
    drill_ok: bool = True
    drill_sessions: tuple[str, int | None, int | None] = ("", None, None)

    def plan(self, ctl: Controller, ids: list[str]) -> RotationPlan:
        self.calls.append(("plan", tuple(ids)))
        nodes = sorted({n for pid in ids for n in _nodes_of(pid)})
        return RotationPlan(
            pairs=sorted(ids),
            nodes=[
                Resolution(
                    node=n,
                    ok=n not in self.unresolved,
                    reason=self.unresolved.get(n, "answered, key ab:cd"),
                    pairs=[p for p in ids if n in _nodes_of(p)],
                )
                for n in nodes
            ],
        )

    def _act(self, ctl: Controller, kind: str, ids: list[str], progress: Any) -> None:
        ctl._writable(kind)  # the real refusal, so read-only tests see the controller refuse
        self.calls.append((kind, tuple(ids)))
        if self.fail_with is not None:
            raise self.fail_with
        for i, step in enumerate(("resolving", "minting", "providers", "consumers")):
            progress(step, i, 4)
        progress("done", 4, 4)

    def rotate(self, ctl: Controller, ids: Any, progress: Any) -> RotationReport:
        ids = list(ids)
        self._act(ctl, "rotate", ids, progress)
        return RotationReport(
            rotation=7,
            outcome=RotationState.DONE,
            pairs=[PairOutcome(p, True, 2, previous=1, window_ms=12.5) for p in ids],
        )

    def probe(self, ctl: Controller, ids: Any = None, progress: Any = None) -> list[ProbeOutcome]:
        ids = list(ids) if ids is not None else ctl.live_pairs()
        self._act(ctl, "probe", ids, progress)
        return [ProbeOutcome(p, "accepted", "logged in", 3.25) for p in ids]

    def drill(self, ctl: Controller, ids: Any, progress: Any) -> list[DrillReport]:
        ids = list(ids)
        self._act(ctl, "drill", ids, progress)
        last = "refused" if self.drill_ok else "accepted"
        return [
            DrillReport(
                pair=p,
                ok=self.drill_ok,
                steps=[
                    DrillStep("old before", "accepted", "accepted", 3.0),
                    DrillStep("new after", "accepted", "accepted", 2.5),
                    DrillStep(
                        "old after", "refused", last, 2.0, "" if self.drill_ok else "still on"
                    ),
                ],
                window_ms=41.5,
                rotation=9,
                reason="old worked before, new works after, old is refused after",
                sessions=self.drill_sessions[0],
                sessions_before=self.drill_sessions[1],
                sessions_after=self.drill_sessions[2],
            )
            for p in ids
        ]

    def push(self, ctl: Controller, progress: Any) -> PushReport:
        self._act(ctl, "push", [], progress)
        return PushReport(
            delivered=[PairOutcome("database:app1/gitea->db1/postgres", True, 1)],
            withdrawn=[],
            behind={},
        )

    def kinds(self) -> list[str]:
        """The kinds of the calls so far."""
        return [k for k, _ in self.calls]


def _nodes_of(pid: str) -> tuple[str, str]:
    rest = pid.split(":", 1)[1]
    consumer, provider = rest.split("->")
    return consumer.split("/")[0], provider.split("/")[0]


def install_fake(monkeypatch: Any) -> FakeActions:
    """Replace the controller's action methods with a :class:`FakeActions`."""
    f = FakeActions()
    monkeypatch.setattr(Controller, "plan_rotation", lambda self, ids: f.plan(self, list(ids)))
    monkeypatch.setattr(
        Controller,
        "rotate",
        lambda self, ids, progress=None, probe_after=False: f.rotate(self, ids, progress),
    )
    monkeypatch.setattr(
        Controller, "probe", lambda self, ids=None, progress=None: f.probe(self, ids, progress)
    )
    monkeypatch.setattr(
        Controller, "drill", lambda self, ids, progress=None: f.drill(self, ids, progress)
    )
    monkeypatch.setattr(Controller, "push", lambda self, progress=None: f.push(self, progress))
    return f
