"""Make SVG screenshots of the real dashboard on a state folder, for review and the README.

    .venv/bin/python scripts/screenshots.py --state state            # into docs/screenshots/
    .venv/bin/python scripts/screenshots.py --state S --drill run    # also run a drill (rotates!)

It drives the real app headless (``App.run_test`` + ``save_screenshot``) and writes main.svg,
pair.svg, plan.svg (the plan is shown, never confirmed), drill.svg, hosts.svg, audit.svg and
help.svg. A drill rotates a credential, so by default drill.svg shows the newest *stored* drill
(the pair screen's checklist); ``--drill run`` runs one through the UI on the first working pair.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from textual.pilot import Pilot  # noqa: E402

from meshtui.controller.core import Controller  # noqa: E402
from meshtui.tui.app import MeshApp  # noqa: E402
from meshtui.tui.screens.main import MainScreen  # noqa: E402
from meshtui.tui.screens.pair import PairScreen  # noqa: E402
from meshtui.tui.screens.plan import PlanScreen  # noqa: E402


async def settle(
    pilot: Pilot[Any], wait: Callable[[], bool] | None = None, limit: float = 30
) -> None:
    """Wait for background work (and for ``wait()`` to hold, up to ``limit`` seconds)."""
    loops = int(limit / 0.1)
    for _ in range(loops):
        await pilot.app.workers.wait_for_complete()
        await pilot.pause(0.1)
        if wait is None or wait():
            return
    print(f"  (gave up waiting after {limit:.0f} s)", file=sys.stderr)


def pick_pair(state: Path, *, with_drill: bool) -> str | None:
    """A live pair to show: working first; with ``with_drill``, one that has a stored drill."""
    with Controller.open(state, read_only=True) as ctl:
        rows = [r for r in ctl.status() if not r.withdrawn]
        if with_drill:
            for r in rows:
                if ctl.pair_detail(r.pair).drills:
                    return r.pair
            return None
    rows.sort(key=lambda r: (r.state != "working", r.pair))
    return rows[0].pair if rows else None


async def shoot(state: Path, out: Path, size: tuple[int, int], drill: str) -> list[Path]:
    """Every screenshot, in one app session; returns the files written."""
    written: list[Path] = []
    app = MeshApp(state, poll_seconds=0, keymap_paths=[])

    def save(name: str) -> None:
        path = Path(app.save_screenshot(f"{name}.svg", path=str(out)))
        written.append(path)
        print(f"  {path}")

    first = pick_pair(state, with_drill=False)
    async with app.run_test(size=size) as pilot:
        await settle(pilot, lambda: app.loaded_once)
        main = app.screen
        assert isinstance(main, MainScreen)
        if first:
            main.table.move_to(first)
        await pilot.pause()
        save("main")
        if first is None:
            print("no pairs: only the main screen was taken", file=sys.stderr)
            return written

        await pilot.press("enter")
        await settle(
            pilot, lambda: isinstance(app.screen, PairScreen) and app.screen.detail is not None
        )
        save("pair")
        await pilot.press("escape")

        await pilot.press("r")
        await settle(
            pilot, lambda: isinstance(app.screen, PlanScreen) and app.screen.plan is not None
        )
        save("plan")
        if isinstance(app.screen, PlanScreen):
            await pilot.press("escape")  # never confirmed here

        if drill == "run":
            await pilot.press("d")
            await settle(
                pilot, lambda: isinstance(app.screen, PlanScreen) and app.screen.plan is not None
            )
            plan = app.screen.plan if isinstance(app.screen, PlanScreen) else None
            if plan is not None and plan.ok:
                await pilot.click("#confirm")
                await settle(pilot, lambda: app.job is None, limit=120)
                save("drill")
            else:
                print("the drill's plan did not resolve every node: no drill.svg", file=sys.stderr)
            await pilot.press("escape")
        elif drill == "stored":
            drilled = pick_pair(state, with_drill=True)
            if drilled is None:
                print("no stored drill yet (use --drill run): no drill.svg", file=sys.stderr)
            else:
                main.table.move_to(drilled)
                await pilot.press("enter")
                await settle(
                    pilot,
                    lambda: isinstance(app.screen, PairScreen) and app.screen.detail is not None,
                )
                app.screen.query_one("#drills-label").scroll_visible(top=True, animate=False)
                await pilot.pause(0.2)
                save("drill")
                await pilot.press("escape")

        await pilot.press("h")
        await settle(pilot)
        save("hosts")
        await pilot.press("question_mark")
        await pilot.pause()
        save("help")
        await pilot.press("escape")

    audit = MeshApp(state, read_only=True, screen="audit", poll_seconds=0, keymap_paths=[])
    async with audit.run_test(size=size) as pilot:
        await settle(pilot)
        path = Path(audit.save_screenshot("audit.svg", path=str(out)))
        written.append(path)
        print(f"  {path}")
    return written


def main(argv: list[str] | None = None) -> int:
    """Parse arguments and take the screenshots."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--state", type=Path, required=True, help="the state folder to show")
    parser.add_argument("--out", type=Path, default=Path("docs/screenshots"), help="where to write")
    parser.add_argument("--size", default="120x36", help="terminal size, COLSxROWS")
    parser.add_argument(
        "--drill",
        choices=["stored", "run", "skip"],
        default="stored",
        help="drill.svg from a stored drill (default), by running one (rotates a pair), or none",
    )
    args = parser.parse_args(argv)
    cols, rows = (int(n) for n in args.size.lower().split("x"))
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"screenshots of {args.state} at {cols}x{rows}:")
    written = asyncio.run(shoot(args.state, args.out, (cols, rows), args.drill))
    print(f"{len(written)} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
