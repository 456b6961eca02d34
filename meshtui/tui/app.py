"""The dashboard application: the controller's front door seen through Textual.

The app owns the state every screen shares (the pairs model, the summary, the job running) and
the background work: every controller call runs in a thread worker that opens its own
``Controller`` and posts a message from :mod:`meshtui.tui.events`; ``@on`` handlers here
turn those into UI changes. :meth:`MeshApp.report_error` is the one place an exception becomes
something the operator reads. Read-only is enforced twice: :meth:`MeshApp.allows` hides and
blocks every action that changes things or asks an agent, and every controller is opened
read-only, so it never loads its key and refuses whatever gets through (a toast naming the
nodes it would have contacted).
"""

from __future__ import annotations

import gc
import os
import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from textual import on
from textual.app import App
from textual.binding import BindingType
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.timer import Timer
from textual.worker import Worker, WorkerState

from meshtui.controller.core import INVENTORY, Controller, share_inventory_connections
from meshtui.controller.freshness import InventoryStamp
from meshtui.controller.read.heartbeat import Heartbeat
from meshtui.controller.reports import (
    JobResult,
    Progress,
    PushReport,
    RotationReport,
    SecretDrillReport,
    SecretsRotated,
    Summary,
    is_drills,
    is_probes,
)
from meshtui.errors import MeshtuiError, ReadOnlyError
from meshtui.model import PairStatus, Verdict
from meshtui.terminal import require_terminal, shown
from meshtui.tui import actions
from meshtui.tui.dashboard import Clock, Dashboard
from meshtui.tui.events import (
    Job,
    JobFailed,
    JobFinished,
    JobKind,
    JobProgress,
    LeadRead,
    Loaded,
    Looked,
    Notified,
)
from meshtui.tui.keymap import config_paths, load_keymap
from meshtui.tui.pairs import PairModel, parse_time, short_age
from meshtui.tui.palette import MeshCommands
from meshtui.tui.screens import job as job_screen
from meshtui.tui.screens.base import failure_context, run_in_background
from meshtui.tui.screens.job import JobRecord, JobScreen

Read = TypeVar("Read")

FIRST_PAGE = 250
"""Pairs read and shown first when the dashboard starts on more than this many: a screenful on
the tallest terminal. The rest follow in the same worker a moment later; until then the summary
says it is still reading and actions wait."""

PAGE_WAIT = 1.0
"""At most this many seconds the whole read waits for the first screenful to be drawn."""

FEED_WAIT = 0.5
"""Seconds the change feed's worker waits at a time: how soon it notices the app closing."""

PROGRESS_PERIOD = 0.05
"""Seconds between two redraws of a job's progress. A rotation reports one line per pair, all
at once when it ends (10,000 lines for 10,000 pairs): lines are kept as they come and drawn in
batches, so the dashboard keeps up instead of redrawing once per line."""


JobRun = Callable[[Controller, tuple[str, ...], Progress], JobResult]
JOB_RUNS: dict[JobKind, JobRun] = {
    JobKind.ROTATE: lambda ctl, ids, progress: ctl.rotate(ids, progress, probe_after=True),
    JobKind.DRILL: lambda ctl, ids, progress: ctl.drill(ids, progress),
    JobKind.PROBE: lambda ctl, ids, progress: ctl.probe(ids or None, progress),
    JobKind.PUSH: lambda ctl, ids, progress: ctl.push(progress),
    JobKind.ROTATE_SECRETS: lambda ctl, ids, progress: ctl.rotate_secrets(ids, progress),
    JobKind.DRILL_SECRET: lambda ctl, ids, progress: ctl.secret_drill(*ids[0].split(" ")[1:3]),
}
"""What each kind of job runs on a fresh controller: its pairs and the progress callback."""


def utc_now() -> datetime:
    """The real clock (tests and screenshots pass a fixed one)."""
    return datetime.now(UTC)


class MeshApp(App[int]):
    """The meshtui dashboard on one state folder."""

    TITLE = "meshtui"
    CSS_PATH = Path(__file__).parent / "meshtui.tcss"
    BINDINGS: ClassVar[list[BindingType]] = actions.bindings("app")
    COMMANDS = App.COMMANDS | {MeshCommands}
    NOTIFICATION_TIMEOUT = 6

    def __init__(
        self,
        state_dir: Path | str,
        *,
        read_only: bool = False,
        screen: str | None = None,
        clock: Clock = utc_now,
        keymap_paths: list[Path] | None = None,
        poll_seconds: float = 1.0,
    ) -> None:
        super().__init__()
        self.state_dir = Path(state_dir)
        self.read_only = read_only
        self.start_screen = screen
        self.clock = clock
        self.poll_seconds = poll_seconds
        self.model = PairModel()
        self.summary: Summary | None = None
        self.loaded_once = False
        self.complete = False  # every pair read (not only the first screenful)
        self._page_shown = threading.Event()  # the first screenful is on screen
        self.load_seconds: float | None = None
        self.note = ""
        self.job: Job | None = None
        self.job_progress: tuple[str, int, int] | None = None
        self.job_record: JobRecord | None = None
        self._stamp: InventoryStamp | None = None
        self._status_reader: Controller | None = None  # kept open: its reads keep what they made
        self._status_file: tuple[int, int] | None = None  # the (device, inode) it reads
        self._status_lock = threading.Lock()
        self.watch_line = ""  # "watch running · last cycle 2s ago", or "" without a watch
        self.lead_line = ""  # "leader ctl-a (...), epoch 4, 12 s left on its lease", or ""
        self._load_seq = 0
        self._applied_seq = 0
        self._heap_frozen = False
        self._progress_timer: Timer | None = None
        self._progress_drawn = 0.0
        self._feed_stop = threading.Event()  # set when the app ends: the feed's thread stops
        self._feed_thread: threading.Thread | None = None
        keymap = load_keymap(
            keymap_paths if keymap_paths is not None else config_paths(self.state_dir)
        )
        self.keymap = keymap.keymap
        self.keymap_sources = keymap.sources
        self.keymap_problems = [shown(p) for p in keymap.problems]  # a keymap file is outside text
        self.sub_title = self.state_dir.name + ("  READ-ONLY" if read_only else "")

    # ---- lifecycle ----------------------------------------------------------------------
    def get_default_screen(self) -> Screen[Any]:
        from meshtui.tui.screens.main import MainScreen

        return MainScreen()

    def on_load(self) -> None:
        share_inventory_connections(True)  # every worker opens the inventory: pool its sessions
        # start reading the inventory before the screen is built: the read overlaps startup
        self.reload()

    def on_mount(self) -> None:
        self._read_heartbeat()
        if self.keymap:
            self.set_keymap(self.keymap)
        for problem in self.keymap_problems:
            self.notify(problem, title="keymap", severity="warning", markup=False, timeout=12)
        if self.start_screen == "audit":
            self.action_audit()
        elif self.start_screen == "hosts":
            self.action_hosts()
        if self.poll_seconds > 0:
            self.set_interval(self.poll_seconds, self._poll)
        self._follow_feed()

    def open_controller(self, *, reader: bool = False) -> Controller:
        """A fresh controller for one worker; readers always open the inventory read-only.

        A read-only controller never contacts an agent, so work that asks agents (a plan, a
        check of the hosts) is not a reader: it opens the dashboard's own kind of controller.
        """
        return Controller.open(self.state_dir, read_only=self.read_only or reader)

    def read(self, read: Callable[[Controller], Read], *, reader: bool = True) -> Read:
        """``read`` on a fresh controller, closed after (run in a worker thread)."""
        with self.open_controller(reader=reader) as ctl:
            return read(ctl)

    # ---- read-only ----------------------------------------------------------------------
    def allows(self, action: str) -> bool:
        """False, in a read-only dashboard, for an action that changes things or asks an agent
        (hidden and refused)."""
        return not (self.read_only and action in actions.READ_ONLY_OFF)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return self.allows(action)

    # ---- loading ------------------------------------------------------------------------
    def reload(self) -> None:
        """Read every pair's status again in a thread worker (a newer load replaces an older)."""
        self._load_seq += 1
        run_in_background(
            self,
            partial(self._load, self._load_seq, first_page=not self.loaded_once),
            name="load",
            context="load",
        )

    def _load(self, seq: int, *, first_page: bool = False) -> Loaded:
        """One numbered read of every pair (a worker thread); ``seq`` orders it among loads.

        ``first_page``: post the first screenful of pairs before it (nothing is shown yet, and a
        screenful reads in milliseconds where 10,000 pairs take a tenth of a second and more).
        """
        start = time.perf_counter()
        stamp = Controller.inventory_stamp(self.state_dir)
        if stamp is None:
            note = f"no inventory in {self.state_dir}: run meshtui init, then meshtui declare FILE"
            return Loaded(PairModel.build([], self.clock()), None, 0.0, note, seq)
        self._stamp = stamp
        with self.open_controller(reader=True) as ctl:
            rows = ctl.status(limit=FIRST_PAGE + 1) if first_page else []
            if len(rows) > FIRST_PAGE:  # more than a screenful: show that much first
                page = PairModel.build(rows[:FIRST_PAGE], self.clock())
                seconds = time.perf_counter() - start
                self.post_message(Loaded(page, None, seconds, "", seq, partial=True))
                # the whole read holds the interpreter most of the time it runs: let the frame
                # that shows the first screenful be drawn before it starts
                self._page_shown.wait(PAGE_WAIT)
            if not first_page or len(rows) > FIRST_PAGE:
                rows = self._every_status()
            secrets = ctl.secrets()
            summary = ctl.summary(rows, secrets)
            dues = {d.pair: d for d in ctl.schedule(declared_only=True)}
        seconds = time.perf_counter() - start
        fresh = PairModel.build(rows, self.clock(), dues, secrets)
        return Loaded(fresh, summary, seconds, "", seq)

    def _every_status(self) -> list[PairStatus]:
        """Every pair's status through one read-only controller kept open between loads: it
        keeps what it made and next reads and makes only the pairs written since, by any
        process (controller/status.py). Opened again when the inventory is another file (a
        restore into this folder); a shared inventory on PostgreSQL has no file."""
        with self._status_lock:
            try:
                st = os.stat(self.state_dir / INVENTORY)
                file: tuple[int, int] | None = (st.st_dev, st.st_ino)
            except FileNotFoundError:  # an inventory on PostgreSQL: no file to be replaced
                file = None
            if self._status_reader is None or file != self._status_file:
                self._close_status_reader()
                self._status_reader = self.open_controller(reader=True)
                self._status_file = file
            return self._status_reader.status(keep=True)

    def _close_status_reader(self) -> None:
        """Close the kept status reader, if open (the caller holds its lock)."""
        if self._status_reader is not None:
            self._status_reader.close()
            self._status_reader = self._status_file = None

    @on(Loaded)
    def _loaded(self, message: Loaded) -> None:
        if message.seq < self._applied_seq or (message.partial and self.complete):
            return  # an older read finished after a newer one: keep the newer
        self._applied_seq = message.seq
        changes = self.model.merge(message.fresh)
        self.summary = message.summary
        self.note = message.note
        self.load_seconds = message.seconds
        self.complete = not message.partial
        if message.partial:
            self.call_after_refresh(self._page_shown.set)
        first = not self.loaded_once
        self.loaded_once = True
        for screen in self.screen_stack:
            refresh = getattr(screen, "pairs_changed", None)
            if refresh is not None:
                refresh(changes, first)
        if first or changes.keys_changed:
            self.call_after_refresh(self._settle_heap)

    def _settle_heap(self) -> None:
        """Freeze every object alive now (rows, screens, Textual itself) out of the collector's way.

        A full collection walks every object the collector tracks: with 10,000 pairs loaded
        that is about 90,000 objects and 40-60 ms, and Python starts one on its own now and
        then, which used to land in the middle of a filter keystroke. Frozen objects are
        skipped by later collections; reference counting still frees the rows a reload
        replaces. Runs after the frame that shows a load that replaced the rows (the first, or
        one where pairs came or went), after a cheap collection of the young generations; the
        price is that a reference cycle already in the oldest generation, or one made later
        out of frozen objects, waits for the app to exit, which unfreezes everything.
        """
        gc.collect(1)
        gc.freeze()
        self._heap_frozen = True

    def on_unmount(self) -> None:
        self._feed_stop.set()
        if self._feed_thread is not None:
            self._feed_thread.join(FEED_WAIT * 4)
        with self._status_lock:
            self._close_status_reader()
        share_inventory_connections(False)
        if self._heap_frozen:
            gc.unfreeze()  # what this app leaves behind becomes collectable again
            self._heap_frozen = False

    def _poll(self) -> None:
        """Reload when the inventory changed (another process or controller, or our own job):
        looked at off the UI thread, since on PostgreSQL the look is a query."""
        if self._stamp is not None:
            state_dir = self.state_dir
            run_in_background(
                self,
                lambda: Looked(Controller.inventory_stamp(state_dir)),
                name="look",
                context="looking for changes",
                failed=lambda exc: Looked(None),
            )
        self._read_heartbeat()

    def _follow_feed(self) -> None:
        """On a shared inventory (PostgreSQL), a thread that waits on its change feed and
        posts :class:`Notified` at every commit, any controller's, so the dashboard reloads at
        once rather than at its next poll (which stays, for a feed that is reconnecting). A
        thread of its own, not a worker: it runs as long as the app, and tests wait for every
        worker to finish."""
        try:
            feed = Controller.change_feed(self.state_dir)
        except MeshtuiError:  # the conninfo file unreadable: the loads say so, the poll stays
            return
        if feed is None:
            return
        stop = self._feed_stop

        def follow() -> None:
            with feed:
                while not stop.is_set():
                    if feed.wait(FEED_WAIT) and not stop.is_set():
                        self.post_message(Notified())

        self._feed_thread = threading.Thread(target=follow, name="meshtui-feed", daemon=True)
        self._feed_thread.start()

    @on(Notified)
    def _notified(self, message: Notified) -> None:
        if self._stamp is not None:
            self.reload()

    @on(Looked)
    def _looked(self, message: Looked) -> None:
        if message.stamp is not None and self._stamp is not None and message.stamp != self._stamp:
            self.reload()

    def _read_heartbeat(self) -> None:
        """Whether a ``meshtui watch`` runs on this state folder, for the header (a tiny file),
        and who leads the controllers of a shared inventory (read in a thread: a query)."""
        state_dir = self.state_dir
        run_in_background(
            self,
            lambda: LeadRead(Controller.leadership(state_dir).line() or ""),
            name="lead",
            context="reading who leads",
            failed=lambda exc: LeadRead(f"leader unknown: {exc}"),
        )
        self._show_watch()

    @on(LeadRead)
    def _lead_read(self, message: LeadRead) -> None:
        if message.line != self.lead_line:
            self.lead_line = message.line
            self._show_watch()

    def _show_watch(self) -> None:
        parts = (watch_line(Heartbeat.read(self.state_dir), self.clock()), self.lead_line)
        line = " · ".join(p for p in parts if p)
        if line != self.watch_line:
            self.watch_line = line
            self._refresh_summaries()

    # ---- jobs (the actions that change things) ------------------------------------------
    def plan_job(self, job: Job) -> None:
        """Rotation and drill: show the plan (its worker asks the agents), run on confirm."""
        from meshtui.tui.screens.plan import PlanScreen

        if not self._may_start(job):
            return
        self.push_screen(PlanScreen(job), callback=partial(self._confirmed, job))

    def confirm_job(self, job: Job, question: str) -> None:
        """A job with no plan (push): ask first, focus on Cancel."""
        from meshtui.tui.screens.confirm import ConfirmScreen

        if not self._may_start(job):
            return
        self.push_screen(
            ConfirmScreen(job.title, question, confirm=job.title),
            callback=partial(self._confirmed, job),
        )

    def _confirmed(self, job: Job, yes: bool | None) -> None:
        if yes:
            self.start_job(job)

    def _may_start(self, job: Job) -> bool:
        if not self.allows(job.kind):
            self.report_error(ReadOnlyError(job.kind), job.kind)
            return False
        if not self.complete:  # only the first screenful is read: a set could be cut short
            self.notify("still reading the inventory; try again in a moment", severity="warning")
            return False
        if self.job is not None:
            self.notify(
                f"{self.job.title} is still running; wait for it (o shows it)",
                severity="warning",
                markup=False,
            )
            return False
        if not job.ids and job.kind.needs_pairs:
            self.notify("nothing selected", severity="warning")
            return False
        return True

    def start_job(self, job: Job) -> None:
        """Run ``job`` in a thread worker and show its progress screen."""
        if not self._may_start(job):
            return
        self.job = job
        self.job_progress = ("starting", 0, 0)
        self.job_record = JobRecord(job)
        self.push_screen(JobScreen(self.job_record))
        self._refresh_summaries()
        run_in_background(
            self,
            partial(self._run_job, job),
            name=f"job:{job.kind}",
            context=job.title,
            exclusive=False,
            failed=partial(JobFailed, job),  # the error boundary is report_error, on the UI thread
        )

    def _run_job(self, job: Job) -> JobFinished:
        start = job_screen.clock()  # the job log's clock, so a frozen one freezes both

        def progress(text: str, done: int, total: int) -> None:
            self.post_message(JobProgress(job, text, done, total))

        with self.open_controller() as ctl:
            result = JOB_RUNS[job.kind](ctl, job.ids, progress)
        return JobFinished(job, result, job_screen.clock() - start)

    def _job_screens(self) -> list[JobScreen]:
        return [s for s in self.screen_stack if isinstance(s, JobScreen)]

    @on(JobProgress)
    def _job_progress(self, message: JobProgress) -> None:
        record = self.job_record
        if record is None or record.job is not message.job:
            return
        self.job_progress = (message.text, message.done, message.total)
        record.progress(message.text, message.done, message.total)
        if self._progress_timer is None:
            wait = self._progress_drawn + PROGRESS_PERIOD - time.monotonic()
            if wait <= 0:
                self._draw_progress()
            else:
                self._progress_timer = self.set_timer(wait, self._draw_progress)

    def _draw_progress(self) -> None:
        """Show what the job reported since the last time (at most every PROGRESS_PERIOD)."""
        if self._progress_timer is not None:
            self._progress_timer.stop()
            self._progress_timer = None
        self._progress_drawn = time.monotonic()
        for screen in self._job_screens():
            screen.progressed()
        self._refresh_summaries()

    @on(JobFinished)
    @on(JobFailed)
    def _job_ended(self, message: JobFinished | JobFailed) -> None:
        self.job = None
        self.job_progress = None
        record = self.job_record
        if record is not None and record.job is message.job:
            self._draw_progress()  # the last lines, before the outcome
            record.finished = True
            if isinstance(message, JobFinished):
                record.result, record.seconds = message.result, message.seconds
            else:
                record.error = message.error
            for screen in self._job_screens():
                screen.finished()
        if isinstance(message, JobFinished):
            text, severity = job_toast(message.job, message.result)
            self.notify(shown(text), title=message.job.title, severity=severity, markup=False)
        else:
            self.report_error(message.error, message.job.title)
        self._refresh_summaries()
        self.reload()

    def _refresh_summaries(self) -> None:
        for screen in self.screen_stack:
            refresh = getattr(screen, "job_changed", None)
            if refresh is not None:
                refresh()

    # ---- the error boundary -------------------------------------------------------------
    def report_error(self, error: BaseException, context: str) -> None:
        """The one place an exception becomes a message: a toast, or a modal when unexpected."""
        if isinstance(error, MeshtuiError | OSError):
            self.notify(
                shown(str(error)),
                title=f"{context} failed",
                severity="error",
                markup=False,
                timeout=12,
            )
            return
        from meshtui.tui.screens.confirm import ErrorScreen

        self.notify(
            shown(f"{type(error).__name__}: {error}"),
            title=f"{context} failed",
            severity="error",
            markup=False,
            timeout=12,
        )
        self.push_screen(ErrorScreen(f"{context} failed", error))

    @on(Worker.StateChanged)
    def _worker_changed(self, event: Worker.StateChanged) -> None:
        if event.state is WorkerState.ERROR and event.worker.error is not None:
            self.report_error(event.worker.error, failure_context(event.worker))

    # ---- navigation and small actions ---------------------------------------------------
    def action_help(self) -> None:
        """Every binding, by screen, with the keys in force."""
        from meshtui.tui.screens.help import HelpScreen

        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_pairs(self) -> None:
        """Back to the main table."""
        while len(self.screen_stack) > 1:
            self.pop_screen()

    def action_hosts(self) -> None:
        """The hosts screen."""
        from meshtui.tui.screens.hosts import HostsScreen

        self._switch_to(HostsScreen)

    def action_audit(self) -> None:
        """The audit screen."""
        from meshtui.tui.screens.audit import AuditScreen

        self._switch_to(AuditScreen)

    def _switch_to(self, kind: type[Screen[Any]]) -> None:
        if isinstance(self.screen, kind):
            return
        self.action_pairs()
        self.push_screen(kind())

    def action_outcome(self) -> None:
        """Show the last job's progress screen again."""
        if self.job_record is None:
            self.notify("no action has run yet", severity="information")
        elif not self._job_screens():
            self.push_screen(JobScreen(self.job_record))

    def copy_value(self, what: str, value: str) -> None:
        """OSC 52 copy of a non-secret value, with the value in the toast."""
        self.copy_to_clipboard(value)
        self.notify(value, title=f"copied {what}", timeout=4, markup=False)

    def live_ids(self, keys: Iterable[str]) -> list[str]:
        """The live (not withdrawn) pairs among ``keys``."""
        return self.model.live(keys)


def watch_line(beat: Heartbeat | None, now: datetime) -> str:
    """The header's words about the watch: running and its last cycle, or stopped, or ""."""
    if beat is None:
        return ""
    if not beat.running():
        when = parse_time(beat.stopped_at or beat.last_cycle_at)
        ago = f" {short_age((now - when).total_seconds())} ago" if when else ""
        return f"watch stopped{ago}"
    if beat.role == "standby":
        return "watch standing by" + (f" for {beat.leader}" if beat.leader else "")
    when = parse_time(beat.last_cycle_at)
    if when is None:
        return "watch starting"
    return f"watch running · last cycle {short_age((now - when).total_seconds())} ago"


def job_toast(job: Job, result: JobResult) -> tuple[str, SeverityLevel]:
    """The end-of-job toast: one line, and whether it is good news."""
    if isinstance(result, RotationReport):
        windows = [p.window_ms for p in result.pairs if p.window_ms is not None]
        longest = f", longest window {max(windows):.0f} ms" if windows else ""
        number = f" {result.rotation}" if result.rotation is not None else ""
        text = f"rotation{number} {result.outcome}: {len(result.pairs)} pairs{longest}"
        if result.reason:
            text += f" ({result.reason})"
        return text, "information" if result.ok else "warning"
    if isinstance(result, PushReport):
        text = f"delivered {len(result.delivered)}, withdrawn {len(result.withdrawn)}"
        if result.ahead:
            text += f", {len(result.ahead)} ahead of the inventory (rotated past)"
        if result.claims:
            text += f", {len(result.claims)} nodes claimed ends not their own (not believed)"
        if result.behind:
            text += f", {len(result.behind)} still behind"
        return text, "information" if result.ok else "warning"
    if isinstance(result, SecretDrillReport):
        text = f"{result.module} {result.name}: " + ("passed" if result.ok else "FAILED")
        return f"{text} ({result.reason})", "information" if result.ok else "error"
    if isinstance(result, SecretsRotated):
        behind = [s for s in result.secrets if s.state != "working"]
        text = f"rotated {len(result.secrets)} secrets" + (
            f", {len(behind)} not in place yet (push finishes them)" if behind else ""
        )
        return text, "information" if result.ok else "warning"
    if is_drills(result):
        failed = [r for r in result if not r.ok]
        text = f"{len(result) - len(failed)} passed" + (f", {len(failed)} FAILED" if failed else "")
        return text, "information" if not failed else "error"
    if is_probes(result):
        verdicts: dict[str, int] = {}
        for r in result:
            verdicts[r.verdict] = verdicts.get(r.verdict, 0) + 1
        text = f"probed {len(result)}: " + ", ".join(
            f"{n} {v}" for v, n in sorted(verdicts.items())
        )
        bad = any(r.verdict != Verdict.ACCEPTED for r in result)
        return text, "warning" if bad else "information"
    return f"{job.title}: done", "information"


def run_dashboard(state_dir: Path, *, read_only: bool = False, screen: str | None = None) -> int:
    """Open the dashboard on ``state_dir`` until the operator quits; the CLI's entry point.
    Without a terminal it refuses (InputError, one line) instead of drawing into a pipe."""
    require_terminal("the dashboard")
    app = MeshApp(state_dir, read_only=read_only, screen=screen)
    result = app.run()
    if app.return_code not in (None, 0):
        return int(app.return_code)
    return int(result or 0)


if TYPE_CHECKING:

    def _is_a_dashboard(app: MeshApp) -> Dashboard:
        """The app is what its screens hold (checked by mypy, never run)."""
        return app
