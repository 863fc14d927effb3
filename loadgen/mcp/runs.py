"""Background runs: started by one tool call, watched and stopped by later ones.

The :class:`RunManager` owns every run's task (one ``TaskGroup``, entered for the
server's lifetime). Each run lives in ``WORKDIR/runs/RUN_ID/``: ``run.json`` (what was
asked, its state, timestamps), and what the run wrote (``results.json`` for a load run,
the phase files and reports for a scenario run). A run ends ``completed``, ``cancelled``
(``cancel_run``), ``stopped`` (it reached the server's ``--max-duration``) or
``failed``; the first three keep everything measured until then.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import secrets
import sys
import time
import traceback
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import AsyncIterator, Awaitable, Callable

from ..atomic import write_atomic
from ..engine import LevelResult, RunControl
from ..errors import ConfigError, LoadgenError, one_line
from ..load import Load
from ..metrics import UNIT_SCALE
from ..record import now_iso
from .confine import RESULTS_MAX_BYTES, regular_file
from .options import ServerOptions

if sys.version_info < (3, 11):  # pragma: no cover
    from taskgroup import TaskGroup
else:
    from asyncio import TaskGroup

RUNNING, COMPLETED, CANCELLED, STOPPED, FAILED = (
    "running", "completed", "cancelled", "stopped", "failed")
ENDED = (COMPLETED, CANCELLED, STOPPED, FAILED)
ABANDONED = "abandoned"  # run.json says running, but no server is running it any more
LOAD, SCENARIO = "load", "scenario"
RESULTS_FILE = "results.json"
RUN_FILE = "run.json"
LIVE_METRICS = ("ttft_ms", "itl_ms")
LIVE_EVERY_S = 1.0
# Time to the millisecond, so that sorting ids sorts runs by start (two runs often start
# within one second); ids without milliseconds come from older versions.
_RUN_ID = re.compile(r"^\d{8}-\d{6}(\.\d{3})?-[0-9a-f]{4}$")
_COUNTS = ("completed", "failed", "incomplete", "dropped", "output_tokens")


def is_run_id(text: str) -> bool:
    return _RUN_ID.match(text) is not None


def new_run_id() -> str:
    now = time.time()
    millis = int(now * 1000) % 1000
    return (time.strftime("%Y%m%d-%H%M%S", time.gmtime(now)) + f".{millis:03d}-"
            + secrets.token_hex(2))


class LoadProgress:
    """What a load run has done so far, fed by ``api.sweep``'s progress callbacks."""

    def __init__(self, levels_total: int) -> None:
        self.levels_total = levels_total
        self.levels_done = 0
        self.level: str | None = None
        self.finished = dict.fromkeys(_COUNTS, 0)  # levels already measured
        self.current: dict = {}  # the running level's latest snapshot
        self._metrics = None  # the running level's live LevelMetrics
        self._live: dict = {}  # its percentiles, as last read
        self._live_at = float("-inf")

    def on_progress(self, load: Load, snap: dict) -> None:
        self.level = load.label
        self._metrics = snap.get("metrics")
        self.current = {k: v for k, v in snap.items() if k != "metrics"}

    def on_level(self, level: LevelResult) -> None:
        counts = level.metrics.statistics()
        for key in _COUNTS:
            self.finished[key] += counts[key]
        self.levels_done += 1
        self.current, self._metrics, self._live_at = {}, None, float("-inf")

    def statistics(self) -> dict:
        """Counts over the whole run so far, and the running level's TTFT/ITL percentiles."""
        totals = {key: self.finished[key] + self.current.get(key, 0) for key in _COUNTS}
        return {**totals, "in_flight": self.current.get("in_flight", 0),
                "level": self.level if self.current else None,
                "level_elapsed_s": round(self.current.get("elapsed_s", 0.0), 1),
                "levels_done": self.levels_done, "levels_total": self.levels_total,
                "live": self._live_percentiles()}

    def _live_percentiles(self) -> dict:
        """TTFT/ITL p50 and p99 so far. Reading them walks the histograms (milliseconds) on
        the loop the measurement runs on, so they are read at most once a second."""
        if self._metrics is None:
            return {}
        now = time.monotonic()
        if now - self._live_at >= LIVE_EVERY_S:
            self._live, self._live_at = {}, now
            for name in LIVE_METRICS:
                hist = self._metrics.hists[name]
                count = hist.get_total_count()
                values = hist.get_percentile_to_value_dict([50, 99]) if count else {}
                self._live[name] = {f"p{p}": (values[p] * UNIT_SCALE[name] if count else None)
                                    for p in (50, 99)} | {"count": count}
        return self._live


@dataclass
class Run:
    run_id: str
    kind: str  # LOAD or SCENARIO
    directory: Path
    request: dict  # the call's arguments, after the server's limits
    notes: list[str] = field(default_factory=list)  # what the limits changed
    control: RunControl = field(default_factory=RunControl)
    progress: LoadProgress | None = None  # load runs
    log: deque = field(default_factory=lambda: deque(maxlen=40))  # scenario runs
    state: str = RUNNING
    stop_reason: str | None = None  # CANCELLED or STOPPED, once asked to stop
    error: str | None = None
    started_at: str = field(default_factory=now_iso)
    finished_at: str | None = None
    started_ns: int = field(default_factory=time.perf_counter_ns)
    elapsed_s: float | None = None  # set when it ends
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def stop(self, reason: str) -> None:
        if self.state == RUNNING and self.stop_reason is None:
            self.stop_reason = reason
            self.control.stop()

    def elapsed(self) -> float:
        if self.elapsed_s is not None:
            return self.elapsed_s
        return round((time.perf_counter_ns() - self.started_ns) / 1e9, 1)

    def record(self) -> dict:
        """``run.json``: enough to list the run after the server is gone."""
        record = {"run_id": self.run_id, "kind": self.kind, "state": self.state,
                  "started_at": self.started_at, "finished_at": self.finished_at,
                  "elapsed_s": self.elapsed(), "request": self.request, "notes": self.notes,
                  "error": self.error}
        if self.progress is not None:  # load runs: how many levels the run has planned
            record["levels_total"] = self.progress.levels_total
        return record

    def save(self) -> None:
        write_atomic(self.directory / RUN_FILE, json.dumps(self.record(), indent=2) + "\n")


RunBody = Callable[[Run], Awaitable[None]]


class RunManager:
    """Starts, tracks and stops background runs; enter :meth:`running` for the server's life."""

    def __init__(self, options: ServerOptions) -> None:
        self.options = options
        self.runs: dict[str, Run] = {}
        self._tasks: TaskGroup | None = None

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator["RunManager"]:
        """Own the run tasks. On the way out, stop what still runs: each writes what it
        measured (partial) before the server goes."""
        async with TaskGroup() as tasks:
            self._tasks = tasks
            try:
                yield self
            finally:
                for run in self.active():
                    run.stop(CANCELLED)
                self._tasks = None

    def active(self) -> list[Run]:
        return [run for run in self.runs.values() if run.state == RUNNING]

    def start(self, kind: str, request: dict, body: RunBody, notes: list[str] = (),
              levels_total: int = 0) -> Run:
        """Create the run's directory and start ``body(run)`` in the background."""
        if self._tasks is None:
            raise ConfigError("the server is shutting down; no new runs")
        busy = self.active()
        if len(busy) >= self.options.max_active_runs:
            raise ConfigError(f"run {busy[0].run_id} is still going and this server runs "
                              f"{self.options.max_active_runs} at a time: wait for it "
                              "(run_status) or stop it (cancel_run)")
        run_id = new_run_id()
        while run_id in self.runs or (self.options.runs_dir / run_id).exists():
            run_id = new_run_id()
        run = Run(run_id, kind, self.options.runs_dir / run_id, request, list(notes))
        if kind == LOAD:
            run.progress = LoadProgress(levels_total)
        run.directory.mkdir(parents=True)
        run.save()
        self.runs[run_id] = run
        self._tasks.create_task(self._supervise(run, body))
        return run

    async def _supervise(self, run: Run, body: RunBody) -> None:
        """Run ``body`` under the time limit; never raises (a failed run is a state)."""
        limit = asyncio.get_running_loop().call_later(self.options.max_duration_s,
                                                      run.stop, STOPPED)
        try:
            await body(run)
            run.state = run.stop_reason or COMPLETED
        except LoadgenError as exc:  # stopped during the preflight, too: RunStopped
            run.state, run.error = run.stop_reason or FAILED, str(exc)
        except Exception as exc:  # noqa: BLE001 - a bug in one run must not end the server
            traceback.print_exc(file=sys.stderr)
            run.state, run.error = FAILED, one_line(f"internal error: {type(exc).__name__}: {exc}")
        finally:
            limit.cancel()
            run.elapsed_s = run.elapsed()
            run.finished_at = now_iso()
            if run.state == RUNNING:  # cancelled from outside (server shutting down)
                run.state = CANCELLED
            run.save()
            run.done.set()

    async def wait(self, run: Run, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the run to end; True when it has."""
        try:
            await asyncio.wait_for(run.done.wait(), timeout_s)
        except asyncio.TimeoutError:
            return False
        return True

    # -- runs on disk ----------------------------------------------------------------
    def directory_of(self, run_id: str) -> Path:
        """The directory of a run of this work directory; ConfigError when there is none."""
        if not _RUN_ID.match(run_id):
            raise ConfigError(f"{run_id!r} is not a run id (like 20261201-093000.250-1a2b); "
                              "list_runs shows them")
        directory = self.options.runs_dir / run_id
        if not (directory / RUN_FILE).exists():
            raise ConfigError(f"no run {run_id} in {self.options.runs_dir}; list_runs shows "
                              "the runs")
        if not self._inside(directory):
            raise ConfigError(f"run {run_id}: its folder is a link out of the work directory "
                              f"{self.options.workdir}; only the work directory is read")
        return directory

    def run_file(self, run_id: str, name: str) -> Path:
        """A file a run wrote (results.json, summary.json, a phase file): a regular file in
        the run's folder (not a link out of it), under the results size cap."""
        path = self.directory_of(run_id) / name
        if path.exists() and not path.resolve().is_relative_to(self.options.runs_dir.resolve()):
            raise ConfigError(f"run {run_id}: {name} is a link out of the work directory; "
                              "only the work directory is read")
        return regular_file(path, "results file", RESULTS_MAX_BYTES)

    def _inside(self, directory: Path) -> bool:
        """Whether a run folder and its run.json (symlinks followed) are in the work
        directory: a run folder linked elsewhere is not read."""
        runs = self.options.runs_dir.resolve()
        return all(path.resolve().is_relative_to(runs)
                   for path in (directory, directory / RUN_FILE))

    def record(self, run_id: str) -> dict:
        """The run's record: live when this server runs it, else from its ``run.json``."""
        if run_id in self.runs:
            return self.runs[run_id].record()
        path = regular_file(self.directory_of(run_id) / RUN_FILE, "run file", RESULTS_MAX_BYTES)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ConfigError(f"run {run_id}: its {RUN_FILE} is not readable JSON "
                              f"({exc})") from None
        if data.get("state") == RUNNING:
            data["state"] = ABANDONED
        return data

    def list_records(self) -> list[dict]:
        """Every run in the work directory, newest first."""
        if not self.options.runs_dir.is_dir():
            return []
        ids = sorted((p.parent.name for p in self.options.runs_dir.glob(f"*/{RUN_FILE}")
                      if _RUN_ID.match(p.parent.name) and self._inside(p.parent)),
                     reverse=True)
        return [self.record(run_id) for run_id in ids]
